import { ExecutorBusyError } from './contract.ts';
import { DeadlineHeap, FairQueue } from '../fairQueue.ts';
import type { Worker } from './worker.ts';
import { NO_METRICS, type Metrics } from '../metrics.ts';

export interface PoolOptions {
  /** Workers alive at once, all versions together. */
  maxWorkers: number;
  /** Workers of one algorithm version at once. */
  maxPerVersion: number;
  /** An idle worker is stopped after this long. */
  idleMs: number;
  /** Calls waiting for a worker at once, all callers together; more are refused (503). */
  maxQueue: number;
  /** Calls of one caller waiting for a worker at once; more of theirs are refused (429). Default: maxQueue. */
  maxQueuePerCaller?: number;
  /** How long a call may wait for a worker. */
  queueTimeoutMs: number;
}

export const DEFAULT_POOL: PoolOptions = {
  maxWorkers: 16,
  maxPerVersion: 4,
  idleMs: 5 * 60_000,
  maxQueue: 1000,
  maxQueuePerCaller: 100,
  queueTimeoutMs: 60_000,
};


interface Entry {
  key: string;
  worker: Worker;
  idleSince: number;
}

/**
 * What stopping a version's worker would cost (evictCheapest): how long its workers took to
 * start, and how often it is called (a count that decays by half every HEAT_HALF_LIFE_MS).
 */
interface Cost {
  /** Its workers' start time, ms (a moving average). */
  startMs: number;
  /** Calls, decayed to `at`. */
  heat: number;
  at: number;
}

const HEAT_HALF_LIFE_MS = 60_000;

interface Waiter {
  /** Whose turn it waits for (FairQueue): its caller, and a nested call apart (see acquire). */
  caller: string;
  /** The caller's share: calls of theirs served a turn (FairQueue). */
  weight: number;
  key: string;
  extra: number;
  start: () => Promise<Worker>;
  resolve: (w: Worker) => void;
  reject: (err: unknown) => void;
  /** performance.now() by which it must have a worker. */
  deadline: number;
  settled?: boolean;
}

/**
 * Warm workers kept per algorithm version (`key`, e.g. the build hash: a new version never
 * reuses an old version's worker). A call takes an idle worker of its version, or starts one
 * while under both limits, or makes room by stopping the idle worker of another version whose
 * loss costs least (evictCheapest: start time × calls), or waits. Idle workers are stopped after
 * `idleMs`.
 *
 * Calls wait per caller, and are served in turns across callers (FairQueue: round robin by
 * call), not first come first served: a caller with a thousand calls waiting waits behind their
 * own, and another caller's call is served at the next turns (docs/limits.md, "Fair shares";
 * serveQueue says how a worker freed is given). The waiting is bounded per caller
 * (`maxQueuePerCaller`: ExecutorBusyError `caller_queue_full`), in all (`maxQueue`:
 * `queue_full`), and in time (`queueTimeoutMs`: `queue_timeout`).
 */
