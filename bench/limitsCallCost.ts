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
    ...limiterAlone(),
  ]),
);

/**
 * The limiter alone, what a warm call asks of it (admit, the RateLimit fields of its answer, the
 * release), CPU ns per call: the difference a whole call's rounds above resolve only to a few µs.
 */
function limiterAlone(): string[] {
  const own = new Limits(limits.defaults, new CallLimiter());
  const caller = { userId: 2, limits: null, keyId: 'k', permissions: {} };
  const CALLS = 1_000_000;
  const reps: number[] = [];
  let fields = 0;
  for (let r = 0; r < 7; r++) {
    const t0 = process.cpuUsage();
    for (let i = 0; i < CALLS; i++) {
      const release = own.admit(caller, true) as () => void;
      fields += own.rateFields(caller)!.length;
      release();
    }
    const c = process.cpuUsage(t0);
    reps.push(((c.user + c.system) * 1000) / CALLS);
  }
  if (fields !== 7 * CALLS * 2) throw new Error('the limiter gave no RateLimit fields');
  const sorted = [...reps].sort((a, b) => a - b);
  return [`the limiter alone (admit, RateLimit fields, release; 7 × 1,000,000 calls): CPU ${Math.round(sorted[3]!)} ns per call (median; per repetition: ${reps.map((x) => Math.round(x)).join(', ')})`];
}
