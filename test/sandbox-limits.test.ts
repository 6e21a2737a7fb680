import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CgroupManager, cgroupParents, detectCgroups, systemCgroupEnvironment, type WorkerCgroup } from '../src/runtime/cgroup.ts';
import { DEFAULT_LIMITS, cgroupOf, probeSandbox, sandboxCommand, spawnSandbox, workerMemoryBytes, type SandboxSpec } from '../src/runtime/sandbox.ts';
import { Worker } from '../src/runtime/worker.ts';
import { text } from './helpers/workers.ts';

const support = probeSandbox();
const cgroups = detectCgroups();
const noSandbox = support.available ? false : `bubblewrap unavailable: ${support.reason}`;
const skipPids = noSandbox || (cgroups.pids ? false : `no writable cgroup pids controller: ${cgroups.reason ?? 'none found'}`);
const skipMemory = noSandbox || (cgroups.memory ? false : `no writable cgroup memory controller: ${cgroups.reason ?? 'none found'}`);
const skipAny = noSandbox || (cgroups.memory || cgroups.pids ? false : `no writable cgroup controller: ${cgroups.reason ?? 'none found'}`);

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-limits-'));
const workers: Worker[] = [];

function algorithm(name: string, source: string, limits: Partial<SandboxSpec['limits']> = {}): SandboxSpec {
  const dir = path.join(root, 'algos', name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'index.mjs'), source);
  return { runner: 'node', algoDir: dir, entry: 'index.mjs', network: false, limits: { ...DEFAULT_LIMITS, ...limits } };
}

async function start(spec: SandboxSpec): Promise<Worker> {
  const w = await Worker.start(spec);
  workers.push(w);
  return w;
}

const childOf = (w: Worker) => (w as unknown as { child: ChildProcess }).child;
function groupOf(w: Worker): WorkerCgroup {
  const g = cgroupOf(childOf(w));
  assert.ok(g, 'the worker has a cgroup');
  return g;
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Alive: neither gone nor a zombie (the sandbox's init is reparented to the host's init, which reaps it when it gets to it). */
/** A process's start time (clock ticks since boot): with the pid, its identity (pids are reused). */
const startTime = (pid: number): string | undefined => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
};
/**
 * The processes among `procs` still alive after at most `ms`: a killed process leaves its
 * cgroup early in its exit, and may show as running for a moment after the group is gone.
 */
async function survivors(procs: Array<{ pid: number; start: string | undefined }>, ms = 3000): Promise<unknown[]> {
  const until = Date.now() + ms;
  let left = procs.filter(alive);
  while (left.length > 0 && Date.now() < until) {
    await sleep(20);
    left = left.filter(alive);
  }
  return left;
}
/** Identities of processes, to ask later whether those very processes still live. */
const identify = (pids: number[]) => pids.map((pid) => ({ pid, start: startTime(pid) }));
const alive = ({ pid, start }: { pid: number; start: string | undefined }) => {
  try {
    if (start === undefined || startTime(pid) !== start) return false; // gone, or its pid reused
    return !/^State:\s*Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return false;
  }
};
/** The worker groups under our parents (`algohost-<pid>/w*`). */
const workerGroups = () => cgroupParents().flatMap((p) => fs.readdirSync(p, { withFileTypes: true }).filter((e) => e.isDirectory() && e.name !== 'server').map((e) => path.join(p, e.name)));
/** One v1/v2 file of a group, by controller. */
function groupFile(g: WorkerCgroup, v1: string, v2: string): string | undefined {
  for (const dir of g.dirs) {
    const f = path.join(dir, g.version === 1 ? v1 : v2);
    if (fs.existsSync(f)) return f;
  }
  return undefined;
}

after(async () => {
  await Promise.all(workers.map((w) => w.stop(200)));
  await Promise.all(workers.map((w) => cgroupOf(childOf(w))?.remove()));
  if (!skipAny) assert.deepEqual(workerGroups(), [], 'every worker group is removed once its worker is gone');
  fs.rmSync(root, { recursive: true, force: true });
});

