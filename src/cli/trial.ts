/**
 * `algohost trial cluster`: a whole cluster on this machine's loopback, for trying the layout of
 * docs/deployment.md before building it: PostgreSQL (Debian's initdb and pg_ctl), an S3 server
 * (s3rver, a development dependency), NATS with JetStream (nats-server), an API node and two
 * worker nodes, each a process of its own. It stays in the foreground; Ctrl-C (or SIGTERM) stops
 * every process it started. Nothing listens beyond 127.0.0.1, and nothing here is for production
 * (anonymous NATS, s3rver's well-known credentials): docs/deployment.md says what is.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { ConfigError, loadConfig } from '../config.ts';
import { connectNats, requireClusterKey } from '../cluster/nats.ts';
import { clusterStatus } from '../cluster/status.ts';

export interface TrialOptions {
  /** Where everything lives; kept (and used again by the next trial) when given, else a temp directory removed at the end. */
  dir: string | undefined;
  /** The API node's port. */
  port: number;
  workers: number;
  json: boolean;
}

const BIN = path.resolve(import.meta.dirname, '..', '..', 'bin', 'algohost.mjs');
const NATS_SERVER = '/usr/sbin/nats-server';
const S3_KEY = 'S3RVER';
const BUCKET = 'algohost';
const START_MS = 120_000;

/** Thrown for what the machine lacks; the message says what to install. */
class TrialError extends ConfigError {}

interface Running {
  name: string;
  child: ChildProcess;
}

