/**
 * `algohost doctor`: what the docs ask of a machine, checked one line at a time, each problem
 * with its fix (docs/deployment.md "Checking a machine"). It runs the same probes the server
 * runs at start (a real bubblewrap sandbox, a real seccomp filter, a real request to each build
 * registry through the builds' proxy and CAs) and reaches the shared services of a cluster the
 * way a node would (PostgreSQL, S3, NATS with the node's settings), changing nothing but a probe
 * object it writes and removes again.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import pg from 'pg';
import { jetstreamManager } from '@nats-io/jetstream';
import type { Config } from '../config.ts';
import { redactUrl } from '../store/redact.ts';
import { probeSandbox } from '../runtime/sandbox.ts';
import { probeGvisor } from '../runtime/gvisor.ts';
import { probeFence } from '../runtime/egressFence.ts';
import { seccompProgram } from '../runtime/seccomp.ts';
import { GIT_HTTP_BACKEND } from '../algorithms/gitRepos.ts';
import { BuildNetwork } from '../algorithms/buildNetwork.ts';
import { openBlobStore } from '../data/blobBackends.ts';
import { connectNats, redactNatsUrl } from '../cluster/nats.ts';

export type CheckStatus = 'ok' | 'warn' | 'fail' | 'skip';

export interface CheckResult {
  check: string;
  status: CheckStatus;
  /** What was found, one line. */
  detail: string;
  /** What to do about it (warn and fail). */
  fix?: string;
}

/** Free space in the home below which the check fails, and below which it warns. */
const DISK_FAIL_BYTES = 1024 ** 3;
const DISK_WARN_BYTES = 10 * 1024 ** 3;
/** Clock skew against the database that fails the check, and that warns (ms). */
const SKEW_FAIL_MS = 2_000;
const SKEW_WARN_MS = 500;
/** The oldest PostgreSQL the store is tested on (Debian 12's 15; 13 has every feature it uses). */
const PG_MIN_VERSION = 130_000;
const TIMEOUT_MS = 10_000;

const ok = (check: string, detail: string): CheckResult => ({ check, status: 'ok', detail });
const skip = (check: string, detail: string): CheckResult => ({ check, status: 'skip', detail });
const fail = (check: string, detail: string, fix: string): CheckResult => ({ check, status: 'fail', detail, fix });
const warn = (check: string, detail: string, fix: string): CheckResult => ({ check, status: 'warn', detail, fix });

/** Every check, in order; none throws (a check that cannot run is a failure saying why). */
export async function runDoctor(config: Config): Promise<CheckResult[]> {
  const checks: Array<() => CheckResult | CheckResult[] | Promise<CheckResult | CheckResult[]>> = [
    () => sandboxCheck(config),
    () => userNamespaces(),
    () => cgroupCheck(),
    () => seccompCheck(config),
    () => fenceCheck(config),
    () => gitCheck(),
    () => registryCheck(config, 'npm'),
    () => registryCheck(config, 'pip'),
    () => databaseChecks(config),
    () => blobCheck(config),
    () => natsCheck(config),
    () => diskCheck(config),
  ];
  const out: CheckResult[] = [];
  for (const run of checks) {
    try {
      const r = await run();
      out.push(...(Array.isArray(r) ? r : [r]));
    } catch (err) {
      out.push(fail('doctor', `a check could not run: ${(err as Error).message}`, 'report it: a check should say what is wrong, not fail itself'));
    }
  }
  return out;
}

/** One line per check, the fix indented under each problem; for a terminal. */
export function formatDoctor(results: CheckResult[]): string {
  const width = Math.max(...results.map((r) => r.check.length));
  const lines: string[] = [];
  for (const r of results) {
    lines.push(`${r.status.toUpperCase().padEnd(4)}  ${r.check.padEnd(width)}  ${r.detail}`);
    if (r.fix) lines.push(`${' '.repeat(6 + width)}  fix: ${r.fix}`);
  }
  const failed = results.filter((r) => r.status === 'fail').length;
  const warned = results.filter((r) => r.status === 'warn').length;
  lines.push('', failed === 0 ? `no problems${warned ? ` (${warned} warning${warned > 1 ? 's' : ''})` : ''}` : `${failed} problem${failed > 1 ? 's' : ''}${warned ? `, ${warned} warning${warned > 1 ? 's' : ''}` : ''}`);
  return lines.join('\n');
}

