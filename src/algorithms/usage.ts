import { AppError } from '../errors.ts';
import type { UsageDay, UsageReport, UsageSection } from '../../client/src/types.ts';
import type { Outcome } from '../runtime/contract.ts';
import type { MetadataStore } from '../store/db.ts';
import type { CallLog } from './callLog.ts';
import type { CallTarget } from './releases.ts';
import type { ComputeMeter } from '../limits/compute.ts';

/**
 * Usage (issue 15; docs/usage.md): every call that ran is counted per UTC day, caller,
 * algorithm version and outcome: calls, the algorithm's own compute time (the spec's
 * `metadata.duration`, the billing unit), bytes in and out.
 *
 * A warm call takes about 0.3 ms end to end, so recording one is a few map lookups and
 * additions in memory (no allocation once the caller and version have been seen today, no
 * await); every `flushIntervalMs` the sums are added to the `usage` table in one transaction
 * (an upsert that adds to the row already there), and what was written is then taken off the
 * sums in memory. A flush that fails changes nothing in the table and nothing in memory: the
 * next one writes it all. Reading flushes first, so a caller sees their own calls at once on
 * one machine; in a cluster each API node keeps its last second or so until its next flush.
 */

/** `ok` (a result), `timeout`, or `error` for every other failure (thrown, crashed, out of memory, could not start). */
export type UsageOutcome = 'ok' | 'error' | 'timeout';

/** One row's sums in memory: what is not yet in the table. */
interface Cell {
  readonly day: string;
  readonly callerId: number;
  readonly algorithmId: number;
  readonly owner: string;
  readonly name: string;
  readonly version: string;
  readonly outcome: UsageOutcome;
  calls: number;
  /** Fractional: written rounded to whole ms, the rest kept for the next flush. */
  ms: number;
  bytesIn: number;
  bytesOut: number;
}

/** One caller's cells for one version on one day: what record() finds in two lookups. */
interface CallerCells {
  readonly day: string;
  readonly ok: Cell;
  readonly error: Cell;
  readonly timeout: Cell;
}

/** A call target's constant part of a row, made once per target object. */
interface Slot {
  readonly algorithmId: number;
  readonly owner: string;
  readonly name: string;
  readonly version: string;
  /** `algorithmId \t version`: the cells' keys start with it. */
  readonly key: string;
  readonly callers: Map<number, CallerCells>;
}

export interface UsageOptions {
  /** How often the sums go to the table (default 1 s). */
  flushIntervalMs?: number;
  /** False: record() does nothing (benchmarks measure the call path without it). */
  enabled?: boolean;
  /**
   * Compute per caller and month for the compute quota (docs/limits.md): told of every call
   * counted, its sums written to compute_months in each flush's transaction.
   */
  meter?: ComputeMeter;
}

export const DEFAULT_FLUSH_MS = 1000;
/** Rows per INSERT: 11 parameters each, well under PostgreSQL's 65,535 per statement. */
const ROWS_PER_INSERT = 1000;
const DAY_MS = 86_400_000;

