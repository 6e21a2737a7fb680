import assert from 'node:assert/strict';
import type { Worker } from '../../src/runtime/worker.ts';
import type { Outcome } from '../../src/runtime/contract.ts';

/** A result's text, or the whole outcome when it is not a result (for assertion messages). */
export const text = (o: Outcome): string => (o.kind === 'result' ? o.body.toString('utf8') : `<${o.kind}: ${JSON.stringify(o)}>`);

/** The process group of a worker is gone: nothing of the sandbox outlived it. */
export function groupGone(w: Worker): boolean {
  const pid = (w as unknown as { child: { pid: number } }).child.pid;
  try {
    process.kill(-pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** A call on a worker that never answers: a timeout within bounds, and the whole sandbox gone. */
export async function assertTimeoutKillsSandbox(w: Worker): Promise<void> {
  const t0 = Date.now();
  const o = await w.call('json', Buffer.from('1'), 700);
  assert.equal(o.kind, 'timeout');
  assert.ok(Date.now() - t0 < 5000);
  await w.done;
  assert.equal(w.dead, true);
  assert.ok(groupGone(w), 'no process of the sandbox survives');
}
