/**
 * Waiting items, queued per caller and served in turns across callers (deficit round robin with
 * every item's cost one and a caller's quantum their share: a turn serves up to `weight` items
 * of the caller, 1 unless their items say more). A caller who queues a thousand items waits
 * behind their own, never in front of anyone else's: the next item served is one of the caller
 * whose turn it is. A caller of share 3 is served three items a turn where one of share 1 is
 * served one, while both have items waiting. Used by the worker pool (calls waiting for a
 * worker) and the local queue of async calls (docs/limits.md, "Fair shares").
 *
 * An item may have a `key` (the pool's: the algorithm version it needs): `takeKeyed` serves, in
 * turn order, the first caller with an item of a key that can be served now (a worker of that
 * version idle), its oldest of that key; `take` serves the first caller whose oldest item can be.
 *
 * Bounded twice: `maxPerCaller` items of one caller, `maxTotal` of all together; push says
 * which bound refused an item. Costs: push and remove O(1); take O(callers) at worst (it walks
 * the callers in turn order until one can be served); takeKeyed O(callers × keys looked at);
 * never O(items).
 */

/** What the queue needs of an item: whose it is, and its key if any. `settled` is the queue's own mark. */
export interface Queued {
  readonly caller: string;
  readonly key?: string;
  /**
   * The caller's share (docs/limits.md, "Shares"): items of theirs served a turn, a whole number
   * from 1 (the default) to MAX_WEIGHT. The latest item a caller queued with one says it for
   * them; an item without leaves it as it is.
   */
  readonly weight?: number;
  /** Set once the item has left the queue (taken or removed): left behind lazily, skipped. */
  settled?: boolean;
}

/** Items oldest first; `head` is the first not yet looked past. */
interface Deque<T> {
  items: T[];
  head: number;
  /** Items not settled. */
  live: number;
}

/** One caller's items: all of them, and by key; their share, and how much of this turn they had. */
interface Line<T> {
  all: Deque<T>;
  byKey: Map<string, Deque<T>>;
  weight: number;
  served: number;
}

/** The largest share a caller may have: a turn of theirs is at most this many items. */
export const MAX_WEIGHT = 1000;

/** A weight as the queue takes it: a whole number from 1 to MAX_WEIGHT (1 for anything not a number of at least 1). */
export function weightOf(w: number | undefined): number {
  return w === undefined || !(w >= 1) ? 1 : Math.min(MAX_WEIGHT, Math.floor(w));
}

export type Refusal = 'caller_queue_full' | 'queue_full';

const deque = <T>(): Deque<T> => ({ items: [], head: 0, live: 0 });

export class FairQueue<T extends Queued> {
  /**
   * The callers with items waiting, in turn order: the first is the one whose turn it is. A
   * caller served goes to the back; a newcomer joins at the back; one that cannot be served now
   * keeps its place (its turn is not lost).
   */
  private readonly lines = new Map<string, Line<T>>();
  private size = 0;

  constructor(
    readonly maxTotal: number,
    readonly maxPerCaller: number,
  ) {}

  /** Items waiting, all callers together. */
  get length(): number {
    return this.size;
  }

  /** Callers with items waiting. */
  get callers(): number {
    return this.lines.size;
  }

  /** Items of `caller` waiting. */
  waiting(caller: string): number {
    return this.lines.get(caller)?.all.live ?? 0;
  }

  /** The oldest item of the caller whose turn it is (not taken). */
  first(): T | undefined {
    for (const line of this.lines.values()) {
      const item = oldest(line.all);
      if (item !== undefined) return item;
    }
    return undefined;
  }

  /** Queues `item` behind its caller's; or says which bound refuses it (nothing is queued then). */
  push(item: T): Refusal | undefined {
    let line = this.lines.get(item.caller);
    // A caller's own bound, when it is one (as large as the total, the total is all there is).
    if ((line?.all.live ?? 0) >= this.maxPerCaller && this.maxPerCaller < this.maxTotal) return 'caller_queue_full';
    if (this.size >= this.maxTotal) return 'queue_full';
    if (line === undefined) {
      line = { all: deque(), byKey: new Map(), weight: 1, served: 0 };
      this.lines.set(item.caller, line);
    }
    if (item.weight !== undefined) line.weight = weightOf(item.weight);
    item.settled = false;
    line.all.items.push(item);
    line.all.live++;
    const key = item.key ?? '';
    let d = line.byKey.get(key);
    if (d === undefined) line.byKey.set(key, (d = deque()));
    d.items.push(item);
    d.live++;
    this.size++;
    return undefined;
  }

  /**
   * The next item to serve: of the callers in turn order, the oldest item of the first for
   * which `serve` says yes (it is then taken: `serve` may commit to serving it, e.g. take the
   * worker it found). A caller whose oldest item `serve` refuses is passed over this time and
   * keeps its place; its later items wait behind that one.
   */
  take(serve: (item: T) => boolean): T | undefined {
    for (const line of this.lines.values()) {
      const item = oldest(line.all);
      if (item !== undefined && serve(item)) {
        this.settle(line, item, true);
        return item;
      }
    }
    return undefined;
  }

