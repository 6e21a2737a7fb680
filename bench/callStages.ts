/**
 * Where a warm call's server CPU goes, stage by stage, measured in this process (no HTTP): a
 * home with the echo published (through a real server, as bench/algo.ts does), then each stage
 * the call path runs, in a loop, timed with process.cpuUsage (user + system of this process,
 * all threads: what /proc charges the server). The worker round trip is measured as CPU of this
 * process per Worker.call (waiting for the worker costs no CPU here; the worker's own CPU is
 * not counted). Stages are interleaved over rounds; medians are printed.
 *
 *   node --import ./bin/loader.mjs bench/callStages.ts [--rounds N]
 */
import { envelope } from '../src/algorithms/envelope.ts';
import type { Worker } from '../src/runtime/worker.ts';
import { argOf } from './baseTree.ts';
import { createBench, fmt } from './common.ts';
import { openEchoHome } from './echoHome.ts';
import { median } from './load.ts';

const bench = createBench('callStages');
const ROUNDS = Number(argOf('--rounds') ?? 7);
const INPUT = Buffer.from('hello, algohost', 'utf8');

async function main(): Promise<void> {
  const { services, apiKey, principal, request, close } = await openEchoHome(bench, INPUT);
  try {
    const authorization = `Simple ${apiKey}`;
    const target = await services.releases.resolveCall(principal, 'bench', 'Echo', undefined);
    const result = await services.calls.call(principal, request);
    if (result.outcome.kind !== 'result') throw new Error(`the echo answered ${result.outcome.kind}`);

    const stages: [string, number, () => unknown][] = [
      ['store.version() (the WAL index header; PRAGMA data_version before ceac707)', 20_000, () => services.store.version()],
      ['keys.authenticate (cached principal)', 20_000, () => services.keys.authenticate(authorization)],
      ['releases.resolveCall (cached target)', 20_000, () => services.releases.resolveCall(principal, 'bench', 'Echo', undefined)],
      ['authenticate + resolveCall, each reading the store\'s version', 20_000, async () => services.releases.resolveCall(await services.keys.authenticate(authorization), 'bench', 'Echo', undefined)],
      ['authenticate + resolveCall, one version read passed to both', 20_000, async () => {
        const at = services.store.version();
        return services.releases.resolveCall(await services.keys.authenticate(authorization, at), 'bench', 'Echo', undefined, at);
      }],
      ['envelope', 20_000, () => envelope(result, 300)],
      ['runtime.run: build lookup + pool + Worker.call round trip (server side)', 2_000, () => services.runtime.run({ target: { build: { algorithmId: target.algorithm.id, hash: target.build.hash }, key: `${target.algorithm.id}:${target.build.hash}`, runner: 'node', entry: '', network: false }, contentType: 'text', input: INPUT, timeoutMs: 30_000, nesting: 0 })],
      ['calls.call: resolution + run + round trip', 2_000, () => services.calls.call(principal, request)],
    ];
    // The pool's warm worker itself, for Worker.call alone.
    const key = `${target.algorithm.id}:${target.build.hash}`;
    let worker: Worker | undefined;
    await services.runtime.pool.with(key, () => Promise.reject(new Error('no warm worker')), async (w) => {
      worker = w;
    });
    stages.push(['Worker.call alone (server side)', 2_000, () => worker!.call('text', INPUT, 30_000)]);
    const results = new Map<string, number[]>(stages.map(([n]) => [n, []]));
    for (let round = 0; round <= ROUNDS; round++) {
      for (const [name, n, fn] of stages) {
        const c0 = process.cpuUsage();
        for (let i = 0; i < n; i++) await fn();
        const c = process.cpuUsage(c0);
        if (round > 0) results.get(name)!.push((c.user + c.system) / n);
      }
    }
    const lines = ['| Stage | CPU µs per call (median of rounds) |', '|---|---:|', ...stages.map(([name]) => `| ${name} | ${fmt(median(results.get(name)!), 1)} |`)];
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    await close();
  }
}

await bench.run(main);
