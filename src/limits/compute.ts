import type { Db } from '../store/db.ts';

/**
 * Compute seconds per calendar month (docs/limits.md): what each user's calls used this UTC
 * month, and each of their API keys', as the quota reads it before every call.
 *
 * The count is the usage records' (the billing unit, `metadata.duration`), charged to the
 * caller: `record()` is called by the usage recorder with every call it counts, and the sums
 * go to `compute_months` in the transaction that writes the usage rows (`batch()`), so the two
 * never disagree. Reading is cheap: a user's month, once read from `compute_months` (one
 * indexed query for the user and all their keys), is kept in memory with what this process
 * has counted since; it is read again in the background when older than `refreshMs` (what the
 * other API nodes counted meanwhile), never on the call's path. Only a user's first call of a
 * month in this process (with a quota in force) waits for the read.
 */

/** `YYYY-MM` of a UTC time. */
export function utcMonth(ms: number): string {
  return new Date(ms).toISOString().slice(0, 7);
}

/** The UTC calendar month holding `ms`: its first and the next month's first instant. */
export function monthBounds(ms: number): { start: number; end: number } {
  const d = new Date(ms);
  return { start: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1), end: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) };
}

/** A user's month as read from the store, plus what this process's flushes added since. */
interface Stored {
  month: string;
  ms: number;
  keys: Map<string, number>;
  /** When it was read (the meter's clock). */
  at: number;
}

/** What this process counted for one user in one month and has not written yet. */
interface Pending {
  userId: number;
  month: string;
  ms: number;
  keys: Map<string, number>;
}

/** One row of compute_months to add. */
export interface ComputeRow {
  user_id: number;
  month: string;
  key_id: string;
  ms: number;
}

/** What one flush writes; `commit()` once it is in the store. */
export interface ComputeBatch {
  rows: ComputeRow[];
  commit(): void;
}

/** Used this month, in milliseconds: the user's (every key together) and the asking key's. */
export interface ComputeUsed {
  user: number;
  key: number;
}

export class ComputeMeter {
  private readonly stored = new Map<number, Stored>();
  private readonly loading = new Map<number, Promise<void>>();
  /** The current month's pending counts per user; older months' wait in `older` for the flush. */
  private pending = new Map<number, Pending>();
  private older: Pending[] = [];
  private month = '';
  private monthEnds = 0;
  /** Changes when a flush commits: a read that spans one may or may not hold its sums. */
  private generation = 0;

  constructor(
    private readonly db: Db,
    readonly now: () => number = Date.now,
    /** How old a user's month read from the store may be before it is read again (in the background). */
    private readonly refreshMs = 1000,
  ) {}

  private currentMonth(now: number): string {
    if (now >= this.monthEnds || now < this.monthEnds - 32 * 86_400_000) {
      const month = utcMonth(now);
      if (month !== this.month) {
        for (const p of this.pending.values()) this.older.push(p);
        this.pending = new Map();
        this.month = month;
      }
      this.monthEnds = monthBounds(now).end;
    }
    return this.month;
  }

  /**
   * Counts `ms` of compute for the user and, when given, their key. Synchronous and cheap: it is
   * on every call's way back.
   */
  record(userId: number, keyId: string | undefined, ms: number): void {
    const month = this.currentMonth(this.now());
    let p = this.pending.get(userId);
    if (p === undefined) {
      p = { userId, month, ms: 0, keys: new Map() };
      this.pending.set(userId, p);
    }
    p.ms += ms;
    if (keyId !== undefined) p.keys.set(keyId, (p.keys.get(keyId) ?? 0) + ms);
  }

  /** Whether the user's month must be read before `used()` can answer. */
  needsLoad(userId: number): boolean {
    return this.stored.get(userId)?.month !== this.currentMonth(this.now());
  }

  /**
   * Reads the user's month from the store (the user's row and their keys'). Reads under way
   * for the same user are shared.
   */
  load(userId: number): Promise<void> {
    let l = this.loading.get(userId);
    if (l === undefined) {
      l = this.read(userId).finally(() => this.loading.delete(userId));
      this.loading.set(userId, l);
    }
    return l;
  }

