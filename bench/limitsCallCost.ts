/**
 * What the call limits cost a warm call (bench/callCost.ts; issue 24's target: ≤ 3 % of a warm
 * call): no limits (a CallService without them, as with every ALGOHOST_LIMIT_* at 0) against a
 * rate and a concurrency limit on the caller, high enough never to refuse, so that every call
 * takes a token and a slot and gives the slot back, as on one server (SQLite: the in-memory
 * limiter; several API nodes share theirs through PostgreSQL, docs/limits.md).
 *
 *   node --import ./bin/loader.mjs bench/limitsCallCost.ts [--rounds N] [--calls N]
 *
 * Prints a table; writes nothing to docs/.
 */
import { CallLimiter, Limits } from '../src/limits/limits.ts';
import { callCost } from './callCost.ts';
import { createBench } from './common.ts';

const bench = createBench('limitsCallCost');
const limits = new Limits({ callsPerMin: 100_000_000, burst: 100_000_000, concurrency: 1000 }, new CallLimiter());
await bench.run(() =>
  callCost(bench, { name: 'limits off' }, { name: 'limits on', limits }, async () => [
    `the limiter's state for the caller after the rounds: ${JSON.stringify(await limits.limiter.state('u1', limits.defaults))}`,
  ]),
);
