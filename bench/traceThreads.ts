/**
 * Where exporting traces costs a loaded server its CPU, thread by thread (docs/traces.md,
 * docs/performance.md "Traces"): one server (bench/algoServer.ts, default pool) with tracing off
 * and one with every trace exported (BENCH_OTLP, to an OTLP/HTTP sink in this process that only
 * counts bytes), started one after the other, each loaded with warm echo calls at 64 keep-alive
 * connections; each thread's CPU over the measured seconds, from /proc/PID/task/TID/schedstat
 * (bench/procTree.ts's threadCpuNs), per call. Pairs of the two alternate (`--pairs`).
 *
 * bench/traceCost.ts measures a span's cost in a tight loop; a server's spans live across their
 * requests (made at the start, their attributes set at several points, ended when the answer has
 * gone, posted to the export thread later), and this measures what that costs each thread.
 *
 *   node --import ./bin/loader.mjs bench/traceThreads.ts [--pairs 3] [--seconds 10]
 *
 * Prints a table per pair; writes nothing to docs/.
 */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { loadConfig } from '../src/config.ts';
import { createServices } from '../src/services.ts';
import { release } from '../test/helpers/algorithms.ts';
import { api } from '../test/helpers/server.ts';
import { numArg } from './baseTree.ts';
import { createBench, fmt } from './common.ts';
import { rawRequest, runLoad } from './load.ts';
import { threadCpuNs } from './procTree.ts';
import { spawnServer, type ServerProc } from './procs.ts';

const PAIRS = numArg('--pairs', 3);
const SECONDS = numArg('--seconds', 10);
const WARMUP_MS = 3000;
const CONNECTIONS = 64;

const bench = createBench('traceThreads');

async function measure(label: string, home: string, key: string, env: Record<string, string>): Promise<string[]> {
  const server: ServerProc = await spawnServer(label, { args: ['bench/algoServer.ts', home], env, logFile: path.join(bench.work, `${label.replace(/\W+/g, '-')}.log`) });
  bench.procs.push(server);
  try {
    const requests = [rawRequest(server.port, 'POST', '/v1/algo/owner/Echo', { Authorization: `Simple ${key}`, 'Content-Type': 'text/plain' }, Buffer.from('hello'))];
    await runLoad(server.port, requests, CONNECTIONS, WARMUP_MS);
    const before = threadCpuNs(server.pid);
    const load = await runLoad(server.port, requests, CONNECTIONS, SECONDS * 1000);
    const after = threadCpuNs(server.pid);
    const lines = [`${label}: ${fmt(load.rate, 0)} calls/s, ${load.errors} errors; CPU µs per call by thread:`];
    for (const [tid, ns] of after) {
      const used = ns - (before.get(tid) ?? 0);
      if (used === 0) continue;
      lines.push(`  ${tid === server.pid ? 'event loop' : `thread ${tid}`}: ${fmt(used / 1000 / load.completed, 1)}`);
    }
    return lines;
  } finally {
    await server.stop();
    bench.procs.splice(bench.procs.indexOf(server), 1);
  }
}

await bench.run(async () => {
  let received = 0;
  const sink = http.createServer((req, res) => {
    req.on('data', (c: Buffer) => (received += c.length));
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  await new Promise<void>((r) => sink.listen(0, '127.0.0.1', r));
  bench.defer(() => new Promise<void>((r) => sink.close(() => r())));
  const otlp = `http://127.0.0.1:${(sink.address() as AddressInfo).port}`;

  const home = path.join(bench.work, 'home');
  fs.mkdirSync(home, { recursive: true });
  const services = await createServices(loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, {}));
  const key = (await services.users.create('owner')).apiKey;
  await services.close();
  const publisher = await spawnServer('publish', { args: ['bench/algoServer.ts', home], logFile: path.join(bench.work, 'publish.log') });
  bench.procs.push(publisher);
  await release(api(`http://127.0.0.1:${publisher.port}`, key), 'owner', 'Echo', { 'src/index.js': 'export function apply(input) { return input; }\n' }, { settings: { language: 'javascript' } });
  await publisher.stop();
  bench.procs.splice(bench.procs.indexOf(publisher), 1);

  for (let pair = 1; pair <= PAIRS; pair++) {
    // Alternating which goes first.
    const order = pair % 2 === 1 ? (['off', 'exported'] as const) : (['exported', 'off'] as const);
    for (const which of order) {
      const lines = await measure(`tracing ${which} (pair ${pair})`, home, key, which === 'off' ? {} : { BENCH_OTLP: otlp });
      process.stdout.write(lines.join('\n') + '\n');
    }
  }
  process.stdout.write(`OTLP bytes received in all: ${fmt(received, 0)}\n`);
});
