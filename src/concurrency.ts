/** Runs `fn` on every item, `concurrency` at a time, starting no new one once `stop` is aborted or `fn` threw. */
export async function eachLimit<T>(items: readonly T[], concurrency: number, fn: (item: T, signal: AbortSignal) => Promise<void>, stop?: AbortSignal): Promise<void> {
  let next = 0;
  let failed = false; // one failure (rejecting the whole) stops the other workers too
  // Each worker's transfers listen to a signal of its own, and only this function listens to
  // `stop`: 64 transfers in flight on one shared signal would be 64+ listeners on it (and
  // Node's leak warning), where one that fans the abort out is all that is needed.
  const workers = Array.from({ length: Math.min(concurrency, items.length) }, () => new AbortController());
  const fanOut = () => {
    for (const w of workers) w.abort(stop!.reason);
  };
  stop?.addEventListener('abort', fanOut, { once: true });
  const worker = async (own: AbortController) => {
    try {
      while (next < items.length && !stop?.aborted && !failed) await fn(items[next++]!, own.signal);
    } catch (err) {
      failed = true;
      throw err;
    }
  };
  try {
    await Promise.all(workers.map(worker));
  } finally {
    stop?.removeEventListener('abort', fanOut);
  }
}