/** `YYYY-MM-DD` of a UTC time. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

export class UsageRecorder {
  /** Every cell with sums that may not be in the table yet (and today's, kept for reuse). */
  private readonly cells = new Map<string, Cell>();
  /** Per call target (targets are cached objects, so a warm call finds its slot by identity). */
  private slots = new WeakMap<CallTarget, Slot>();
  private day = '';
  private dayEnds = 0;
  /** Something was recorded since the last flush began. */
  private dirty = false;
  private closed = false;
  private readonly timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private queued: Promise<void> | undefined;
  /** The owner of each algorithm seen (an algorithm never changes owner). */
  private readonly owners = new Map<number, number>();
  private log: CallLog | undefined;
  readonly enabled: boolean;
  private readonly meter: ComputeMeter | undefined;

  constructor(
    private readonly store: MetadataStore,
    options: UsageOptions = {},
  ) {
    this.enabled = options.enabled !== false;
    this.meter = options.meter;
    if (this.enabled) {
      this.timer = setInterval(() => this.tick(), options.flushIntervalMs ?? DEFAULT_FLUSH_MS);
      this.timer.unref();
    }
  }

  /** Where failed flushes are logged (the server's logger, once there is one). */
  logTo(log: CallLog): void {
    this.log = log;
  }

  /**
   * Counts one call that ran: `callerId` is the user the call ran as, `target` the version it
   * ran, `bytesIn` the input's length, `keyId` the API key it was made with (counted for the
   * key's compute quota; undefined for a console session). Synchronous and cheap: it is on
   * every call's path.
   */
  record(callerId: number, target: CallTarget, outcome: Outcome, bytesIn: number, keyId?: string): void {
    if (this.closed) return;
    this.meter?.record(callerId, keyId, outcome.durationMs);
    if (!this.enabled) return;
    const now = Date.now();
    if (now >= this.dayEnds) this.newDay(now);
    let slot = this.slots.get(target);
    if (slot === undefined) {
      const version = target.version ?? target.build.hash;
      slot = { algorithmId: target.algorithm.id, owner: target.algorithm.owner, name: target.algorithm.name, version, key: `${target.algorithm.id}\t${version}`, callers: new Map() };
      this.slots.set(target, slot);
    }
    let mine = slot.callers.get(callerId);
    if (mine === undefined || mine.day !== this.day) {
      mine = { day: this.day, ok: this.cell(slot, callerId, 'ok'), error: this.cell(slot, callerId, 'error'), timeout: this.cell(slot, callerId, 'timeout') };
      slot.callers.set(callerId, mine);
    }
    // A result is `ok` as the runtime returned it (a json result that is not JSON, which the
    // envelope turns into an error, is not parsed here to find out: that would cost every call).
    const kind = outcome.kind;
    const cell = kind === 'result' ? mine.ok : kind === 'timeout' ? mine.timeout : mine.error;
    cell.calls++;
    cell.ms += outcome.durationMs;
    cell.bytesIn += bytesIn;
    if (kind === 'result') cell.bytesOut += outcome.body.length;
    this.dirty = true;
  }

  private newDay(now: number): void {
    this.day = utcDay(now);
    this.dayEnds = (Math.floor(now / DAY_MS) + 1) * DAY_MS;
    // Slots hold their callers' cells of the day before: start them afresh.
    this.slots = new WeakMap();
  }

  private cell(slot: Slot, callerId: number, outcome: UsageOutcome): Cell {
    const key = `${this.day}\t${callerId}\t${slot.key}\t${outcome}`;
    let cell = this.cells.get(key);
    if (cell === undefined) {
      cell = { day: this.day, callerId, algorithmId: slot.algorithmId, owner: slot.owner, name: slot.name, version: slot.version, outcome, calls: 0, ms: 0, bytesIn: 0, bytesOut: 0 };
      this.cells.set(key, cell);
    }
    return cell;
  }

  private tick(): void {
    if (!this.dirty || this.running !== undefined) return;
    this.flush().catch((err: unknown) => this.log?.warn({ err }, 'writing usage failed; the sums are kept and written at the next flush'));
  }

  /**
   * Writes what is in memory to the table. One flush runs at a time; a flush asked for while
   * one runs runs after it (so what was recorded before the call is in the table when it
   * resolves), and flushes asked for meanwhile share it.
   */
  flush(): Promise<void> {
    if (this.queued) return this.queued;
    const start = () => {
      const p = this.flushOnce().finally(() => {
        if (this.running === p) this.running = undefined;
      });
      this.running = p;
      return p;
    };
    if (!this.running) return start();
    this.queued = this.running
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined;
        return start();
      });
    return this.queued;
  }

  private async flushOnce(): Promise<void> {
    this.dirty = false;
    // What this flush writes, taken off the cells only once it is committed: calls recorded
    // while it runs add to the cells meanwhile and go with the next one.
    const batch: { cell: Cell; calls: number; ms: number; bytesIn: number; bytesOut: number }[] = [];
    for (const cell of this.cells.values()) {
      const ms = Math.round(cell.ms);
      if (cell.calls === 0 && ms === 0) continue;
      batch.push({ cell, calls: cell.calls, ms, bytesIn: cell.bytesIn, bytesOut: cell.bytesOut });
    }
    // The compute quota's sums per caller and month, in the same transaction as the rows.
    const compute = this.meter?.batch();
    if (batch.length > 0 || (compute !== undefined && compute.rows.length > 0)) {
      try {
        await this.store.write(async (trx) => {
          if (compute !== undefined) await this.meter!.write(trx, compute.rows);
          const unknown = [...new Set(batch.map((b) => b.cell.algorithmId))].filter((id) => !this.owners.has(id));
          for (let i = 0; i < unknown.length; i += ROWS_PER_INSERT) {
            const rows = await trx.selectFrom('algorithms').select(['id', 'owner_id']).where('id', 'in', unknown.slice(i, i + ROWS_PER_INSERT)).execute();
            for (const r of rows) this.owners.set(r.id, r.owner_id);
          }
          // An algorithm deleted since its calls: its owner by name (0 if the owner is gone too).
          const byName = new Map<string, number>();
          const orphans = [...new Set(batch.filter((b) => !this.owners.has(b.cell.algorithmId)).map((b) => b.cell.owner.toLowerCase()))];
          if (orphans.length > 0) {
            const users = await trx.selectFrom('users').select(['id', 'username_lc']).where('username_lc', 'in', orphans).execute();
            for (const u of users) byName.set(u.username_lc, u.id);
          }
          // One row per primary key: two cells can meet in one (an algorithm deleted and made
          // again under its name the same day), and an upsert may not touch a row twice.
          // Calls of a user deleted since (on any node) are dropped, not written: deleting a
          // user removes their rows, and none may come back from a node's memory afterwards.
          const callerIds = [...new Set(batch.map((b) => b.cell.callerId))];
          const callers = new Set<number>();
          for (let i = 0; i < callerIds.length; i += ROWS_PER_INSERT) {
            const found = await trx.selectFrom('users').select('id').where('id', 'in', callerIds.slice(i, i + ROWS_PER_INSERT)).execute();
            for (const u of found) callers.add(u.id);
          }
          const rows = new Map<string, { day: string; caller_id: number; owner_id: number; owner: string; name: string; version: string; outcome: string; calls: number; duration_ms: number; bytes_in: number; bytes_out: number }>();
          for (const b of batch) {
            const c = b.cell;
            if (!callers.has(c.callerId)) continue;
            const ownerId = this.owners.get(c.algorithmId) ?? byName.get(c.owner.toLowerCase()) ?? 0;
            const key = `${c.day}\t${c.callerId}\t${ownerId}\t${c.name}\t${c.version}\t${c.outcome}`;
            const row = rows.get(key);
            if (row) {
              row.calls += b.calls;
              row.duration_ms += b.ms;
              row.bytes_in += b.bytesIn;
              row.bytes_out += b.bytesOut;
            } else {
              rows.set(key, {
                day: c.day,
                caller_id: c.callerId,
                owner_id: ownerId,
                owner: c.owner,
                name: c.name,
                version: c.version,
                outcome: c.outcome,
                calls: b.calls,
                duration_ms: b.ms,
                bytes_in: b.bytesIn,
                bytes_out: b.bytesOut,
              });
            }
          }
          const all = [...rows.values()];
          for (let i = 0; i < all.length; i += ROWS_PER_INSERT) {
            await trx
              .insertInto('usage')
              .values(all.slice(i, i + ROWS_PER_INSERT))
              .onConflict((oc) =>
                oc.columns(['day', 'caller_id', 'owner_id', 'name', 'version', 'outcome']).doUpdateSet((eb) => ({
                  calls: eb('usage.calls', '+', eb.ref('excluded.calls')),
                  duration_ms: eb('usage.duration_ms', '+', eb.ref('excluded.duration_ms')),
                  bytes_in: eb('usage.bytes_in', '+', eb.ref('excluded.bytes_in')),
                  bytes_out: eb('usage.bytes_out', '+', eb.ref('excluded.bytes_out')),
                })),
              )
              .execute();
          }
        });
      } catch (err) {
        this.dirty = true;
        throw err;
      }
      compute?.commit();
      for (const b of batch) {
        b.cell.calls -= b.calls;
        b.cell.ms -= b.ms;
        b.cell.bytesIn -= b.bytesIn;
        b.cell.bytesOut -= b.bytesOut;
      }
    }
    // Cells of days gone by, once written, are not used again (what is left of their ms, under
    // half a millisecond, goes with them). Today's stay: the next call of the same caller and
    // version finds them.
    for (const [key, cell] of this.cells) {
      if (cell.day !== this.day && cell.calls === 0) this.cells.delete(key);
    }
  }

  /**
   * Stops the timer and writes what is left; calls recorded after this are not counted. A
   * store that cannot take it now gets a second try; then what is left is logged and lost
   * (closing goes on: the store is closed next).
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    if (!this.enabled) return;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.flush();
        return;
      } catch (err) {
        if (attempt >= 2) {
          const calls = [...this.cells.values()].reduce((n, c) => n + c.calls, 0);
          this.log?.warn({ err, calls }, 'writing usage at close failed; these calls are not counted');
          return;
        }
      }
    }
  }

  /**
   * A user's usage from `from` to `to` (UTC days, both included): the calls they made, and the
   * calls anyone made to their algorithms (who called is not said). This node's sums are
   * written first.
   */
  async report(user: { id: number; username: string }, from: string, to: string): Promise<UsageReport> {
    if (this.enabled) await this.flush();
    const db = this.store.db;
    const sums = (column: 'caller_id' | 'owner_id') =>
      db
        .selectFrom('usage')
        .select((e) => [
          'day',
          'owner',
          'name',
          'version',
          'outcome',
          e.fn.sum<number | string>('calls').as('calls'),
          e.fn.sum<number | string>('duration_ms').as('duration_ms'),
          e.fn.sum<number | string>('bytes_in').as('bytes_in'),
          e.fn.sum<number | string>('bytes_out').as('bytes_out'),
        ])
        .where(column, '=', user.id)
        .where('day', '>=', from)
        .where('day', '<=', to)
        .groupBy(['day', 'owner', 'name', 'version', 'outcome'])
        .execute();
    const [asCaller, asOwner] = await Promise.all([sums('caller_id'), sums('owner_id')]);
    return { user: user.username, from, to, as_caller: section(asCaller), as_owner: section(asOwner) };
  }
}

