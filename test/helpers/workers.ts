import type { Outcome, Worker } from '../../src/runtime/worker.ts';

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