function sandboxCheck(config: Config): CheckResult {
  if (config.sandbox === 'gvisor') {
    const g = probeGvisor(config.runscPath);
    return g.available ? ok('sandbox', `gVisor (${config.runscPath}) runs a sandbox`) : fail('sandbox', `ALGOHOST_SANDBOX=gvisor, but gVisor cannot run a sandbox: ${g.reason}`, 'apt-get install runsc, or ALGOHOST_SANDBOX=auto for bubblewrap (docs/security.md)');
  }
  const s = probeSandbox(config.bwrapPath);
  if (s.available && s.hostPaths !== undefined) return warn('sandbox', `bubblewrap (${config.bwrapPath}) makes a sandbox, but ${s.hostPaths}`, 'Linux 5.11 or later (overlays in user namespaces), or ALGOHOST_SANDBOX=gvisor (docs/security.md)');
  if (s.available) return ok('sandbox', `bubblewrap (${config.bwrapPath}) makes a sandbox: own namespaces, uid 65534, no capabilities`);
  return fail('sandbox', `algorithms would run without a sandbox: ${s.reason}`, 'apt-get install bubblewrap, and allow user namespaces (below); ALGOHOST_SANDBOX=required makes the server refuse to start without one (docs/security.md)');
}

function readNumber(file: string): number | undefined {
  try {
    return Number(fs.readFileSync(file, 'utf8').trim());
  } catch {
    return undefined;
  }
}

function userNamespaces(): CheckResult {
  const max = readNumber('/proc/sys/user/max_user_namespaces');
  if (max === 0) return fail('user namespaces', 'user.max_user_namespaces is 0: no sandbox can be made', 'sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/ to keep it)');
  // Debian's own switch for unprivileged users (absent on kernels without the patch).
  const clone = readNumber('/proc/sys/kernel/unprivileged_userns_clone');
  if (clone === 0 && process.getuid?.() !== 0) return fail('user namespaces', 'kernel.unprivileged_userns_clone is 0 and this user is not root', 'sysctl -w kernel.unprivileged_userns_clone=1');
  const apparmor = readNumber('/proc/sys/kernel/apparmor_restrict_unprivileged_userns');
  if (apparmor === 1 && process.getuid?.() !== 0) return warn('user namespaces', 'AppArmor restricts unprivileged user namespaces', 'allow them for bwrap with an AppArmor profile, or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0');
  return ok('user namespaces', `available${max !== undefined ? ` (up to ${max})` : ''}`);
}

/**
 * Which cgroup controllers a server started here could use, read without creating a group: v2
 * (one hierarchy; memory and pids delegated to where this process is) or v1 (a writable
 * hierarchy per controller).
 */
export function cgroupCheck(root = '/sys/fs/cgroup', self = '/proc/self/cgroup'): CheckResult {
  const fix = 'with systemd: run the server in a unit with Delegate=yes (v2), or give its user a writable memory and pids hierarchy (v1); docs/security.md "Limits"';
  let lines: string[];
  try {
    lines = fs.readFileSync(self, 'utf8').trim().split('\n');
  } catch {
    return warn('cgroups', 'this kernel has no cgroups: memory and process limits are rlimits only', fix);
  }
  const v2 = lines.find((l) => l.startsWith('0::'));
  const v1 = lines.filter((l) => !l.startsWith('0::'));
  const usable = (dir: string) => {
    try {
      fs.accessSync(dir, fs.constants.W_OK);
      return true;
    } catch {
      return false;
    }
  };
  const found: string[] = [];
  const missing: string[] = [];
  for (const controller of ['memory', 'pids']) {
    const line = v1.find((l) => l.split(':')[1]?.split(',').includes(controller));
    if (line) {
      const dir = path.join(root, controller, line.split(':')[2] ?? '/');
      (usable(dir) ? found : missing).push(`${controller} (v1)`);
      continue;
    }
    if (v2 !== undefined) {
      const dir = path.join(root, v2.slice(3));
      let controllers = '';
      try {
        controllers = fs.readFileSync(path.join(dir, 'cgroup.controllers'), 'utf8');
      } catch {
        // Not mounted where expected.
      }
      (controllers.split(/\s+/).includes(controller) && usable(dir) ? found : missing).push(`${controller} (v2)`);
      continue;
    }
    missing.push(controller);
  }
  if (missing.length === 0) return ok('cgroups', `${found.join(', ')}: each worker gets a group with its memory and process limits`);
  const detail = `${missing.join(', ')} not writable here${found.length ? `; ${found.join(', ')} usable` : ''}: a worker's limits fall back to rlimits`;
  return warn('cgroups', detail, fix);
}

