/**
 * Where a warm call's server CPU goes, stage by stage, measured in this process (no HTTP): a
 * home with the echo published (through a real server, as bench/algo.ts does), then each stage
 * the call path runs, in a loop, timed with process.cpuUsage (user + system of this process,
 * all threads: what /proc charges the server). The worker round trip is measured as CPU of this
 * process per Worker.call (waiting for the worker costs no CPU here; the worker's own CPU is
 * not counted). Stages are interleaved over rounds; medians are printed.
 *
 *   node --import tsx bench/callStages.ts [--rounds N]
 */
import fs from 'node:fs';
import path from 'node:path';
import { buildApp } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { envelope } from '../src/algorithms/envelope.ts';
import type { Worker } from '../src/runtime/worker.ts';
import { createServices } from '../src/services.ts';
import { release } from '../test/helpers/algorithms.ts';
import { api } from '../test/helpers/server.ts';
import { argOf } from './baseTree.ts';
import { createBench, fmt } from './common.ts';
import { median } from './load.ts';

const bench = createBench('callStages');
const ROUNDS = Number(argOf('--rounds') ?? 7);
const INPUT = Buffer.from('hello, algohost', 'utf8');

async function main(): Promise<void> {
  const home = path.join(bench.work, 'home');
  fs.mkdirSync(home, { recursive: true });
  const config = loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, {});
  const services = await createServices(config, { runtime: { pool: { maxWorkers: 4, maxPerVersion: 1, idleMs: 600_000, maxQueue: 100, queueTimeoutMs: 60_000 } } });
  const apiKey = (await services.users.create('bench')).apiKey;
  const app = buildApp(services);
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  try {
    await release(api(url, apiKey), 'bench', 'Echo', { 'src/Echo.js': 'export function apply(input) { return input; }\n' }, { settings: { language: 'javascript' } });
    const authorization = `Simple ${apiKey}`;
    const principal = await services.keys.authenticate(authorization);
    const request = { owner: 'bench', name: 'Echo', version: undefined, contentType: 'text' as const, input: INPUT, timeoutS: 300, stdout: false };
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
    await app.close();
    await services.close();
  }
}

await bench.run(main);
