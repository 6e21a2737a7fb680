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

/**
 * `total` slots shared fairly among owners: an owner holds at most `perOwner` at once, and a
 * freed slot goes to the owners in turn (round robin: of the owners waiting and under that
 * limit, the one served longest ago, then its oldest request). One owner's flood of requests
 * waits behind its own, never in front of anyone else's.
 */
export class FairSlots {
  private running = 0;
  private readonly held = new Map<string, number>();
  private readonly waiting: { owner: string; start: () => void }[] = [];
  /**
   * When each owner was last given a slot (a count of slots given), for the turns; kept after
   * its requests end, so an owner who asks again as soon as one ends takes its turn, not a
   * newcomer's (up to MAX_REMEMBERED owners).
   */
  private readonly served = new Map<string, number>();
  private given = 0;

  constructor(
    readonly total: number,
    readonly perOwner: number,
  ) {}

  /** Resolves with the slot's release once `owner` may go. */
  async acquire(owner: string): Promise<() => void> {
    if (!this.canStart(owner)) await new Promise<void>((start) => this.waiting.push({ owner, start }));
    else this.take(owner);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.release(owner);
    };
  }

  /** Requests waiting, and slots held, for /health and tests. */
  stats(): { running: number; waiting: number } {
    return { running: this.running, waiting: this.waiting.length };
  }

  private canStart(owner: string): boolean {
    return this.running < this.total && (this.held.get(owner) ?? 0) < this.perOwner;
  }

  private take(owner: string): void {
    this.served.set(owner, this.given++);
    this.running++;
    this.held.set(owner, (this.held.get(owner) ?? 0) + 1);
  }

  private release(owner: string): void {
    this.running--;
    const n = (this.held.get(owner) ?? 1) - 1;
    if (n > 0) this.held.set(owner, n);
    else this.held.delete(owner);
    while (this.running < this.total) {
      let next = -1;
      for (let i = 0; i < this.waiting.length; i++) {
        const owner = this.waiting[i]!.owner;
        if (!this.canStart(owner)) continue;
        if (next < 0 || this.turn(owner) < this.turn(this.waiting[next]!.owner)) next = i;
      }
      if (next < 0) break;
      const [w] = this.waiting.splice(next, 1);
      this.take(w!.owner);
      w!.start();
    }
    if (this.served.size > FairSlots.MAX_REMEMBERED) this.forget();
  }

  /** How many owners' turns are remembered at most. */
  static readonly MAX_REMEMBERED = 10_000;

  /** Forgets the turns of the owners served longest ago that hold and wait for nothing, down to half of MAX_REMEMBERED. */
  private forget(): void {
    const idle = [...this.served].filter(([o]) => !this.held.has(o) && !this.waiting.some((w) => w.owner === o)).sort((a, b) => a[1] - b[1]);
    for (const [o] of idle.slice(0, this.served.size - FairSlots.MAX_REMEMBERED / 2)) this.served.delete(o);
  }

  /** An owner never served (or forgotten, long ago) goes before any that was. */
  private turn(owner: string): number {
    return this.served.get(owner) ?? -1;
  }
}

/**
 * Whether this process is saturated by the requests it serves, for background work (webhook
 * deliveries, trigger runs) to pace itself by: requests began within the last window and the
 * event loop was busy at least `threshold` of it. Background work that keeps going at full
 * speed then would take the loop from the requests clients are waiting on (bench:events: ten
 * subscriptions cut the uploads a saturated node took from ~330/s to ~130/s); paced, it takes a
 * small share, and catches up when the requests ease. Only requests count as pressure: a node
 * whose own background work fills its loop, with no request to serve, is not held back.
 */
export class Pressure {
  private requests = 0;
  private seen = 0;
  private elu = performance.eventLoopUtilization();
  private at = performance.now();
  private busy = false;

  constructor(
    private readonly threshold = 0.8,
    private readonly windowMs = 100,
  ) {}

  /** Counts a request begun (the HTTP layer calls it for every request). */
  request(): void {
    this.requests++;
  }

  /** Whether requests have saturated the event loop lately (measured once per window). */
  saturated(now = performance.now()): boolean {
    if (now - this.at >= this.windowMs) {
      const elu = performance.eventLoopUtilization();
      this.busy = this.requests !== this.seen && performance.eventLoopUtilization(elu, this.elu).utilization >= this.threshold;
      this.elu = elu;
      this.seen = this.requests;
      this.at = now;
    }
    return this.busy;
  }
}

/** While saturated, background work runs one round per PACE_MS (docs/events.md, "Under load"). */
export const PACE_MS = 100;

/**
 * The pace of one background loop (the webhook and trigger dispatchers): free while `pressure`
 * says the process is not saturated, else one round per PACE_MS.
 */
export class Pacer {
  private last = -Infinity;

  constructor(private readonly pressure: Pressure | undefined) {}

  /** Whether the round about to run is paced, and if it must wait first, for how many ms (else 0). */
  next(): { paced: boolean; wait: number } {
    if (!(this.pressure?.saturated() ?? false)) return { paced: false, wait: 0 };
    const now = performance.now();
    const wait = this.last + PACE_MS - now;
    if (wait > 0) return { paced: true, wait };
    this.last = now;
    return { paced: true, wait: 0 };
  }
}