function seccompCheck(config: Config): CheckResult {
  const program = seccompProgram();
  if (!program) return warn('seccomp', `no filter for this architecture (${process.arch}): only x86_64 has one`, 'run algorithms on x86_64, or under gVisor (ALGOHOST_SANDBOX=gvisor)');
  let status = '';
  try {
    status = fs.readFileSync('/proc/self/status', 'utf8');
  } catch {
    // No /proc: the probe below says what it can.
  }
  if (status && !/^Seccomp:/m.test(status)) return fail('seccomp', 'this kernel has no seccomp (CONFIG_SECCOMP_FILTER)', 'use a kernel built with seccomp filters (every distribution kernel is)');
  if (!fs.existsSync(config.bwrapPath)) return skip('seccomp', `the kernel has it; not tried without bubblewrap (${config.bwrapPath})`);
  // The filter loaded by bubblewrap the way a worker's is; inside, unshare(2) (one of the calls
  // it refuses) tried where it would otherwise work.
  const file = path.join(os.tmpdir(), `algohost-doctor-seccomp-${process.pid}`);
  fs.writeFileSync(file, program);
  const fd = fs.openSync(file, 'r');
  const base = ['--unshare-all', '--unshare-user', '--uid', '65534', '--gid', '65534', '--cap-drop', 'ALL', '--ro-bind', '/usr', '/usr', '--symlink', 'usr/lib', '/lib', '--symlink', 'usr/lib64', '/lib64', '--symlink', 'usr/bin', '/bin', '--dev', '/dev'];
  const tryUnshare = ['--', '/usr/bin/sh', '-c', '/usr/bin/unshare --user /usr/bin/true 2>/dev/null && exit 3; exit 0'];
  try {
    const unfiltered = spawnSync(config.bwrapPath, [...base, ...tryUnshare], { stdio: 'ignore', timeout: TIMEOUT_MS });
    const r = spawnSync(config.bwrapPath, [...base, '--seccomp', '3', ...tryUnshare], { stdio: ['ignore', 'ignore', 'pipe', fd], timeout: TIMEOUT_MS });
    if (r.status === 3) return fail('seccomp', 'the filter loads but does not refuse unshare(2)', 'report it: the filter in src/runtime/seccomp.ts does not match this kernel');
    if (r.status !== 0) return fail('seccomp', `bubblewrap could not load the filter: ${String(r.stderr).trim() || r.error?.message || `exit ${r.status}`}`, 'a kernel with seccomp filters and bubblewrap 0.4 or later');
    const shown = unfiltered.status === 3 ? 'unshare(2), allowed without it, is refused' : 'a sandbox runs under it';
    return ok('seccomp', `the filter loads (${program.length / 8} instructions): ${shown}`);
  } finally {
    fs.closeSync(fd);
    fs.rmSync(file, { force: true });
  }
}

function fenceCheck(config: Config): CheckResult {
  if (config.algorithmNetwork === 'none') return skip('egress fence', 'ALGOHOST_ALGORITHM_NETWORK=none: algorithms and builds get no network');
  if (config.algorithmNetwork === 'host') return warn('egress fence', "ALGOHOST_ALGORITHM_NETWORK=host: algorithms that ask for the network share the server's, internal services included", 'ALGOHOST_ALGORITHM_NETWORK=nat (the default) puts them behind the fence (docs/security.md)');
  const f = probeFence();
  if (f.available) return ok('egress fence', 'a network namespace with its filter and NAT can be made: the internet, nothing of ours');
  return fail('egress fence', `algorithms and builds that need the network cannot have it: ${f.reason}`, 'apt-get install nftables slirp4netns iproute2 util-linux (docs/security.md)');
}