describe('cgroup limits', () => {
  test('detection', { skip: skipAny }, () => {
    assert.ok(cgroups.version === 1 || cgroups.version === 2);
    const parents = cgroupParents();
    assert.ok(parents.length >= 1);
    for (const p of parents) {
      assert.equal(path.basename(p), `algohost-${process.pid}`);
      assert.ok(fs.statSync(p).isDirectory());
    }
  });

  test('normal calls work inside the group; the limits are set; peak memory is plausible; the group goes with the worker', { skip: skipAny }, async () => {
    const w = await start(
      algorithm('plain', `import fs from 'node:fs'; export function apply(x) { const b = Buffer.alloc(32 << 20, 1); return { x, n: b.length, cg: fs.readFileSync('/proc/self/cgroup', 'utf8') }; }`),
    );
    const g = groupOf(w);
    const o = JSON.parse(text(await w.call('json', Buffer.from('"hi"'), 10_000)));
    assert.equal(o.x, 'hi');
    // The cgroup namespace makes the worker's own group the root of what it sees.
    for (const line of String(o.cg).trim().split('\n')) assert.match(line, /:\/$/, `the sandbox sees its group as its root: ${o.cg}`);
    const procs = identify(g.processes());
    assert.ok(procs.some((p) => p.pid === childOf(w).pid), 'bwrap itself is in the group');
    assert.ok(procs.length >= 3, `bwrap, the namespace's init and node: ${procs.length}`);
    if (cgroups.pids) {
      assert.equal(fs.readFileSync(groupFile(g, 'pids.max', 'pids.max')!, 'utf8').trim(), String(DEFAULT_LIMITS.maxPids));
      const n = g.pidsCurrent()!;
      assert.ok(n >= 3 && n < DEFAULT_LIMITS.maxPids, `tasks now: ${n}`);
    }
    if (cgroups.memory) {
      assert.equal(Number(fs.readFileSync(groupFile(g, 'memory.limit_in_bytes', 'memory.max')!, 'utf8')), workerMemoryBytes(DEFAULT_LIMITS));
      const peak = g.peakMemoryBytes();
      assert.ok(peak !== undefined && peak > 32 * 1024 * 1024 && peak < workerMemoryBytes(DEFAULT_LIMITS), `peak ${peak}`);
      assert.equal(g.oomKilled(), false);
    }
    await w.stop(500);
    assert.equal(await g.remove(), true);
    for (const d of g.dirs) assert.equal(fs.existsSync(d), false, `${d} removed`);
    assert.equal(g.oomKilled(), false, 'still answers after removal');
    assert.ok((g.peakMemoryBytes() ?? 0) > 32 * 1024 * 1024, 'the peak survives removal');
  });

  test('a spawning loop is capped at maxPids tasks: spawns fail with EAGAIN and the group never holds more', { skip: skipPids }, async () => {
    const maxPids = 64;
    const w = await start(
      algorithm(
        'spawner',
        `import { spawn } from 'node:child_process';
        export async function apply() {
          let spawned = 0, error = null;
          for (let i = 0; i < 1000 && !error; i++) {
            error = await new Promise((resolve) => {
              const c = spawn('/usr/bin/sleep', ['100'], { stdio: 'ignore' });
              c.once('spawn', () => { spawned++; resolve(null); });
              c.once('error', (e) => resolve(e.code));
            });
          }
          return { spawned, error };
        }`,
        { maxPids },
      ),
    );
    const g = groupOf(w);
    const o = JSON.parse(text(await w.call('json', Buffer.from('1'), 30_000)));
    assert.equal(o.error, 'EAGAIN', JSON.stringify(o));
    // Node's own threads (a dozen or so), bwrap and its init count too.
    assert.ok(o.spawned > maxPids - 30 && o.spawned < maxPids, `spawned ${o.spawned} of at most ${maxPids} tasks`);
    assert.ok(g.pidsCurrent()! <= maxPids);
    assert.ok(g.processes().length <= maxPids);
    assert.equal(w.dead, false, 'the worker itself survives the failed spawns');
    const procs = identify(g.processes());
    w.kill();
    await w.done;
    assert.equal(await g.remove(), true);
    for (const d of g.dirs) assert.equal(fs.existsSync(d), false);
    assert.deepEqual(await survivors(procs), [], 'every process of the group is gone');
  });

  test('a fork bomb is contained while it runs and leaves nothing behind when the worker is killed', { skip: skipPids }, async () => {
    const maxPids = 64;
    const w = await start(
      algorithm(
        'bomb',
        `import { spawn } from 'node:child_process';
        export function apply() {
          spawn('/bin/sh', ['-c', 'f() { f | f & }; f'], { stdio: 'ignore', detached: true }).unref();
          return 'lit';
        }`,
        { maxPids },
      ),
    );
    const g = groupOf(w);
    assert.equal(text(await w.call('json', Buffer.from('1'), 10_000)), 'lit');
    const refusedForks = () => Number(/^max (\d+)$/m.exec(fs.readFileSync(groupFile(g, 'pids.events', 'pids.events')!, 'utf8'))?.[1] ?? 0);
    let highest = 0;
    // Watch for at least a second, and (on a loaded machine) until the bomb has hit the cap,
    // for at most 15 s.
    for (let i = 0; i < 300 && (i < 20 || refusedForks() === 0); i++) {
      highest = Math.max(highest, g.pidsCurrent()!, g.processes().length);
      await sleep(50);
    }
    // Sampling misses spikes: the kernel's own counters tell the whole story.
    assert.ok(highest <= maxPids, `at most ${maxPids} tasks whenever we looked: ${highest}`);
    const peakFile = groupFile(g, 'pids.peak', 'pids.peak');
    if (peakFile) assert.ok(Number(fs.readFileSync(peakFile, 'utf8')) <= maxPids, 'pids.peak');
    assert.ok(refusedForks() > 0, 'the bomb hit the cap: forks were refused');
    const procs = identify(g.processes());
    const t0 = performance.now();
    w.kill();
    await w.done;
    assert.equal(await g.remove(), true);
    const ms = performance.now() - t0;
    for (const d of g.dirs) assert.equal(fs.existsSync(d), false);
    assert.deepEqual(await survivors(procs), [], 'every process of the group is gone');
    assert.ok(ms < 10_000, `killed and removed in ${ms.toFixed(0)} ms`);
  });

  test('memory outside the V8 heap: the kernel kills the worker at the group limit, and oomKilled() says so', { skip: skipMemory }, async () => {
    const limits = { heapMb: 128, tmpBytes: 16 * 1024 * 1024 };
    const w = await start(
      algorithm(
        'buffers',
        // Filled, not zeroed: untouched pages would never be charged.
        `export function apply() { const keep = []; for (let i = 0; i < 64; i++) keep.push(Buffer.alloc(64 << 20, 1)); return keep.length; }`,
        limits,
      ),
    );
    const g = groupOf(w);
    const o = await w.call('json', Buffer.from('1'), 60_000);
    assert.notEqual(o.kind, 'result', '4 GiB of buffers did not fit');
    // The worker tells an OOM kill by the cgroup from any other death.
    assert.equal(o.kind, 'out_of_memory', text(o));
    await w.done;
    assert.equal(w.dead, true);
    assert.equal(g.oomKilled(), true);
    const limit = workerMemoryBytes({ ...DEFAULT_LIMITS, ...limits });
    const peak = g.peakMemoryBytes()!;
    assert.ok(peak <= limit && peak > limit - 80 * 1024 * 1024, `peak ${peak} near the limit ${limit}`);
    assert.equal(await g.remove(), true);
    assert.equal(g.oomKilled(), true, 'still known after removal');
  });

  test('other deaths are not out of memory: a crash, a kill, V8\'s own heap limit', { skip: skipMemory }, async () => {
    const crash = await start(algorithm('exit', `export function apply() { process.exit(3); }`));
    const o = await crash.call('json', Buffer.from('1'), 10_000);
    assert.equal(o.kind, 'crashed');
    assert.equal(groupOf(crash).oomKilled(), false);

    const killed = await start(algorithm('killed', `export function apply() { return 1; }`));
    killed.kill();
    await killed.done;
    assert.equal(groupOf(killed).oomKilled(), false);

    // The V8 heap cap (64 MiB) is far below the group's limit: V8 aborts first, and the
    // worker tells that from stderr, not from the cgroup.
    const heap = await start(algorithm('heap', `export function apply() { const a = []; for (;;) a.push(new Array(1e6).fill(1.5)); }`, { heapMb: 64 }));
    const h = await heap.call('json', Buffer.from('1'), 30_000);
    assert.equal(h.kind, 'out_of_memory');
    await heap.done;
    assert.equal(groupOf(heap).oomKilled(), false);
  });

  test('without bubblewrap (unsandboxed), the worker is in its group too', { skip: skipAny }, async () => {
    const w = await start({ ...algorithm('unsandboxed', `export function apply() { return process.pid; }`), unsandboxed: true });
    const g = groupOf(w);
    const pid = Number(text(await w.call('json', Buffer.from('1'), 10_000)));
    assert.ok(g.processes().includes(pid), 'the runner runs in the group');
    const own = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8');
    assert.ok(own.includes(`/algohost-${process.pid}/${g.name}`), own);
    await w.stop(500);
    assert.equal(await g.remove(), true);
  });

  test('cgroup: false opts out', { skip: skipAny }, async () => {
    const w = await start({ ...algorithm('optout', `export function apply() { return 1; }`), cgroup: false });
    assert.equal(cgroupOf(childOf(w)), undefined);
    assert.equal(text(await w.call('json', Buffer.from('1'), 10_000)), '1');
  });

  test('a worker that cannot join its group does not start at all', { skip: noSandbox }, () => {
    const spec = algorithm('nojoin', `export function apply() { return 1; }`);
    const { file, args } = sandboxCommand(spec, [path.join(root, 'no-such-group', 'cgroup.procs')]);
    const r = spawnSync(file, args, { encoding: 'utf8', timeout: 10_000, stdio: ['ignore', 'pipe', 'pipe', 'pipe'] });
    assert.equal(r.status, 125);
    assert.match(r.stderr, /cannot join the worker's cgroup .*no-such-group.*not starting it without its limits/);
  });

  test('a worker whose group is removed before it joins exits instead of running unconfined', { skip: skipAny }, async () => {
    const child = spawnSandbox(algorithm('vanished', `export function apply() { return 1; }`));
    const g = cgroupOf(child)!;
    // The shell is starting now: remove its groups under it (whichever it has not joined yet).
    const removed = g.dirs.filter((d) => {
      try {
        fs.rmdirSync(d);
        return true;
      } catch {
        return false;
      }
    });
    let stderr = '';
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    if (removed.length === 0) {
      // It was quicker: it joined both and runs confined. Nothing to check this time.
      process.kill(-child.pid!, 'SIGKILL');
    }
    await new Promise((r) => child.once('exit', r));
    if (removed.length > 0) {
      assert.equal(child.exitCode, 125, stderr);
      assert.match(stderr, /cannot join the worker's cgroup/);
    }
    assert.equal(await g.remove(), true);
  });

  test('on exit, a server removes its groups (killing workers still running); a later server removes those of dead servers', { skip: skipAny }, async () => {
    const spec = algorithm('exiting', `export function apply() { return 1; }`);
    const script = path.join(root, 'exiting.mts');
    const workerTs = new URL('../src/runtime/worker.ts', import.meta.url).pathname;
    fs.writeFileSync(
      script,
      `import { Worker } from ${JSON.stringify(workerTs)};
      const spec = ${JSON.stringify(spec)};
      const w = await Worker.start(spec);
      await w.call('json', Buffer.from('1'), 5000);
      if (process.argv[2] === 'stop') await w.stop(200);
      const w2 = await Worker.start(spec); // still running at exit when not stopping
      if (process.argv[2] === 'stop') await w2.stop(200);
      process.exit(0);`,
    );
    const runServer = (mode: string) =>
      new Promise<number>((resolve, reject) => {
        const c = spawn(process.execPath, ['--import', 'tsx', script, mode], { cwd: new URL('..', import.meta.url).pathname, stdio: ['ignore', 'ignore', 'inherit'] });
        c.once('exit', (code) => (code === 0 ? resolve(c.pid!) : reject(new Error(`exited ${code}`))));
      });
    const bases = cgroupParents().map((p) => path.dirname(p));
    const stopped = await runServer('stop');
    for (const b of bases) assert.equal(fs.existsSync(path.join(b, `algohost-${stopped}`)), false, 'removed at exit');

    // Exiting with workers still running: it kills them and waits for them to leave.
    const abandoned = await runServer('abandon');
    for (const b of bases) assert.equal(fs.existsSync(path.join(b, `algohost-${abandoned}`)), false, 'removed at exit, workers and all');

    // A server that died without cleaning up (SIGKILL, say): the next one removes its groups.
    const dead = spawnSync('/usr/bin/true').pid!;
    for (const b of bases) fs.mkdirSync(path.join(b, `algohost-${dead}`, 'w1'), { recursive: true });
    new CgroupManager({ ...systemCgroupEnvironment, onExit: () => undefined }).detect();
    for (const b of bases) assert.equal(fs.existsSync(path.join(b, `algohost-${dead}`)), false, 'stale groups of a dead server are removed');
  });
});

describe('cgroup v2 set-up, on a fake cgroup tree', () => {
  // Plain directories and files: this checks paths and what is written where, not the
  // kernel's rules (this host has no v2 memory or pids controller to try them on).
  test('the parent passes memory and pids down; worker groups get their limits; stale groups of dead servers go', () => {
    const fake = fs.mkdtempSync(path.join(root, 'v2-'));
    const base = path.join(fake, 'sys/fs/cgroup/system.slice/algohost.service');
    fs.mkdirSync(path.join(base, 'algohost-1/w3'), { recursive: true }); // a dead server's
    fs.mkdirSync(path.join(base, 'algohost-77')); // a live server's
    fs.writeFileSync(path.join(base, 'cgroup.controllers'), 'cpu io memory pids\n');
    fs.writeFileSync(path.join(base, 'cgroup.subtree_control'), 'cpu\n');
    const m = new CgroupManager({
      mountinfo: () => '25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n',
      selfCgroup: () => '0::/system.slice/algohost.service\n',
      pid: 4242,
      root: fake,
      alive: (pid) => pid === 77,
      onExit: () => undefined,
    });
    assert.deepEqual(m.detect(), { memory: true, pids: true, version: 2 });
    const parent = path.join(base, 'algohost-4242');
    assert.deepEqual(m.parents(), [parent]);
    assert.equal(fs.readFileSync(path.join(base, 'cgroup.subtree_control'), 'utf8'), '+memory +pids');
    assert.equal(fs.readFileSync(path.join(parent, 'cgroup.subtree_control'), 'utf8'), '+memory +pids');
    assert.equal(fs.existsSync(path.join(base, 'algohost-1')), false, 'a dead server\'s group is removed');
    assert.equal(fs.existsSync(path.join(base, 'algohost-77')), true, 'a live server\'s group stays');

    const g = m.create(undefined, { memoryBytes: 1 << 30, maxPids: 99 })!;
    const dir = path.join(parent, 'w1');
    assert.equal(g.version, 2);
    assert.deepEqual(g.procsFiles, [path.join(dir, 'cgroup.procs')]);
    assert.equal(fs.readFileSync(path.join(dir, 'memory.max'), 'utf8'), String(1 << 30));
    assert.equal(fs.readFileSync(path.join(dir, 'pids.max'), 'utf8'), '99');
    fs.writeFileSync(path.join(dir, 'memory.events'), 'low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\n');
    fs.writeFileSync(path.join(dir, 'memory.peak'), '1073741824\n');
    assert.equal(g.oomKilled(), true);
    assert.equal(g.peakMemoryBytes(), 1 << 30);
  });

  test('only the controllers our group is given are used', () => {
    const fake = fs.mkdtempSync(path.join(root, 'v2-'));
    const base = path.join(fake, 'sys/fs/cgroup');
    fs.mkdirSync(base, { recursive: true });
    fs.writeFileSync(path.join(base, 'cgroup.controllers'), 'cpu pids\n');
    fs.writeFileSync(path.join(base, 'cgroup.subtree_control'), '');
    const m = new CgroupManager({
      mountinfo: () => '25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n',
      selfCgroup: () => '0::/\n',
      pid: 5,
      root: fake,
      alive: () => true,
      onExit: () => undefined,
    });
    const s = m.detect();
    assert.equal(s.memory, false);
    assert.equal(s.pids, true);
    assert.match(s.reason ?? '', /memory/);
  });

  test('no cgroups at all: unsupported, with a reason, and no worker groups', () => {
    const m = new CgroupManager({ mountinfo: () => '', selfCgroup: () => '0::/\n', pid: 1, root: '/nonexistent', alive: () => true, onExit: () => undefined });
    const s = m.detect();
    assert.equal(s.version, null);
    assert.equal(s.memory, false);
    assert.equal(s.pids, false);
    assert.ok(s.reason);
    assert.equal(m.create(undefined, { memoryBytes: 1 }), undefined);
  });
});