export class WorkerPool {
  private readonly idle = new Map<string, Entry[]>();
  private readonly costs = new Map<string, Cost>();
  private readonly counts = new Map<string, number>();
  private total = 0;
  private readonly queue: FairQueue<Waiter>;
  /**
   * The waiters by deadline, and one timer for them, armed for the earliest (a waiting call
   * costs no timer of its own: under load most calls wait).
   */
  private readonly deadlines = new DeadlineHeap<Waiter>();
  private waitTimer: NodeJS.Timeout | undefined;
  private waitTimerAt = Infinity;
  private readonly sweeper: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly options: PoolOptions = DEFAULT_POOL,
    private readonly metrics: Metrics = NO_METRICS,
  ) {
    this.queue = new FairQueue(options.maxQueue, options.maxQueuePerCaller ?? options.maxQueue);
    this.sweeper = setInterval(() => this.sweep(), Math.max(50, Math.min(options.idleMs / 2, 30_000)));
    this.sweeper.unref();
  }

  /** Workers alive, and of those idle: for /health and tests. */
  stats(): { total: number; idle: number; waiting: number } {
    let idle = 0;
    for (const list of this.idle.values()) idle += list.length;
    return { total: this.total, idle, waiting: this.queue.length };
  }

  /** Calls of `caller` waiting for a worker now (tests, and the tenants bench). */
  waitingFor(caller: string): number {
    return this.queue.waiting(caller);
  }

  /**
   * What a worker node announces to its cluster (docs/cluster.md): per version key its idle warm
   * workers, and how many calls could start now without waiting (idle workers of any version can
   * be stopped to make room, so they count as free).
   */
  load(): { warm: Record<string, number>; free: number; running: number } {
    const warm: Record<string, number> = {};
    let idle = 0;
    for (const [key, list] of this.idle) {
      if (list.length > 0) warm[key] = list.length;
      idle += list.length;
    }
    const running = this.total - idle;
    return { warm, free: this.closed ? 0 : Math.max(0, this.options.maxWorkers - running), running };
  }

  /**
   * Runs `fn` with a worker of version `key` (started with `start` if need be), then gives it
   * back. `extra` raises both limits for this call: a nested call may go over by as many
   * workers as its callers hold, or an algorithm calling itself would wait for itself forever.
   * `caller` (opaque: the user who pays) is whose turn the call waits for, if it must wait, and
   * `weight` their share (calls of theirs served a turn while others wait too).
   */
  async with<T>(key: string, start: () => Promise<Worker>, fn: (w: Worker) => Promise<T>, extra = 0, waitMs = Infinity, caller = '', weight = 1): Promise<T> {
    // An idle worker is taken at once: `fn` starts before anything else gets a turn.
    const asked = performance.now();
    this.called(key, asked);
    const worker = (this.closed ? undefined : this.takeIdle(key)) ?? (await this.acquire(key, start, extra, waitMs, caller, weight));
    this.metrics.workerWait((performance.now() - asked) / 1000);
    try {
      return await fn(worker);
    } finally {
      this.release(key, worker);
    }
  }

  /**
   * Starts a worker of version `key` ahead of its first call (docs/limits.md, "Cold starts":
   * warming a new version), where version `after` has a worker (idle or busy): a new version of
   * an algorithm in use, whose callers are likely to come to it. Only into room the pool has:
   * none of `key` yet, nobody waiting for a worker, and fewer than `maxWorkers` (no worker is
   * stopped for it). Once started it is idle, as if a call had just ended on it, and it stands
   * for eviction as `after` does (its start time and call rate), so it is not the first worker
   * stopped when room is needed. False when it was not started.
   */
  prewarm(key: string, after: string, start: () => Promise<Worker>): boolean {
    if (this.closed || this.counts.has(key) || !this.counts.has(after) || this.queue.length > 0 || this.total >= this.options.maxWorkers) return false;
    const now = performance.now();
    const like = this.costs.get(after);
    if (like !== undefined) this.costs.set(key, { startMs: like.startMs, heat: decayed(like, now), at: now });
    this.launch(key, start).then(
      (worker) => this.release(key, worker),
      () => undefined,
    );
    return true;
  }

  /** `waitMs`: the longest this call may wait in the queue (its own deadline), if shorter. */
  private acquire(key: string, start: () => Promise<Worker>, extra: number, waitMs: number, caller: string, weight: number): Promise<Worker> {
    if (this.closed) return Promise.reject(new Error('the worker pool is closed'));
    const warm = this.takeIdle(key);
    if (warm) return Promise.resolve(warm);
    if (this.canStart(key, extra)) return this.launch(key, start);
    return new Promise((resolve, reject) => {
      const deadline = performance.now() + Math.min(this.options.queueTimeoutMs, waitMs);
      // A nested call waits in a line of its own (of its caller's, at its depth): behind its
      // caller's other calls it could wait for a worker its own parent holds.
      const waiter: Waiter = { caller: extra === 0 ? caller : `${caller}\u0000${extra}`, weight, key, extra, start, resolve, reject, deadline };
      const refused = this.queue.push(waiter);
      if (refused !== undefined) {
        reject(new ExecutorBusyError(refused));
        return;
      }
      // Served waiters stay in the heap until they reach its top: rebuilt when they are most of it.
      this.deadlines.compact(this.queue.length);
      this.deadlines.push(waiter);
      if (deadline < this.waitTimerAt) this.armWaitTimer(deadline);
    });
  }

  /** No one waits: nothing for the timer to keep the process alive for. */
  private stopWaitTimer(): void {
    if (this.waitTimer !== undefined) clearTimeout(this.waitTimer);
    this.waitTimer = undefined;
    this.waitTimerAt = Infinity;
    if (this.deadlines.length > 0) this.deadlines.clear();
  }

  private armWaitTimer(at: number): void {
    if (this.waitTimer !== undefined) clearTimeout(this.waitTimer);
    this.waitTimerAt = at;
    this.waitTimer = setTimeout(() => this.expireWaiters(), Math.max(0, at - performance.now()));
  }

  /** Turns away the waiters whose time is up; re-arms for the next deadline. */
  private expireWaiters(): void {
    this.waitTimer = undefined;
    this.waitTimerAt = Infinity;
    const now = performance.now();
    for (let w = this.deadlines.peek(); w !== undefined && w.deadline <= now; w = this.deadlines.peek()) {
      this.deadlines.pop();
      if (this.queue.remove(w)) w.reject(new ExecutorBusyError('queue_timeout'));
    }
    this.deadlines.compact(this.queue.length);
    const next = this.deadlines.peek();
    if (next !== undefined) this.armWaitTimer(next.deadline);
    else this.stopWaitTimer();
  }

  /** Under both limits, or at the global one with an idle worker of another version to stop. */
  private canStart(key: string, extra: number): boolean {
    if ((this.counts.get(key) ?? 0) >= this.options.maxPerVersion + extra) return false;
    if (this.total < this.options.maxWorkers + extra) return true;
    return this.evictCheapest(key);
  }

  /** A call of `key` at `now` (performance.now()): its heat goes up by one. */
  private called(key: string, now: number): void {
    const c = this.costs.get(key);
    if (c === undefined) this.costs.set(key, { startMs: 0, heat: 1, at: now });
    else {
      c.heat = decayed(c, now) + 1;
      c.at = now;
    }
  }

  /**
   * Stops the idle worker whose loss costs least (docs/limits.md, "Cold starts"): of each other
   * version's least recently used idle worker, the one of the version whose restarts would cost
   * least time per minute, its start time × how often it is called, shared among its workers (a
   * version with several keeps the others). Among equals, the least recently used. A long tail
   * of cheap, rarely called versions goes before a model that takes seconds to load and is
   * called all day, however recently each was called.
   */
  private evictCheapest(except: string): boolean {
    const now = performance.now();
    let best: Entry | undefined;
    let bestCost = Infinity;
    for (const [k, list] of this.idle) {
      if (k === except || list.length === 0) continue;
      const c = this.costs.get(k);
      const cost = c === undefined ? 0 : (c.startMs * decayed(c, now)) / (this.counts.get(k) ?? 1);
      if (cost < bestCost || (cost === bestCost && list[0]!.idleSince < best!.idleSince)) {
        best = list[0];
        bestCost = cost;
      }
    }
    if (!best) return false;
    this.idle.get(best.key)!.shift();
    this.retire(best.key, best.worker);
    return true;
  }

  private async launch(key: string, start: () => Promise<Worker>): Promise<Worker> {
    this.total++;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    const began = performance.now();
    try {
      const worker = await start();
      const c = this.costs.get(key);
      const ms = performance.now() - began;
      if (c !== undefined) c.startMs = c.startMs === 0 ? ms : 0.7 * c.startMs + 0.3 * ms;
      return worker;
    } catch (err) {
      this.forget(key);
      this.serveQueue();
      throw err;
    }
  }

  private release(key: string, worker: Worker): void {
    if (worker.dead || this.closed) {
      this.retire(key, worker);
    } else {
      const list = this.idle.get(key) ?? [];
      list.push({ key, worker, idleSince: Date.now() });
      this.idle.set(key, list);
    }
    this.serveQueue();
  }

  /**
   * Serves waiting calls while there is a worker for one, in turns across callers. Of the
   * callers in turn order, the first with a call waiting for a version that has an idle worker
   * is served, its oldest call of that version (warm: a worker freed goes on serving its
   * version, no cold start); if none has, the oldest call of the first for whom a worker can be
   * started (stopping an idle worker of another version to make room). The caller whose turn it
   * is may be passed over by other callers' warm calls only so many times (`maxWorkers`: about
   * one call's time when every worker is busy); then it is served first, a worker started for
   * it if need be.
   */
  private serveQueue(): void {
    while (this.queue.length > 0) {
      // With one caller waiting, nobody else's turn can be passed over.
      const front = this.queue.callers > 1 ? this.queue.first()! : undefined;
      if (front !== this.front) {
        this.front = front;
        this.passedOver = 0;
      }
      let warm: Worker | undefined;
      let waiter: Waiter | undefined;
      if (front !== undefined && this.passedOver >= this.options.maxWorkers) {
        waiter = this.queue.take((w) => w === front && ((warm = this.takeIdle(w.key)) !== undefined || this.canStart(w.key, w.extra)));
      }
      waiter ??= this.queue.takeKeyed(this.idle, (w) => (warm = this.takeIdle(w.key)) !== undefined);
      // Passed over by another caller's call (a caller's own later call of a warm version may go first: it is theirs).
      if (front !== undefined && waiter !== undefined && waiter.caller !== front.caller && (this.counts.get(front.key) ?? 0) < this.options.maxPerVersion + front.extra) this.passedOver++;
      waiter ??= this.queue.take((w) => this.canStart(w.key, w.extra));
      if (waiter === undefined) break;
      if (warm) waiter.resolve(warm);
      else this.launch(waiter.key, waiter.start).then(waiter.resolve, waiter.reject);
    }
    if (this.queue.length === 0) {
      this.stopWaitTimer();
      this.front = undefined;
    }
  }

  /** The oldest call of the caller whose turn it is, when serveQueue last looked; how often warm calls behind it went first since. */
  private front: Waiter | undefined;
  private passedOver = 0;

  /** The most recently used live idle worker of `key`; ones that died while idle are dropped. */
  private takeIdle(key: string): Worker | undefined {
    const list = this.idle.get(key);
    for (let e = list?.pop(); e; e = list!.pop()) {
      if (!e.worker.dead) return e.worker;
      this.retire(key, e.worker);
    }
    return undefined;
  }

  private retire(key: string, worker: Worker): void {
    this.forget(key);
    void worker.stop();
  }

  private forget(key: string): void {
    this.total--;
    const n = (this.counts.get(key) ?? 1) - 1;
    if (n > 0) this.counts.set(key, n);
    else this.counts.delete(key);
  }

  private sweep(): void {
    const cutoff = Date.now() - this.options.idleMs;
    for (const [key, list] of this.idle) {
      while (list.length > 0 && list[0]!.idleSince <= cutoff) this.retire(key, list.shift()!.worker);
      if (list.length === 0) this.idle.delete(key);
    }
    // What is known of versions with no worker left is forgotten once they have gone cold.
    const now = performance.now();
    for (const [key, c] of this.costs) if (!this.counts.has(key) && decayed(c, now) < 0.01) this.costs.delete(key);
    this.serveQueue();
  }

  /** Stops every idle worker and refuses new calls; busy workers stop when given back. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    this.stopWaitTimer();
    for (const w of this.queue.drain()) w.reject(new Error('the worker pool is closed'));
    const stops: Promise<void>[] = [];
    for (const [key, list] of this.idle) {
      for (const e of list) {
        this.forget(key);
        stops.push(e.worker.stop());
      }
    }
    this.idle.clear();
    await Promise.all(stops);
  }
}

/** A version's call count as of `now`, halved every HEAT_HALF_LIFE_MS since it was last counted. */
function decayed(c: Cost, now: number): number {
  return c.heat * 2 ** (-(now - c.at) / HEAT_HALF_LIFE_MS);
}
