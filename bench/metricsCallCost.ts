/**
 * What Prometheus metrics cost a warm call (bench/callCost.ts): metrics off (NO_METRICS) against
 * on (a PromMetrics counting the call, its run time and the wait for a worker, as a node with
 * ALGOHOST_METRICS_ADDR does; plus the HTTP request's count the direct path adds).
 *
 *   node --import ./bin/loader.mjs bench/metricsCallCost.ts [--rounds N] [--calls N]
 *
 * Prints a table; writes nothing to docs/.
 */
import { PromMetrics } from '../src/metrics.ts';
import { callCost } from './callCost.ts';
import { createBench } from './common.ts';

const bench = createBench('metricsCallCost');
const on = new PromMetrics();
await bench.run(() =>
  callCost(bench, { name: 'metrics off' }, { name: 'metrics on', metrics: on }, async () => [
    `calls counted by the metrics that were on: ${/algohost_calls_total\{outcome="success"\} (\d+)/.exec((await on.scrape()).body)?.[1]}`,
  ]),
);
