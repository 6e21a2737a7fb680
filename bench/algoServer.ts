/**
 * Our server for the algorithm-call benchmark, built in this process the way the tests build
 * it (test/helpers/server.ts): `createServices` + `buildApp` on an existing home, pino at log
 * level silent, on 127.0.0.1 port 0.
 *
 *   node --import ./bin/loader.mjs bench/algoServer.ts HOME [--per-version N] [--profile-to FILE]
 *
 * `--per-version N` sets the worker pool's maxPerVersion (the rest is DEFAULT_POOL); without
 * it the pool is the configuration's default (4 workers per version). Prints
 * "algo is ready at http://127.0.0.1:PORT" on stderr.
 *
 * BENCH_METRICS=1 in the environment: with Prometheus metrics counted (as with ALGOHOST_METRICS_ADDR
 * or ALGOHOST_METRICS_TOKEN; docs/metrics.md), for comparing a warm call with them on and off.
 * BENCH_LIMITS=1: with call limits per user that never refuse (ALGOHOST_LIMIT_CALLS_PER_MIN and
 * _BURST 10,000,000, _CONCURRENCY 1,000; docs/limits.md), for comparing a warm call with them on and off.
 * BENCH_OTLP=URL: spans exported over OTLP/HTTP to URL (as OTEL_EXPORTER_OTLP_ENDPOINT=URL;
 * docs/traces.md), for comparing a warm call with tracing exported and off; with BENCH_OTLP_RATIO=R
 * too, one trace in 1/R sampled (OTEL_TRACES_SAMPLER=parentbased_traceidratio).
 *
 * `--profile-to FILE`: SIGUSR2 starts V8's CPU profiler (through node:inspector: the profiler
 * `--cpu-prof` uses, sampling every 0.5 ms), the next SIGUSR2 stops it and writes the
 * profile to FILE (to FILE.tmp first, then renamed), so that a profile covers only the
 * measured load, not start-up or publishing.
 */
import fs from 'node:fs';
import inspector from 'node:inspector/promises';
import pino from 'pino';
import { buildApp, LOG_OPTIONS } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { DEFAULT_POOL } from '../src/runtime/pool.ts';
import { createServices, type ServiceOptions } from '../src/services.ts';
import { PromMetrics } from '../src/metrics.ts';

const home = process.argv[2];
if (!home) throw new Error('usage: algoServer.ts HOME [--per-version N] [--profile-to FILE]');
const i = process.argv.indexOf('--per-version');
const perVersion = i > 0 ? Number(process.argv[i + 1]) : undefined;

const otlp = process.env.BENCH_OTLP;
const ratio = process.env.BENCH_OTLP_RATIO;
const sampler = ratio ? { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: ratio } : {};
const limits = process.env.BENCH_LIMITS === '1' ? { ALGOHOST_LIMIT_CALLS_PER_MIN: '10000000', ALGOHOST_LIMIT_BURST: '10000000', ALGOHOST_LIMIT_CONCURRENCY: '1000' } : {};
const config = loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, { ALGOHOST_LOG_LEVEL: 'silent', ...limits, ...(otlp ? { OTEL_EXPORTER_OTLP_ENDPOINT: otlp, ...sampler } : {}) });
const options: ServiceOptions = perVersion ? { runtime: { pool: { ...DEFAULT_POOL, maxPerVersion: perVersion } } } : {};
if (process.env.BENCH_METRICS === '1') options.metrics = new PromMetrics();
const services = await createServices(config, options);
await services.hosted.recover();
const app = buildApp(services, { logger: pino({ level: 'silent', ...LOG_OPTIONS }) });
const url = await app.listen({ port: 0, host: '127.0.0.1' });
process.stderr.write(`algo${perVersion ? ` (maxPerVersion ${perVersion})` : ''} is ready at ${url}\n`);
if (options.metrics) process.stderr.write('metrics: on (BENCH_METRICS=1)\n');
if (process.env.BENCH_LIMITS === '1') process.stderr.write(`limits: ${config.limitCallsPerMin} calls a minute, burst ${config.limitBurst}, ${config.limitConcurrency} at once (BENCH_LIMITS=1)\n`);
if (services.tracing.exporting) process.stderr.write(`tracing: exported to ${otlp} (BENCH_OTLP)\n`);
process.stderr.write(`sandbox: ${services.sandbox.available ? 'bubblewrap' : `NONE (${services.sandbox.reason})`}\n`);

const p = process.argv.indexOf('--profile-to');
if (p > 0) {
  const file = process.argv[p + 1]!;
  const session = new inspector.Session();
  session.connect();
  let running = false;
  process.on('SIGUSR2', () => {
    void (async () => {
      if (!running) {
        running = true;
        await session.post('Profiler.enable');
        await session.post('Profiler.setSamplingInterval', { interval: 500 });
        await session.post('Profiler.start');
        process.stderr.write('profiling\n');
        return;
      }
      running = false;
      const { profile } = await session.post('Profiler.stop');
      fs.writeFileSync(`${file}.tmp`, JSON.stringify(profile));
      fs.renameSync(`${file}.tmp`, file);
      process.stderr.write(`profile written to ${file}\n`);
    })();
  });
}

const stop = async () => {
  await app.close();
  await services.close();
  process.exit(0);
};
process.once('SIGTERM', () => void stop());
process.once('SIGINT', () => void stop());
