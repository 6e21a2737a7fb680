/**
 * What an AsyncLocalStorage costs on this Node once entered (why src/tracing.ts keeps none): an async
 * function of 20 awaits, timed with none ever entered, then with one run per call, then with it
 * entered but not run. On Node 20 an entered AsyncLocalStorage hooks every promise made.
 *
 *   node bench/alsCost.mjs
 */
import { AsyncLocalStorage } from 'node:async_hooks';
const als = new AsyncLocalStorage();
async function step(x) { return x + 1; }
async function call() { let x = 0; for (let i = 0; i < 20; i++) x = await step(x); return x; }
async function measure(label, wrap) {
  const N = 50000;
  for (let i = 0; i < 2000; i++) await wrap(call);
  const t0 = process.cpuUsage();
  for (let i = 0; i < N; i++) await wrap(call);
  const d = process.cpuUsage(t0);
  console.log(label, ((d.user + d.system) * 1000 / N).toFixed(0), 'ns per call of 20 awaits');
}
await measure('no ALS ever entered', (f) => f());
await measure('no ALS ever entered', (f) => f());
const obj = {};
await measure('ALS.run per call', (f) => als.run(obj, f));
await measure('ALS enabled, no run', (f) => f());
await measure('ALS.run per call', (f) => als.run(obj, f));
