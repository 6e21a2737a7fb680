/**
 * What the cluster's and the sandbox's defences cost (issue 22), each against its baseline in
 * the same run, interleaved:
 * - the cold start of a sandboxed echo worker with the network behind the egress fence
 *   (`ALGOHOST_ALGORITHM_NETWORK=nat`) against one without network, and one with the host's
 *   network: Worker.start until `ready`, and until the first call's answer;
 * - a warm call on a worker without network, this tree against none fenced: unchanged code
 *   path, measured to show it stays so;
 * - sealing and opening one message of the cluster bus (seal.ts) against framing it alone.
 *
 *   node --import ./bin/loader.mjs bench/fence.ts [--rounds N]
 */
import fs from 'node:fs';
import path from 'node:path';
import { argOf } from './baseTree.ts';
import { createBench, fmt, interleaved } from './common.ts';
import { median } from './load.ts';
import { Worker } from '../src/runtime/worker.ts';
import { DEFAULT_LIMITS, probeSandbox } from '../src/runtime/sandbox.ts';
import { probeFence, type FencePolicy } from '../src/runtime/egressFence.ts';
import { ClusterKey } from '../src/cluster/seal.ts';
import { frame, unframe } from '../src/cluster/messages.ts';

const bench = createBench('fence');
const ROUNDS = Number(argOf('--rounds') ?? 15);
const FENCE: FencePolicy = { reach: 'public', allow: [], deny: [] };

type Kind = 'no network' | 'fenced (nat)' | 'host network';

async function cold(runner: 'node' | 'python', dir: string, entry: string, kind: Kind): Promise<{ ready: number; first: number }> {
  const t0 = performance.now();
  const w = await Worker.start({ runner, algoDir: dir, entry, network: kind !== 'no network', fence: kind === 'fenced (nat)' ? FENCE : undefined, limits: DEFAULT_LIMITS });
  const ready = performance.now() - t0;
  const o = await w.call('json', Buffer.from('"x"'), 10_000);
  const first = performance.now() - t0;
  if (o.kind !== 'result') throw new Error(`${kind}: ${JSON.stringify(o)}`);
  await w.stop();
  return { ready, first };
}

function sealCost(): string[] {
  const key = new ClusterKey('a bench secret of thirty-two characters or more');
  const header = { type: 'run', call: 'c'.repeat(32), api: 'algohost.v1.host.0123456789abcdef', sdk: true, job: { target: { build: { algorithmId: 7, hash: 'ab'.repeat(32) }, runner: 'node', entry: 'index.js', network: false }, contentType: 'json', timeoutMs: 300000, nesting: 0 } };
  const rows = ['| one message of the bus | frame + unframe, µs | with seal + open, µs | seal + open alone, µs |', '|---|---:|---:|---:|'];
  for (const size of [16, 4096, 1024 * 1024]) {
    const body = Buffer.alloc(size, 7);
    const n = size > 100_000 ? 200 : 20_000;
    const time = (fn: () => void) => {
      const xs: number[] = [];
      for (let r = 0; r < 5; r++) {
        const t0 = performance.now();
        for (let i = 0; i < n; i++) fn();
        xs.push(((performance.now() - t0) * 1000) / n);
      }
      return median(xs);
    };
    const plain = time(() => unframe(frame(header, body)));
    const sealed = time(() => unframe(key.open('algohost.v1.run', key.seal('algohost.v1.run', frame(header, body)))));
    rows.push(`| ${size.toLocaleString('en-US')}-byte body | ${fmt(plain, 2)} | ${fmt(sealed, 2)} | ${fmt(sealed - plain, 2)} |`);
  }
  return rows;
}

async function main(): Promise<void> {
  if (!probeSandbox().available) throw new Error('no sandbox here');
  const fence = probeFence();
  if (!fence.available) throw new Error(`no fence here: ${fence.reason}`);
  const dir = path.join(bench.work, 'echo');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'echo.mjs'), 'export function apply(input) { return input; }\n');
  fs.writeFileSync(path.join(dir, 'echo.py'), 'def apply(input):\n    return input\n');
  const out: string[] = [`Rounds: ${ROUNDS}, interleaved; medians.`, ''];
  for (const runner of ['python', 'node'] as const) {
    const entry = runner === 'node' ? 'echo.mjs' : 'echo.py';
    const kinds: Kind[] = ['no network', 'fenced (nat)', 'host network'];
    for (const k of kinds) await cold(runner, dir, entry, k); // warm the page cache
    bench.log(`${runner}: ${ROUNDS} rounds of cold starts`);
    const results = await interleaved(ROUNDS, kinds, (k) => cold(runner, dir, entry, k));
    const base = results.get('no network')!;
    out.push(`| ${runner} worker, cold | ready, p50 ms | first answer, p50 ms | first answer − no network, ms | ratio |`, '|---|---:|---:|---:|---:|');
    for (const k of kinds) {
      const r = results.get(k)!;
      const first = median(r.map((x) => x.first));
      const baseFirst = median(base.map((x) => x.first));
      out.push(`| ${k} | ${fmt(median(r.map((x) => x.ready)))} | ${fmt(first)} | ${fmt(first - baseFirst)} | ${fmt(first / baseFirst, 2)} |`);
    }
    out.push('');
  }
  // A warm call without network goes the way it always went (no fence is involved): measured to show it.
  const w = await Worker.start({ runner: 'node', algoDir: dir, entry: 'echo.mjs', network: false, limits: DEFAULT_LIMITS });
  const f = await Worker.start({ runner: 'node', algoDir: dir, entry: 'echo.mjs', network: true, fence: FENCE, limits: DEFAULT_LIMITS });
  const warm = await interleaved(ROUNDS * 20, [w, f], async (x) => {
    const t0 = performance.now();
    await x.call('json', Buffer.from('"x"'), 10_000);
    return performance.now() - t0;
  });
  out.push('| warm node call | p50 ms |', '|---|---:|', `| no network | ${fmt(median(warm.get(w)!), 3)} |`, `| fenced (nat) | ${fmt(median(warm.get(f)!), 3)} |`, '');
  await w.stop();
  await f.stop();
  out.push(...sealCost());
  process.stdout.write(out.join('\n') + '\n');
}

void bench.run(main);
