/**
 * Waiting items, queued per caller and served in turns across callers (round robin by item:
 * deficit round robin with every caller's quantum and every item's cost one). A caller who
 * queues a thousand items waits behind their own, never in front of anyone else's: the next
 * item served is the oldest of the caller whose turn it is. Used by the worker pool (calls
 * waiting for a worker) and the local queue of async calls (docs/limits.md, "Fair shares").
 *
 * Bounded twice: `maxPerCaller` items of one caller, `maxTotal` of all together; push says
 * which bound refused an item. Costs: push and remove O(1); take O(callers) at worst (it walks
 * the callers in turn order until one's oldest item can be served), never O(items).
 */

/** What the queue needs of an item: whose it is. `settled` is the queue's own mark. */
export interface Queued {
  readonly caller: string;
  /** Set once the item has left the queue (taken or removed): left behind lazily, skipped. */
  settled?: boolean;
}

/** One caller's items, oldest first; `head` is the first not yet taken. */
interface Line<T> {
  items: T[];
  head: number;
  /** Items in the line not settled. */
  live: number;
}

export type Refusal = 'caller_queue_full' | 'queue_full';

export class FairQueue<T extends Queued> {
  /**
   * The callers with items waiting, in turn order: the first is the one whose turn it is. A
   * caller served goes to the back; a newcomer joins at the back; one whose oldest item cannot
   * be served now keeps its place (its turn is not lost).
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
    return this.lines.get(caller)?.live ?? 0;
  }

  /** The oldest item of the caller whose turn it is (not taken). */
  first(): T | undefined {
    for (const [caller, line] of this.lines) {
      const item = this.oldest(line);
      if (item !== undefined) return item;
      this.lines.delete(caller);
    }
    return undefined;
  }

  /** Queues `item` behind its caller's; or says which bound refuses it (nothing is queued then). */
  push(item: T): Refusal | undefined {
    let line = this.lines.get(item.caller);
    // A caller's own bound, when it is one (as large as the total, the total is all there is).
    if ((line?.live ?? 0) >= this.maxPerCaller && this.maxPerCaller < this.maxTotal) return 'caller_queue_full';
    if (this.size >= this.maxTotal) return 'queue_full';
    if (line === undefined) {
      line = { items: [], head: 0, live: 0 };
      this.lines.set(item.caller, line);
    }
    item.settled = false;
    line.items.push(item);
    line.live++;
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
    for (const [caller, line] of this.lines) {
      const item = this.oldest(line);
      if (item === undefined) {
        this.lines.delete(caller);
        continue;
      }
      if (!serve(item)) continue;
      line.head++;
      this.settle(caller, line, item);
      return item;
    }
    return undefined;
  }

  /** Takes `item` out of the queue, wherever it stands (its wait ran out); false if it was not in it. */
  remove(item: T): boolean {
    if (item.settled !== false) return false;
    const line = this.lines.get(item.caller);
    if (line === undefined) return false;
    this.settle(item.caller, line, item);
    // Left where it stands (skipped when reached), unless the line is mostly such leftovers.
    if (line.items.length - line.head > 2 * line.live + 32) {
      line.items = line.items.slice(line.head).filter((i) => !i.settled);
      line.head = 0;
    }
    return true;
  }

  /** Empties the queue; the items that were waiting, oldest of each caller first. */
  drain(): T[] {
    const all: T[] = [];
    for (const line of this.lines.values()) {
      for (let i = line.head; i < line.items.length; i++) {
        const item = line.items[i]!;
        if (item.settled) continue;
        item.settled = true;
        all.push(item);
      }
    }
    this.lines.clear();
    this.size = 0;
    return all;
  }

  private settle(caller: string, line: Line<T>, item: T): void {
    item.settled = true;
    line.live--;
    this.size--;
    if (line.live === 0) {
      this.lines.delete(caller);
      return;
    }
    // Served: to the back of the turns (a removal leaves the turn where it is).
    if (line.items[line.head - 1] === item) {
      this.lines.delete(caller);
      this.lines.set(caller, line);
    }
    if (line.head > 1024 && line.head * 2 > line.items.length) {
      line.items = line.items.slice(line.head);
      line.head = 0;
    }
  }

  /** The line's oldest item not settled (those before it are dropped). */
  private oldest(line: Line<T>): T | undefined {
    while (line.head < line.items.length && line.items[line.head]!.settled) line.head++;
    return line.items[line.head];
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
    if (this.items.length <= 2 * live + 1024) return;
    const keep = this.items.filter((i) => !i.settled);
    this.items = [];
    for (const i of keep) this.push(i);
  }

  clear(): void {
    this.items = [];
  }
}