/** The newest PostgreSQL server binaries Debian installed (/usr/lib/postgresql/N/bin). */
function postgresBin(): string {
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root) ? fs.readdirSync(root).filter((v) => fs.existsSync(path.join(root, v, 'bin', 'pg_ctl'))).sort((a, b) => Number(b) - Number(a)) : [];
  if (versions.length === 0) throw new TrialError('the trial needs PostgreSQL: apt-get install postgresql-15');
  return path.join(root, versions[0]!, 'bin');
}

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((resolve, reject) => srv.once('error', reject).listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

/** Set when the trial is to stop (a signal, a process that died): a start under way gives up. */
let halted: string | undefined;

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = START_MS): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    if (halted) throw new TrialError(`stopped while waiting for ${what}: ${halted}`);
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end) throw new TrialError(`${what} did not come up within ${ms / 1000} s (its log is in the trial's logs/)`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export async function trialCluster(options: TrialOptions, out: NodeJS.WritableStream = process.stdout): Promise<number> {
  if (!fs.existsSync(NATS_SERVER)) throw new TrialError(`the trial needs NATS: apt-get install nats-server (${NATS_SERVER})`);
  let s3rver: string;
  try {
    s3rver = createRequire(import.meta.url).resolve('s3rver');
  } catch {
    throw new TrialError('the trial needs s3rver, a development dependency: npm install (without --omit=dev) in the checkout');
  }
  const pgBin = postgresBin();
  const keep = options.dir !== undefined;
  const dir = path.resolve(options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-trial-')));
  // As root, the postgres user passes through it to its own directory.
  if (process.getuid?.() === 0) fs.chmodSync(dir, 0o711);
  const logs = path.join(dir, 'logs');
  fs.mkdirSync(logs, { recursive: true, mode: 0o700 });
  const running: Running[] = [];
  const asRoot = process.getuid?.() === 0;
  const pgData = path.join(dir, 'postgres');
  // PostgreSQL refuses to run as root: as root, its files and processes are the postgres user's.
  const pgRun = (bin: string, args: string[]) => {
    const r = asRoot ? spawnSync('/usr/sbin/runuser', ['-u', 'postgres', '--', path.join(pgBin, bin), ...args], { encoding: 'utf8' }) : spawnSync(path.join(pgBin, bin), args, { encoding: 'utf8' });
    if (r.status !== 0) throw new TrialError(`${bin} failed: ${(r.stderr || r.stdout || r.error?.message || '').trim()}`);
  };
  let pgStarted = false;
  // Ctrl-C or SIGTERM, once or more, at any time, or a process that died: everything started is
  // stopped (a second signal does not cut that short and leave PostgreSQL running).
  let interrupted: () => void = () => undefined;
  const stopAsked = new Promise<void>((resolve) => (interrupted = resolve));
  let signals = 0;
  const onSignal = () => {
    if (signals++ > 0) out.write('algohost trial: stopping everything it started; a moment\n');
    halted ??= 'asked to stop';
    interrupted();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      // The nodes first (they finish what they hold), then what they use.
      const nodes = running.filter((r) => r.name === 'api' || r.name.startsWith('worker-'));
      await Promise.all(nodes.map((r) => ended(r.child, 15_000)));
      await Promise.all(running.filter((r) => !nodes.includes(r)).map((r) => ended(r.child, 5_000)));
      if (pgStarted) {
        try {
          pgRun('pg_ctl', ['-D', pgData, '-m', 'fast', '-w', 'stop']);
        } catch {
          // Already stopped.
        }
      }
      if (!keep) fs.rmSync(dir, { recursive: true, force: true });
    })());

  try {
    // Settings made once and kept with the directory: the next trial on it finds its users and files.
    const settingsFile = path.join(dir, 'settings.json');
    const saved = fs.existsSync(settingsFile) ? (JSON.parse(fs.readFileSync(settingsFile, 'utf8')) as { pgPassword: string; clusterSecret: string }) : { pgPassword: crypto.randomBytes(12).toString('hex'), clusterSecret: crypto.randomBytes(32).toString('hex') };
    fs.writeFileSync(settingsFile, JSON.stringify(saved), { mode: 0o600 });

    // PostgreSQL.
    if (!fs.existsSync(path.join(pgData, 'PG_VERSION'))) {
      fs.mkdirSync(pgData, { recursive: true, mode: 0o700 });
      const pw = path.join(dir, 'pgpass.tmp');
      fs.writeFileSync(pw, saved.pgPassword + '\n', { mode: 0o600 });
      if (asRoot) {
        const { uid, gid } = postgresUser();
        fs.chownSync(pgData, uid, gid);
        fs.chownSync(pw, uid, gid);
      }
      try {
        pgRun('initdb', ['-D', pgData, '-U', 'algohost', '--pwfile', pw, '--auth-host=scram-sha-256', '--auth-local=peer', '-E', 'UTF8', '--locale=C.UTF-8']);
      } finally {
        fs.rmSync(pw, { force: true });
      }
    }
    const pgPort = await freePort();
    // The socket directory is the data directory (the postgres user owns it).
    pgRun('pg_ctl', ['-D', pgData, '-l', path.join(pgData, 'server.log'), '-w', '-t', '60', '-o', `-p ${pgPort} -k ${pgData} -c listen_addresses=127.0.0.1`, 'start']);
    pgStarted = true;
    const pgUrl = (db: string) => `postgres://algohost:${saved.pgPassword}@127.0.0.1:${pgPort}/${db}`;
    const admin = new pg.Client({ connectionString: pgUrl('postgres') });
    await admin.connect();
    try {
      const has = await admin.query(`SELECT 1 FROM pg_database WHERE datname = 'algohost'`);
      if (has.rowCount === 0) await admin.query('CREATE DATABASE algohost');
    } finally {
      await admin.end();
    }

    const launch = (name: string, file: string, args: string[], env: NodeJS.ProcessEnv) => {
      const log = fs.openSync(path.join(logs, `${name}.log`), 'a');
      const child = spawn(file, args, { env, stdio: ['ignore', log, log] });
      fs.closeSync(log);
      running.push({ name, child });
      child.once('exit', (code, signal) => {
        if (stopping) return;
        out.write(`algohost trial: ${name} exited (${code ?? signal}); stopping the rest. Its log: ${path.join(logs, `${name}.log`)}\n`);
        process.exitCode = 1;
        halted ??= `${name} exited`;
        interrupted();
      });
      return child;
    };

    // S3: s3rver, files in the directory; its DES continuation tokens need OpenSSL's legacy provider.
    const s3Port = await freePort();
    const s3Dir = path.join(dir, 's3');
    fs.mkdirSync(s3Dir, { recursive: true });
    const s3Script = `const S3rver = require(${JSON.stringify(s3rver)}); new S3rver({ port: ${s3Port}, address: '127.0.0.1', silent: true, directory: ${JSON.stringify(s3Dir)}, configureBuckets: [{ name: '${BUCKET}' }] }).run().then(() => console.log('listening'), (err) => { console.error(err); process.exit(1); });`;
    launch('s3', process.execPath, ['--openssl-legacy-provider', '-e', s3Script], { PATH: '/usr/bin:/bin' });
    // NATS with JetStream.
    const natsPort = await freePort();
    launch('nats', NATS_SERVER, ['-js', '-a', '127.0.0.1', '-p', String(natsPort), '-sd', path.join(dir, 'nats')], { PATH: '/usr/bin:/bin' });
    await until('s3rver', () => probe(s3Port));
    await until('nats-server', () => probe(natsPort));

    const env: Record<string, string> = {
      ALGOHOST_DATABASE_URL: pgUrl('algohost'),
      ALGOHOST_BLOBS: `s3://${BUCKET}/trial?endpoint=${encodeURIComponent(`http://127.0.0.1:${s3Port}`)}&force_path_style=true`,
      AWS_ACCESS_KEY_ID: S3_KEY,
      AWS_SECRET_ACCESS_KEY: S3_KEY,
      ALGOHOST_NATS_URL: `nats://127.0.0.1:${natsPort}`,
      ALGOHOST_CLUSTER_SECRET: saved.clusterSecret,
    };
    const nodeEnv = (extra: Record<string, string>): NodeJS.ProcessEnv => ({ PATH: '/usr/local/bin:/usr/bin:/bin', HOME: dir, ...env, ...extra });
    fs.writeFileSync(path.join(dir, 'env'), Object.entries(env).map(([k, v]) => `export ${k}='${v}'\n`).join(''), { mode: 0o600 });

    // The API node (it builds algorithms, and publishes the demo ones on a new database), then the workers.
    const apiHome = path.join(dir, 'api');
    launch('api', process.execPath, [BIN, 'serve', '--role', 'api', '--home', apiHome, '--host', '127.0.0.1', '--port', String(options.port)], nodeEnv({}));
    const base = `http://127.0.0.1:${options.port}`;
    await until('the API node', async () => ((await fetch(`${base}/health`)).status === 200 ? true : undefined));
    for (let i = 1; i <= options.workers; i++) {
      const name = `worker-${i}`;
      launch(name, process.execPath, [BIN, 'worker', '--home', path.join(dir, name)], nodeEnv({ ALGOHOST_NODE_NAME: name }));
    }
    // Up once every worker beats on the bus.
    const config = loadConfig({ home: apiHome }, { ...env });
    const nc = await connectNats(env.ALGOHOST_NATS_URL!, config.natsAuth, 'algohost trial', 'admin');
    try {
      const key = requireClusterKey(config, 'the trial');
      await until('the worker nodes', async () => ((await clusterStatus(nc, key)).nodes.filter((n) => n.role === 'worker').length >= options.workers ? true : undefined));
    } finally {
      await nc.close();
    }
    const keyFile = path.join(apiHome, 'demo-key');
    const pids = Object.fromEntries(running.map((r) => [r.name, r.child.pid]));
    const summary = {
      api: base,
      console: `${base}/`,
      postgres: pgUrl('algohost').replace(`:${saved.pgPassword}@`, ':***@'),
      s3: { endpoint: `http://127.0.0.1:${s3Port}`, bucket: BUCKET, access_key: S3_KEY },
      nats: env.ALGOHOST_NATS_URL,
      workers: Array.from({ length: options.workers }, (_, i) => `worker-${i + 1}`),
      dir,
      env_file: path.join(dir, 'env'),
      demo_key_file: fs.existsSync(keyFile) ? keyFile : null,
      pids: { trial: process.pid, ...pids },
    };
    if (options.json) out.write(JSON.stringify(summary) + '\n');
    else {
      out.write(
        [
          `algohost trial cluster: up, everything on 127.0.0.1, in ${dir}${keep ? ' (kept)' : ' (removed when it stops)'}`,
          `  API node     ${base}   (web console ${base}/, GET /health)`,
          `  PostgreSQL   ${summary.postgres}`,
          `  S3           ${summary.s3.endpoint}, bucket ${BUCKET} (s3rver; key ${S3_KEY}/${S3_KEY})`,
          `  NATS         ${env.ALGOHOST_NATS_URL} (JetStream; anonymous, loopback only)`,
          `  workers      ${summary.workers.join(', ')}`,
          `  logs         ${logs}`,
          '',
          summary.demo_key_file
            ? `Try it:\n  curl -H "Authorization: Simple $(cat ${keyFile})" -H 'Content-Type: text/plain' -d 'world' ${base}/v1/algo/demo/Hello`
            : 'The demo user was made by an earlier trial in this directory.',
          `The nodes' settings, for the admin commands (users are in the shared database):`,
          `  . ${summary.env_file} && npx algohost user create alice && npx algohost cluster status`,
          '',
          `Stop: Ctrl-C here, or kill ${process.pid}: it stops every process it started.`,
          '',
        ].join('\n'),
      );
    }
    // Until asked to stop, or a node died (which stops the rest).
    await stopAsked;
    if (halted && halted !== 'asked to stop') throw new TrialError(`${halted} (its log is in ${logs})`);
    await stop();
    return process.exitCode === 1 ? 1 : 0;
  } catch (err) {
    await stop();
    throw err;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** Resolves true once something accepts a connection on the port. */
function probe(port: number): Promise<true | undefined> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(undefined));
  });
}

/** Asks a child to end (SIGTERM), and kills it if it has not within `ms`. */
function ended(child: ChildProcess, ms: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), ms);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

function postgresUser(): { uid: number; gid: number } {
  const line = fs
    .readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('postgres:'));
  if (!line) throw new TrialError('the trial runs PostgreSQL as the postgres user (it refuses root), and there is none: apt-get install postgresql-15');
  const f = line.split(':');
  return { uid: Number(f[2]), gid: Number(f[3]) };
}