interface SumRow {
  day: string;
  owner: string;
  name: string;
  version: string;
  outcome: string;
  calls: number | string;
  duration_ms: number | string;
  bytes_in: number | string;
  bytes_out: number | string;
}

/** Rows per outcome folded into one per day, algorithm and version, sorted, with the total. */
function section(rows: SumRow[]): UsageSection {
  const days = new Map<string, UsageDay & { ms: number }>();
  const total = { calls: 0, ms: 0, bytes_in: 0, bytes_out: 0, errors: 0, timeouts: 0 };
  for (const r of rows) {
    const algorithm = `${r.owner}/${r.name}`;
    const key = `${r.day}\t${algorithm}\t${r.version}`;
    let d = days.get(key);
    if (!d) {
      d = { day: r.day, algorithm, version: r.version, calls: 0, seconds: 0, ms: 0, bytes_in: 0, bytes_out: 0, errors: 0, timeouts: 0 };
      days.set(key, d);
    }
    const calls = Number(r.calls);
    const ms = Number(r.duration_ms);
    const bytesIn = Number(r.bytes_in);
    const bytesOut = Number(r.bytes_out);
    for (const t of [d, total]) {
      t.calls += calls;
      t.ms += ms;
      t.bytes_in += bytesIn;
      t.bytes_out += bytesOut;
      if (r.outcome === 'error') t.errors += calls;
      if (r.outcome === 'timeout') t.timeouts += calls;
    }
  }
  const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  const list = [...days.values()].sort((a, b) => cmp(a.day, b.day) || cmp(a.algorithm, b.algorithm) || cmp(a.version, b.version));
  return {
    total: { calls: total.calls, seconds: total.ms / 1000, bytes_in: total.bytes_in, bytes_out: total.bytes_out, errors: total.errors, timeouts: total.timeouts },
    days: list.map(({ ms, ...d }) => ({ ...d, seconds: ms / 1000 })),
  };
}