  private async read(userId: number): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const generation = this.generation;
      const now = this.now();
      const month = this.currentMonth(now);
      const rows = await this.db.selectFrom('compute_months').select(['key_id', 'ms']).where('user_id', '=', userId).where('month', '=', month).execute();
      // A flush of ours committed while this read: its sums may be in what was read, or not.
      // Read again (a flush a second, a read of a few milliseconds: the second read sees none).
      if (generation !== this.generation && attempt < 3) continue;
      const s: Stored = { month, ms: 0, keys: new Map(), at: now };
      for (const r of rows) {
        if (r.key_id === '') s.ms = Number(r.ms);
        else s.keys.set(r.key_id, Number(r.ms));
      }
      this.stored.set(userId, s);
      return;
    }
  }

  /**
   * Milliseconds used this month by the user and by `keyId`, or undefined when the user's month
   * has not been read (load() first). A month read longer ago than `refreshMs` is read again in
   * the background; this answers with what it has meanwhile.
   */
  used(userId: number, keyId: string | undefined): ComputeUsed | undefined {
    const now = this.now();
    const month = this.currentMonth(now);
    const s = this.stored.get(userId);
    if (s === undefined || s.month !== month) return undefined;
    if (now - s.at > this.refreshMs && !this.loading.has(userId)) this.load(userId).catch(() => undefined);
    const p = this.pending.get(userId);
    return {
      user: s.ms + (p?.ms ?? 0),
      key: keyId === undefined ? 0 : (s.keys.get(keyId) ?? 0) + (p?.keys.get(keyId) ?? 0),
    };
  }

  /**
   * What is counted and not yet written, as rows to add (whole milliseconds; the fraction stays
   * for the next flush). Nothing is taken off until `commit()`: a flush that fails leaves it
   * all for the next one.
   */
  batch(): ComputeBatch {
    this.currentMonth(this.now());
    const rows: ComputeRow[] = [];
    const from: { p: Pending; key: string; ms: number }[] = [];
    for (const p of [...this.older, ...this.pending.values()]) {
      const ms = Math.round(p.ms);
      if (ms > 0) {
        rows.push({ user_id: p.userId, month: p.month, key_id: '', ms });
        from.push({ p, key: '', ms });
      }
      for (const [key, v] of p.keys) {
        const kms = Math.round(v);
        if (kms > 0) {
          rows.push({ user_id: p.userId, month: p.month, key_id: key, ms: kms });
          from.push({ p, key, ms: kms });
        }
      }
    }
    return {
      rows,
      commit: () => {
        this.generation++;
        for (const { p, key, ms } of from) {
          const s = this.stored.get(p.userId);
          if (key === '') {
            p.ms -= ms;
            if (s?.month === p.month) s.ms += ms;
          } else {
            p.keys.set(key, p.keys.get(key)! - ms);
            if (s?.month === p.month) s.keys.set(key, (s.keys.get(key) ?? 0) + ms);
          }
        }
        // Months gone by, once written, are done with (what is left is under a millisecond).
        this.older = [];
        // Users with nothing left to write are forgotten until their next call.
        for (const [id, p] of this.pending) if (Math.round(p.ms) === 0 && [...p.keys.values()].every((v) => Math.round(v) === 0)) this.pending.delete(id);
        // Months read long ago for users not calling lately: read again if they come back.
        const now = this.now();
        for (const [id, s] of this.stored) if (now - s.at > 600_000 && !this.pending.has(id)) this.stored.delete(id);
      },
    };
  }

  /**
   * Adds a batch to compute_months inside the caller's transaction (the usage flush's). Rows of
   * users deleted since are dropped, as the usage rows are.
   */
  async write(trx: Db, rows: ComputeRow[]): Promise<void> {
    if (rows.length === 0) return;
    const ids = [...new Set(rows.map((r) => r.user_id))];
    const alive = new Set<number>();
    for (let i = 0; i < ids.length; i += 1000) {
      for (const u of await trx.selectFrom('users').select('id').where('id', 'in', ids.slice(i, i + 1000)).execute()) alive.add(u.id);
    }
    const kept = rows.filter((r) => alive.has(r.user_id));
    for (let i = 0; i < kept.length; i += 1000) {
      await trx
        .insertInto('compute_months')
        .values(kept.slice(i, i + 1000))
        .onConflict((oc) => oc.columns(['user_id', 'month', 'key_id']).doUpdateSet((eb) => ({ ms: eb('compute_months.ms', '+', eb.ref('excluded.ms')) })))
        .execute();
    }
  }
}