function gitCheck(): CheckResult {
  try {
    fs.accessSync(GIT_HTTP_BACKEND, fs.constants.X_OK);
    return ok('git', `${GIT_HTTP_BACKEND} serves algorithm sources (git push, clone)`);
  } catch {
    return fail('git', `${GIT_HTTP_BACKEND} is missing: git push and clone of algorithms answer 503`, 'apt-get install git');
  }
}

async function registryCheck(config: Config, installer: 'npm' | 'pip'): Promise<CheckResult> {
  const name = installer === 'npm' ? 'npm registry' : 'pip index';
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-doctor-'));
  try {
    const network = new BuildNetwork(config.build, dir);
    const url = await network.registry(installer);
    const problem = await network.check(installer, url);
    if (problem === undefined) return ok(name, `${redactUrl(url)} answers${config.build.httpsProxy || config.build.httpProxy ? ' (through the proxy builds use)' : ''}`);
    const [what, fix] = splitFix(problem);
    return fail(name, `${installer === 'npm' ? 'JavaScript builds with dependencies' : 'Python builds with requirements'} will fail: ${what}`, fix);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** BuildNetwork's sentences say "<what is wrong>: <what to do>". */
function splitFix(sentence: string): [string, string] {
  const i = sentence.lastIndexOf(': ');
  return i < 0 ? [sentence, 'docs/configuration.md'] : [sentence.slice(0, i), sentence.slice(i + 2)];
}

async function databaseChecks(config: Config): Promise<CheckResult[]> {
  if (!config.database) {
    const file = path.join(config.home, 'metadata.sqlite');
    return [ok('database', `SQLite, ${file}${fs.existsSync(file) ? '' : ' (made at the first start)'}: one machine`), skip('clock', 'one machine: no other node to agree with')];
  }
  const where = redactUrl(config.database.url);
  const client = new pg.Client({ connectionString: config.database.url, connectionTimeoutMillis: TIMEOUT_MS, query_timeout: TIMEOUT_MS });
  try {
    await client.connect();
  } catch (err) {
    const e = err as Error & { code?: string };
    return [
      fail('database', `PostgreSQL at ${where} cannot be used: ${e.message}${e.code ? ` (${e.code})` : ''}`, 'check ALGOHOST_DATABASE_URL (host, port, user, password, database) and that the server accepts connections from here (pg_hba.conf)'),
      skip('clock', 'no database to compare with'),
    ];
  }
  client.on('error', () => undefined);
  try {
    const out: CheckResult[] = [];
    const v = await client.query<{ n: string; version: string; can_create: boolean; can_connect: boolean; owns: string }>(
      `SELECT current_setting('server_version_num') AS n, current_setting('server_version') AS version,
              has_schema_privilege(current_user, current_schema(), 'CREATE') AS can_create,
              has_database_privilege(current_user, current_database(), 'TEMP') AS can_connect,
              (SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tableowner <> current_user)::text AS owns`,
    );
    const row = v.rows[0]!;
    if (Number(row.n) < PG_MIN_VERSION) out.push(fail('database', `PostgreSQL ${row.version} at ${where} is older than 13`, 'upgrade to PostgreSQL 13 or later (15 is what algohost is tested on)'));
    else if (!row.can_create) out.push(fail('database', `PostgreSQL ${row.version} at ${where}: the user may not create tables in its schema (the migrations need to)`, 'GRANT CREATE ON SCHEMA public TO <user> (or make the user the database\'s owner)'));
    else if (Number(row.owns) > 0) out.push(fail('database', `PostgreSQL ${row.version} at ${where}: ${row.owns} table(s) in the schema belong to another user, so the migrations cannot change them`, 'ALTER TABLE … OWNER TO <user>, or use the user that made them'));
    else out.push(ok('database', `PostgreSQL ${row.version} at ${where}: the user may create and change its tables`));
    // The skew, by the middle of the round trip (half of it is the uncertainty).
    const t0 = Date.now();
    const c = await client.query<{ ms: string }>(`SELECT (extract(epoch from clock_timestamp()) * 1000)::float8::text AS ms`);
    const t1 = Date.now();
    const skew = Number(c.rows[0]!.ms) - (t0 + t1) / 2;
    const detail = `${skew >= 0 ? 'behind' : 'ahead of'} the database's by ${Math.abs(Math.round(skew))} ms (±${Math.ceil((t1 - t0) / 2)} ms)`;
    const fix = 'run NTP (chrony, systemd-timesyncd) on every node and on the database server: leases, retention and webhook timestamps compare clocks across nodes';
    if (Math.abs(skew) > SKEW_FAIL_MS) out.push(fail('clock', `this node's clock is ${detail}`, fix));
    else if (Math.abs(skew) > SKEW_WARN_MS) out.push(warn('clock', `this node's clock is ${detail}`, fix));
    else out.push(ok('clock', `this node's clock is ${detail}; every node checked alike agrees within twice that`));
    return out;
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function blobCheck(config: Config): Promise<CheckResult> {
  if (!config.blobs) return ok('blob store', `local disk, ${path.join(config.home, 'data')}: one machine`);
  const store = openBlobStore(config);
  try {
    try {
      await store.check();
    } catch (err) {
      return fail('blob store', (err as Error).message, 'check ALGOHOST_BLOBS, the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and that the bucket exists (docs/cluster.md)');
    }
    // Write, read back and remove an object, as uploads do.
    const id = store.newId();
    const probe = Buffer.from(`algohost doctor ${new Date().toISOString()}\n`);
    try {
      await store.put(id, Readable.from([probe]), { maxBytes: 1024, signal: AbortSignal.timeout(TIMEOUT_MS) });
      const back = await store.open(id, undefined, probe.length);
      const chunks: Buffer[] = [];
      if (Buffer.isBuffer(back)) chunks.push(back);
      else for await (const c of back) chunks.push(c as Buffer);
      if (!Buffer.concat(chunks).equals(probe)) return fail('blob store', `${store.location}: an object read back differs from what was written`, 'check the S3 server (a proxy or gateway that changes bodies?)');
    } catch (err) {
      return fail('blob store', `${store.location}: the bucket is there, but writing and reading an object failed: ${(err as Error).message}`, 'give the credentials s3:PutObject, s3:GetObject, s3:DeleteObject and s3:ListBucket on the bucket');
    } finally {
      await store.delete(id).catch(() => undefined);
    }
    return ok('blob store', `${store.location}: an object written, read back and removed`);
  } finally {
    store.close();
  }
}

async function natsCheck(config: Config): Promise<CheckResult> {
  if (!config.natsUrl) return skip('nats', 'not a cluster (no ALGOHOST_NATS_URL)');
  const where = redactNatsUrl(config.natsUrl);
  let nc;
  try {
    nc = await connectNats(config.natsUrl, config.natsAuth, 'algohost-doctor', 'admin');
  } catch (err) {
    return fail('nats', `cannot connect to ${where}: ${(err as Error).message}`, 'check ALGOHOST_NATS_URL and the NATS credentials (ALGOHOST_NATS_CREDS, TLS settings; docs/cluster.md)');
  }
  try {
    const rtt = await nc.rtt();
    try {
      const jsm = await jetstreamManager(nc, { timeout: TIMEOUT_MS });
      await jsm.getAccountInfo();
    } catch (err) {
      return fail('nats', `${where} answers (round trip ${rtt} ms), without JetStream: ${(err as Error).message}`, 'start nats-server with -js (or jetstream {} in its configuration): async calls queue in JetStream');
    }
    return ok('nats', `${where}: JetStream on, round trip ${rtt} ms`);
  } finally {
    await nc.close().catch(() => undefined);
  }
}

function diskCheck(config: Config): CheckResult {
  // The home, or the nearest directory of it that exists yet.
  let dir = path.resolve(config.home);
  while (!fs.existsSync(dir)) dir = path.dirname(dir);
  const s = fs.statfsSync(dir);
  const free = s.bavail * s.bsize;
  const share = s.blocks > 0 ? s.bavail / s.blocks : 1;
  const gib = (n: number) => `${(n / 1024 ** 3).toFixed(1)} GiB`;
  const detail = `${gib(free)} free (${Math.round(share * 100)} %) where the home is (${dir})`;
  const fix = 'free space there, or move the home (ALGOHOST_HOME) to a larger disk: builds, caches and (on one machine) every file live there';
  if (free < DISK_FAIL_BYTES || share < 0.05) return fail('disk', detail, fix);
  if (free < DISK_WARN_BYTES || share < 0.1) return warn('disk', detail, fix);
  return ok('disk', detail);
}
