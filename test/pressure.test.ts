/**
 * The load meter background work paces itself by (src/concurrency.ts Pressure), on this
 * process's real event loop: saturated only when requests began in the window and the loop was
 * busy for at least the threshold of it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Pressure } from '../src/concurrency.ts';

/** Keeps the event loop busy for `ms`. */
function spin(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // busy
  }
}
const idle = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('a busy loop with requests is saturation', () => {
  const p = new Pressure(0.5, 50);
  p.request();
  spin(80);
  assert.equal(p.saturated(), true);
});

test('a busy loop without requests is not: background work does not hold itself back', () => {
  const p = new Pressure(0.5, 50);
  spin(80);
  assert.equal(p.saturated(), false);
});

test('requests on an idle loop are not', async () => {
  const p = new Pressure(0.5, 50);
  p.request();
  await idle(80);
  assert.equal(p.saturated(), false);
});

test('measured once per window: the answer holds within it, and the next window starts afresh', async () => {
  const p = new Pressure(0.5, 50);
  p.request();
  spin(80);
  assert.equal(p.saturated(), true);
  // Within the window just measured, the same answer, whatever happens meanwhile.
  assert.equal(p.saturated(), true);
  // A quiet window after it (no request, idle) ends the saturation.
  await idle(80);
  assert.equal(p.saturated(), false);
});
