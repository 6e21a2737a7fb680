import { LimitError } from './refusal.ts';

/**
 * An owner's cap on one algorithm's calls under way, every caller's together
 * (`settings.max_concurrency`; docs/limits.md). Counted in this process: with several API
 * nodes, each holds the cap on its own.
 *
 * A request past the cap is refused at once (429 `concurrency_limited`, scope `algorithm`);
 * a run that was accepted earlier (an async call from its queue, a trigger's run) waits for a
 * slot instead, in turn, and requests do not pass runs that wait.
 */
export class AlgorithmSlots {
  private readonly algorithms = new Map<string | number, Entry>();

  private entry(id: string | number, max: number): Entry {
    let e = this.algorithms.get(id);
    if (e === undefined) {
      e = { inFlight: 0, max, waiting: [] };
      this.algorithms.set(id, e);
    }
    // The cap as the owner set it last (lowered: slots freed are not handed on until under it).
    e.max = max;
    return e;
  }

  /** Calls of the algorithm under way here. */
  inFlight(id: string | number): number {
    return this.algorithms.get(id)?.inFlight ?? 0;
  }

  /** Takes a slot of algorithm `id` (at most `max` under way), or throws concurrency_limited. */
  take(id: string | number, max: number, name: string): () => void {
    const e = this.entry(id, max);
    if (e.inFlight >= max || e.waiting.length > 0) {
      throw new LimitError('concurrency_limited', `${name} has ${e.inFlight} calls under way, the most its owner allows at once; retry shortly`, [['retry-after', '1']], { limit: 'max_concurrency', scope: 'algorithm', max_concurrency: max });
    }
    e.inFlight++;
    return this.releaser(id, e);
  }

  /** Waits for a slot of algorithm `id`, in turn. */
  async wait(id: string | number, max: number): Promise<() => void> {
    const e = this.entry(id, max);
    // A slot freed is handed to the run first in line, counted for it by the one freeing it.
    if (e.inFlight >= max || e.waiting.length > 0) await new Promise<void>((resolve) => e.waiting.push(resolve));
    else e.inFlight++;
    return this.releaser(id, e);
  }

  private releaser(id: string | number, e: Entry): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      e.inFlight--;
      if (e.waiting.length > 0 && e.inFlight < e.max) {
        e.inFlight++;
        e.waiting.shift()!();
      } else if (e.inFlight === 0 && e.waiting.length === 0) {
        this.algorithms.delete(id);
      }
    };
  }
}

interface Entry {
  inFlight: number;
  max: number;
  /** Accepted runs waiting for a slot, first first. */
  waiting: (() => void)[];
}