/** Longest range one request may ask for, in days. */
export const MAX_RANGE_DAYS = 366;
/** The range without `from`: the last 30 days, today included. */
export const DEFAULT_RANGE_DAYS = 30;

const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;

function parseDay(name: string, value: string): number {
  const m = DATE.exec(value);
  const ms = m ? Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3])) : NaN;
  if (!m || Number.isNaN(ms) || utcDay(ms) !== value) {
    throw new AppError('invalid_query', `${name} must be a date as YYYY-MM-DD (UTC), e.g. ${utcDay(Date.now())}; got "${value.slice(0, 40)}"`);
  }
  return ms;
}

/**
 * The range of a usage request from its `from` and `to` (either may be missing): by default the
 * last 30 days up to today; `to` alone ends there, `from` alone runs to today.
 */
export function usageRange(query: { from?: unknown; to?: unknown }, now = Date.now()): { from: string; to: string } {
  for (const name of ['from', 'to'] as const) {
    const v = query[name];
    if (v !== undefined && typeof v !== 'string') throw new AppError('invalid_query', `${name} may be given once, as YYYY-MM-DD`);
  }
  const fromText = query.from as string | undefined;
  const toText = query.to as string | undefined;
  const today = Math.floor(now / DAY_MS) * DAY_MS;
  const to = toText !== undefined ? parseDay('to', toText) : today;
  const from = fromText !== undefined ? parseDay('from', fromText) : to - (DEFAULT_RANGE_DAYS - 1) * DAY_MS;
  if (from > to) throw new AppError('invalid_query', `from (${utcDay(from)}) is after to (${utcDay(to)})`);
  const days = Math.round((to - from) / DAY_MS) + 1;
  if (days > MAX_RANGE_DAYS) throw new AppError('invalid_query', `the range is ${days} days; ask for ${MAX_RANGE_DAYS} at most (from and to, both included)`);
  return { from: utcDay(from), to: utcDay(to) };
}
