import { ExecutorBusyError } from './contract.ts';
import type { Worker } from './worker.ts';
import { NO_METRICS, type Metrics } from '../metrics.ts';

export interface PoolOptions {
  /** Workers alive at once, all versions together. */
  maxWorkers: number;
  /** Workers of one algorithm version at once. */
  maxPerVersion: number;
  /** An idle worker is stopped after this long. */
  idleMs: number;
  /** Calls waiting for a worker at once; more are refused. */
  maxQueue: number;
  /** How long a call may wait for a worker. */
  queueTimeoutMs: number;
}

export const DEFAULT_POOL: PoolOptions = {
  maxWorkers: 16,
  maxPerVersion: 4,
  idleMs: 5 * 60_000,
  maxQueue: 1000,
  queueTimeoutMs: 60_000,
};


interface Entry {
  key: string;
  worker: Worker;
  idleSince: number;
}

interface Waiter {
  key: string;
  extra: number;
  start: () => Promise<Worker>;
  resolve: (w: Worker) => void;
  reject: (err: unknown) => void;
  /** performance.now() by which it must have a worker. */
  deadline: number;
}

/**
 * Warm workers kept per algorithm version (`key`, e.g. the build hash: a new version never
 * reuses an old version's worker). A call takes an idle worker of its version, or starts one
 * while under both limits, or makes room by stopping the least recently used idle worker of
 * another version, or waits in a bounded queue. Idle workers are stopped after `idleMs`.
 */
export class WorkerPool {
  private readonly idle = new Map<string, Entry[]>();
  private readonly counts = new Map<string, number>();
  private total = 0;
  private readonly queue: Waiter[] = [];
  /**
   * One timer for the waiters' deadlines, armed for the earliest (a waiting call costs no
   * timer of its own: under load most calls wait).
   */
  private waitTimer: NodeJS.Timeout | undefined;
  private waitTimerAt = Infinity;
  private readonly sweeper: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly options: PoolOptions = DEFAULT_POOL,
    private readonly metrics: Metrics = NO_METRICS,
  ) {
    this.sweeper = setInterval(() => this.sweep(), Math.max(50, Math.min(options.idleMs / 2, 30_000)));
    this.sweeper.unref();
  }

  /** Workers alive, and of those idle: for /health and tests. */
  stats(): { total: number; idle: number; waiting: number } {
    let idle = 0;
    for (const list of this.idle.values()) idle += list.length;
    return { total: this.total, idle, waiting: this.queue.length };
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
   */
  async with<T>(key: string, start: () => Promise<Worker>, fn: (w: Worker) => Promise<T>, extra = 0, waitMs = Infinity): Promise<T> {
    // An idle worker is taken at once: `fn` starts before anything else gets a turn.
    const asked = performance.now();
    const worker = (this.closed ? undefined : this.takeIdle(key)) ?? (await this.acquire(key, start, extra, waitMs));
    this.metrics.workerWait((performance.now() - asked) / 1000);
    try {
      return await fn(worker);
    } finally {
      this.release(key, worker);
    }
  }

  /** `waitMs`: the longest this call may wait in the queue (its own deadline), if shorter. */
  private acquire(key: string, start: () => Promise<Worker>, extra: number, waitMs: number): Promise<Worker> {
    if (this.closed) return Promise.reject(new Error('the worker pool is closed'));
    const warm = this.takeIdle(key);
    if (warm) return Promise.resolve(warm);
    if (this.canStart(key, extra)) return this.launch(key, start);
    if (this.queue.length >= this.options.maxQueue) return Promise.reject(new ExecutorBusyError('queue_full'));
    return new Promise((resolve, reject) => {
      const deadline = performance.now() + Math.min(this.options.queueTimeoutMs, waitMs);
      this.queue.push({ key, extra, start, resolve, reject, deadline });
      if (deadline < this.waitTimerAt) this.armWaitTimer(deadline);
    });
  }

  /** No one waits: nothing for the timer to keep the process alive for. */
  private stopWaitTimer(): void {
    if (this.waitTimer !== undefined) clearTimeout(this.waitTimer);
    this.waitTimer = undefined;
    this.waitTimerAt = Infinity;
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
    let next = Infinity;
    for (let i = 0; i < this.queue.length; ) {
      const w = this.queue[i]!;
      if (w.deadline <= now) {
        this.queue.splice(i, 1);
        w.reject(new ExecutorBusyError('queue_timeout'));
      } else {
        if (w.deadline < next) next = w.deadline;
        i++;
      }
    }
    if (next < Infinity) this.armWaitTimer(next);
  }

  /** Under both limits, or at the global one with an idle worker of another version to stop. */
  private canStart(key: string, extra: number): boolean {
    if ((this.counts.get(key) ?? 0) >= this.options.maxPerVersion + extra) return false;
    if (this.total < this.options.maxWorkers + extra) return true;
    return this.evictLru(key);
  }

  private evictLru(except: string): boolean {
    let oldest: Entry | undefined;
    for (const [k, list] of this.idle) {
      if (k === except || list.length === 0) continue;
      if (!oldest || list[0]!.idleSince < oldest.idleSince) oldest = list[0];
    }
    if (!oldest) return false;
    this.idle.get(oldest.key)!.shift();
    this.retire(oldest.key, oldest.worker);
    return true;
  }

  private async launch(key: string, start: () => Promise<Worker>): Promise<Worker> {
    this.total++;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    try {
      return await start();
    } catch (err) {
      this.forget(key);
      this.serveQueue();
      throw err;
    }
  }

  private release(key: string, worker: Worker): void {
    if (worker.dead || this.closed) {
      this.retire(key, worker);
      this.serveQueue();
      return;
    }
    for (let i = 0; i < this.queue.length; i++) {
      const waiter = this.queue[i]!;
      if (waiter.key !== key) continue;
      this.queue.splice(i, 1);
      if (this.queue.length === 0) this.stopWaitTimer();
      waiter.resolve(worker);
      return;
    }
    const list = this.idle.get(key) ?? [];
    list.push({ key, worker, idleSince: Date.now() });
    this.idle.set(key, list);
    this.serveQueue();
  }

  /** Starts workers for waiting calls while there is room (making room from idle workers). */
  private serveQueue(): void {
    for (let i = 0; i < this.queue.length; ) {
      const waiter = this.queue[i]!;
      const warm = this.takeIdle(waiter.key);
      if (warm || this.canStart(waiter.key, waiter.extra)) {
        this.queue.splice(i, 1);
        if (warm) waiter.resolve(warm);
        else this.launch(waiter.key, waiter.start).then(waiter.resolve, waiter.reject);
      } else {
        i++;
      }
    }
    if (this.queue.length === 0) this.stopWaitTimer();
  }

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
    this.serveQueue();
  }

  /** Stops every idle worker and refuses new calls; busy workers stop when given back. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    this.stopWaitTimer();
    for (const w of this.queue.splice(0)) w.reject(new Error('the worker pool is closed'));
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
