import { LimitError } from './refusal.ts';
import type { SharedLimitStore } from './shared.ts';

/** The store every API node counts in (PostgreSQL), and this node's name there. */
export interface SharedSlots {
  store: SharedLimitStore;
  instance: string;
  /** A slot that could not be given back (the database away): the sweep of dead nodes' holds does not catch it. */
  log?: ((err: unknown) => void) | undefined;
}

/** How often a run waiting for a slot of the shared count asks again (doubling up to the last). */
const POLL_MS = [50, 100, 200, 400, 800];

/**
 * An owner's cap on one algorithm's calls under way, every caller's together
 * (`settings.max_concurrency`; docs/limits.md). Counted in this process, or, with `shared`
 * (several API nodes on PostgreSQL), in the store as scope `a<id>`: the cap holds across nodes.
 *
 * A request past the cap is refused at once (429 `concurrency_limited`, scope `algorithm`);
 * a run that was accepted earlier (an async call from its queue, a trigger's run) waits for a
 * slot instead, in turn, and requests do not pass runs that wait on the same node. With the
 * shared count, a run waiting asks the store again every 50–800 ms (nothing tells one node that
 * another's call ended), and a request on another node may take a slot first.
 */
export class AlgorithmSlots {
  private readonly algorithms = new Map<string | number, Entry>();

  constructor(private readonly shared?: SharedSlots) {}

  private entry(id: string | number, max: number): Entry {
    let e = this.algorithms.get(id);
    if (e === undefined) {
      e = { inFlight: 0, max, waiting: [], polling: false };
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

  /**
   * Takes a slot of algorithm `id` (at most `max` under way), or throws concurrency_limited;
   * a promise with the shared count.
   */
  take(id: string | number, max: number, name: string): (() => void) | Promise<() => void> {
    const e = this.entry(id, max);
    const refuse = (n: number) =>
      new LimitError('concurrency_limited', `${name} has ${n} calls under way, the most its owner allows at once; retry shortly`, [['retry-after', '1']], { limit: 'max_concurrency', scope: 'algorithm', max_concurrency: max });
    if (this.shared !== undefined) {
      const shared = this.shared;
      if (e.waiting.length > 0) return Promise.reject(refuse(max));
      return shared.store.hold(scopeOf(id), max, shared.instance).then(async (held) => {
        if (!held) throw refuse(await shared.store.inFlight(scopeOf(id)));
        e.inFlight++;
        return this.releaser(id, e);
      });
    }
    if (e.inFlight >= max || e.waiting.length > 0) throw refuse(e.inFlight);
    e.inFlight++;
    return this.releaser(id, e);
  }

  /** Waits for a slot of algorithm `id`, in turn. */
  async wait(id: string | number, max: number): Promise<() => void> {
    const e = this.entry(id, max);
    if (this.shared !== undefined) {
      if (e.waiting.length === 0 && (await this.shared.store.hold(scopeOf(id), max, this.shared.instance))) e.inFlight++;
      else {
        await new Promise<void>((resolve) => {
          e.waiting.push(resolve);
          void this.poll(id, e);
        });
      }
      return this.releaser(id, e);
    }
    // A slot freed is handed to the run first in line, counted for it by the one freeing it.
    if (e.inFlight >= max || e.waiting.length > 0) await new Promise<void>((resolve) => e.waiting.push(resolve));
    else e.inFlight++;
    return this.releaser(id, e);
  }

  /** With the shared count: asks the store for a slot for the first run waiting, until none waits. */
  private async poll(id: string | number, e: Entry): Promise<void> {
    if (e.polling) return;
    e.polling = true;
    try {
      for (let i = 0; e.waiting.length > 0; ) {
        let held = false;
        try {
          held = await this.shared!.store.hold(scopeOf(id), e.max, this.shared!.instance);
        } catch (err) {
          this.shared!.log?.(err);
        }
        if (held) {
          e.inFlight++;
          e.waiting.shift()!();
          i = 0;
        } else await new Promise((r) => setTimeout(r, POLL_MS[Math.min(i++, POLL_MS.length - 1)]));
      }
    } finally {
      e.polling = false;
    }
  }

  private releaser(id: string | number, e: Entry): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      e.inFlight--;
      if (this.shared !== undefined) {
        const { store, instance, log } = this.shared;
        // Given back, then the first run waiting here asks for it at once.
        void store.release(scopeOf(id), instance).then(
          () => (e.waiting.length > 0 ? this.poll(id, e) : undefined),
          (err: unknown) => log?.(err),
        );
        if (e.inFlight === 0 && e.waiting.length === 0) this.algorithms.delete(id);
        return;
      }
      if (e.waiting.length > 0 && e.inFlight < e.max) {
        e.inFlight++;
        e.waiting.shift()!();
      } else if (e.inFlight === 0 && e.waiting.length === 0) {
        this.algorithms.delete(id);
      }
    };
  }
}

/** The store's scope of an algorithm's cap (users' are `u<id>`, keys' `k<id>`). */
const scopeOf = (id: string | number) => `a${id}`;

interface Entry {
  inFlight: number;
  max: number;
  /** Accepted runs waiting for a slot, first first. */
  waiting: (() => void)[];
  /** With the shared count: a loop asks the store for the first one's slot. */
  polling: boolean;
}