  /**
   * The next item to serve of a key in `keys`: of the callers in turn order, the first with an
   * item of such a key for which `serve` says yes (tried with the caller's oldest of each such
   * key), taken. Only keys of `keys` are looked at (or only the caller's own, if fewer).
   */
  takeKeyed(keys: ReadonlyMap<string, unknown>, serve: (item: T) => boolean): T | undefined {
    for (const line of this.lines.values()) {
      const mine = line.byKey;
      if (mine.size <= keys.size) {
        for (const [key, d] of mine) {
          if (!keys.has(key)) continue;
          const item = oldest(d);
          if (item !== undefined && serve(item)) return this.settle(line, item, true);
        }
      } else {
        for (const key of keys.keys()) {
          const d = mine.get(key);
          const item = d && oldest(d);
          if (item !== undefined && serve(item)) return this.settle(line, item, true);
        }
      }
    }
    return undefined;
  }

  /** Takes `item` out of the queue, wherever it stands (its wait ran out); false if it was not in it. */
  remove(item: T): boolean {
    if (item.settled !== false) return false;
    const line = this.lines.get(item.caller);
    if (line === undefined) return false;
    this.settle(line, item, false);
    return true;
  }

  /** Empties the queue; the items that were waiting, oldest of each caller first. */
  drain(): T[] {
    const all: T[] = [];
    for (const line of this.lines.values()) {
      for (let i = line.all.head; i < line.all.items.length; i++) {
        const item = line.all.items[i]!;
        if (item.settled) continue;
        item.settled = true;
        all.push(item);
      }
    }
    this.lines.clear();
    this.size = 0;
    return all;
  }

  /**
   * `item` leaves the queue: taken (`served`: one of its caller's turn; their turn over once it
   * had their share, and they go to the back of the turns) or removed.
   */
  private settle(line: Line<T>, item: T, served: boolean): T {
    item.settled = true;
    this.size--;
    line.all.live--;
    const key = item.key ?? '';
    const d = line.byKey.get(key)!;
    d.live--;
    if (line.all.live === 0) {
      this.lines.delete(item.caller);
      return item;
    }
    if (d.live === 0) line.byKey.delete(key);
    else tidy(d);
    tidy(line.all);
    if (served && ++line.served >= line.weight) {
      line.served = 0;
      if (this.lines.size > 1) {
        this.lines.delete(item.caller);
        this.lines.set(item.caller, line);
      }
    }
    return item;
  }
}

/** The deque's oldest item not settled (those before it are dropped). */
function oldest<T extends Queued>(d: Deque<T>): T | undefined {
  while (d.head < d.items.length && d.items[d.head]!.settled) d.head++;
  return d.items[d.head];
}

/** Reclaims a deque's storage: what was taken from its front, or settled items left in it. */
function tidy<T extends Queued>(d: Deque<T>): void {
  if (d.items.length - d.head > 2 * d.live + 32) {
    d.items = d.items.slice(d.head).filter((i) => !i.settled);
    d.head = 0;
  } else if (d.head > 1024 && d.head * 2 > d.items.length) {
    d.items = d.items.slice(d.head);
    d.head = 0;
  }
}

/**
 * A min-heap of deadlines with lazy removal: items that settled stay until they reach the top
 * (or until they are most of it: then it is rebuilt). One timer armed for `peek()` serves every
 * waiter's deadline.
 */
export class DeadlineHeap<T extends { deadline: number; settled?: boolean }> {
  private items: T[] = [];

  get length(): number {
    return this.items.length;
  }

  push(item: T): void {
    const a = this.items;
    a.push(item);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p]!.deadline <= item.deadline) break;
      a[i] = a[p]!;
      i = p;
    }
    a[i] = item;
  }

  /** The earliest deadline of an item not settled (settled ones at the top are dropped). */
  peek(): T | undefined {
    while (this.items.length > 0 && this.items[0]!.settled) this.pop();
    return this.items[0];
  }

  pop(): T | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0 && last !== undefined) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= a.length) break;
        const r = l + 1;
        const c = r < a.length && a[r]!.deadline < a[l]!.deadline ? r : l;
        if (a[c]!.deadline >= last.deadline) break;
        a[i] = a[c]!;
        i = c;
      }
      a[i] = last;
    }
    return top;
  }

  /** Drops the settled items when they are most of the heap (`live`: how many are not). */
  compact(live: number): void {
    if (this.items.length <= 2 * live + 256) return;
    const keep = this.items.filter((i) => !i.settled);
    this.items = [];
    for (const i of keep) this.push(i);
  }

  clear(): void {
    this.items = [];
  }
}
