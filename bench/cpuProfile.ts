/**
 * Summaries of a V8 CPU profile (`node --cpu-prof`) for the algorithm-call benchmark's
 * profile mode: where the process spent its time, by module (self time of the sampled
 * frame: a package under node_modules, a file of ours, a Node internal module, or V8's
 * "(garbage collector)", "(program)", "(idle)"), by function of ours including what it called
 * (synchronous stacks only: the part of an async function after an `await` shows up under
 * the promise machinery that resumed it), the top functions by self time, and by phase of a
 * call: each sample goes to the first frame, from the sampled one up its stack, that belongs to
 * a phase (SQL: Kysely, better-sqlite3, src/store; the worker round trip: src/runtime;
 * authentication: src/auth; resolution: src/algorithms; our route: src/http, src/app.ts; the
 * HTTP server: node:http, fastify, pino), so that a socket write lands in the phase that made it.
 * Samples taken while the inspector itself runs (stopping the profile) are left out.
 */
import fs from 'node:fs';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

export interface ProfileSummary {
  /** Sampled wall time, ms (idle included). */
  totalMs: number;
  idleMs: number;
  byModule: { name: string; ms: number }[];
  /** Functions of src/ (inclusive, synchronous callees). */
  ours: { name: string; ms: number }[];
  topSelf: { name: string; ms: number }[];
  byPhase: { name: string; ms: number }[];
}

export const PHASES = {
  sql: 'SQL: Kysely (building and compiling queries) + better-sqlite3',
  worker: 'worker round trip, server side (src/runtime: pool, frames, channel writes and reads)',
  auth: 'authentication (src/auth, its SQL excluded)',
  resolution: 'call resolution (src/algorithms: ACL, registry, versions, builds; their SQL excluded)',
  route: 'our call route and hooks (src/http, src/app.ts: body, envelope, reply)',
  http: 'HTTP server (node:http parsing and socket writes, fastify routing and reply, pino)',
  gc: '(garbage collector)',
  program: '(program): V8 and native code outside JavaScript',
  other: 'other (event loop, streams and microtasks with no frame of the above)',
} as const;

function phaseOf(module: string): keyof typeof PHASES | undefined {
  if (module === 'kysely' || module === 'better-sqlite3' || module.startsWith('src/store/')) return 'sql';
  if (module.startsWith('src/runtime/')) return 'worker';
  if (module.startsWith('src/auth/')) return 'auth';
  if (module.startsWith('src/algorithms/')) return 'resolution';
  if (module.startsWith('src/')) return 'route';
  if (/^(fastify|find-my-way|avvio|pino|pino-std-serializers|light-my-request|@fastify\/.*|node:_http_.*|node:http)$/.test(module)) return 'http';
  return undefined;
}

function moduleOf(f: CallFrame, repo: string): string {
  const url = f.url.replace(/^file:\/\//, '');
  if (url === '') return f.functionName.startsWith('(') ? f.functionName : '(native)';
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 14).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  if (url.startsWith(repo)) return url.slice(repo.length);
  if (url.startsWith('node:')) return url;
  return url;
}

const frameName = (f: CallFrame, repo: string) => `${f.functionName || '(anonymous)'} ${moduleOf(f, repo)}:${f.lineNumber + 1}`;

export function summarize(file: string, repo: string): ProfileSummary {
  const p = JSON.parse(fs.readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  p.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000));

  const add = (m: Map<string, number>, k: string, ms: number) => m.set(k, (m.get(k) ?? 0) + ms);
  const modules = new Map<string, number>();
  const ours = new Map<string, number>();
  const top = new Map<string, number>();
  const phases = new Map<string, number>();
  let total = 0;
  let idle = 0;
  const stackOf = (id: number) => {
    const out: CallFrame[] = [];
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) out.push(byId.get(cur)!.callFrame);
    return out;
  };
  for (const [id, ms] of self) {
    const n = byId.get(id)!;
    const stack = stackOf(id);
    if (stack.some((f) => f.url === 'node:inspector')) continue;
    total += ms;
    const leaf = n.callFrame.functionName;
    let phase: keyof typeof PHASES | undefined;
    if (leaf === '(garbage collector)') phase = 'gc';
    else if (leaf === '(program)') phase = 'program';
    else if (leaf !== '(idle)') {
      for (const f of stack) {
        phase = phaseOf(moduleOf(f, repo));
        if (phase) break;
      }
      phase ??= 'other';
    }
    if (phase) add(phases, PHASES[phase], ms);
    if (n.callFrame.functionName === '(idle)') idle += ms;
    add(modules, moduleOf(n.callFrame, repo), ms);
    add(top, frameName(n.callFrame, repo), ms);
    const seen = new Set<string>();
    for (const f of stack) {
      if (!moduleOf(f, repo).startsWith('src/')) continue;
      const k = frameName(f, repo);
      if (seen.has(k)) continue;
      seen.add(k);
      add(ours, k, ms);
    }
  }
  const sorted = (m: Map<string, number>, n: number) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([name, ms]) => ({ name, ms }));
  return { totalMs: total, idleMs: idle, byModule: sorted(modules, 25), ours: sorted(ours, 30), topSelf: sorted(top, 30), byPhase: sorted(phases, 20) };
}
