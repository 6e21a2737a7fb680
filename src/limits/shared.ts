import { sql } from 'kysely';
import type { MetadataStore } from '../store/db.ts';
import type { CallLimits } from './refusal.ts';

/**
 * Call limits held across the API nodes of a deployment on PostgreSQL (docs/limits.md "Across
 * nodes"; the decision is in docs/architecture.md).
 *
 * - **Calls a minute.** Each scope's token bucket is one row of `limit_buckets`, refilled by
 *   the clock of the node that takes from it (nodes keep their clocks together with NTP;
 *   `algohost doctor` checks each against the database's: a node behind the last one to take
 *   adds nothing until its clock passes that take, and `at` never goes back, so a skew costs at
 *   most its length of the rate). A node takes tokens from it a few at a
 *   time (`take`: one statement, `INSERT … ON CONFLICT DO UPDATE … RETURNING`, which locks that
 *   row only) and spends them locally without asking again; tokens it has not spent within
 *   LEASE_MS are dropped. So the nodes together never admit more than the bucket gives: what a
 *   node holds was taken from the row. What the scheme costs is the other way: tokens a node
 *   took and dropped are lost to the others (under LEASE_S of the rate a node), and a call that
 *   finds its node's tokens spent waits for one round trip to the database.
 * - **Calls at once.** Each scope's calls under way are one row of `limit_slots`, raised only
 *   while below the limit (the row's lock orders the nodes), and what each node holds is in
 *   `limit_holds`, so that the calls of a node that died are given back (`forgetDead`, by
 *   the store's liveness of its instance). Two round trips a call, only for scopes with a
 *   concurrency limit.
 *
 * These statements do not take the store's write lock (`MetadataStore.write`): each is one
 * atomic statement on rows nothing else writes.
 */
export class SharedLimitStore {
  constructor(private readonly store: MetadataStore) {}

  /**
   * Takes up to `want` tokens (at least 1 is asked) from the scope's bucket under `limits`:
   * how many were given (0 when none is left), and the tokens left after.
   */
  async take(scope: string, want: number, limits: CallLimits, at: number = Date.now()): Promise<{ granted: number; tokens: number }> {
    const perMs = limits.callsPerMin / 60_000;
    const burst = sql`${limits.burst}::float8`;
    const asked = sql`${Math.max(1, want)}::float8`;
    const now = sql`${Math.floor(at)}::bigint`;
    // The bucket refilled to now, at most full: every SET sees the row as it was.
    const refilled = sql`LEAST(${burst}, b.tokens + GREATEST(0, ${now} - b.at) * ${perMs}::float8)`;
    const given = sql`LEAST(${asked}, floor(${refilled}))`;
    const r = await sql<{ granted: number | string; tokens: number }>`
      INSERT INTO limit_buckets AS b (scope, tokens, at, granted)
      VALUES (${scope}, ${burst} - LEAST(${asked}, ${burst}), ${now}, LEAST(${asked}, ${burst})::bigint)
      ON CONFLICT (scope) DO UPDATE SET granted = ${given}::bigint, tokens = ${refilled} - ${given}, at = GREATEST(b.at, ${now})
      RETURNING granted, tokens`.execute(this.store.db);
    const row = r.rows[0]!;
    return { granted: Number(row.granted), tokens: Number(row.tokens) };
  }

  /** The tokens in the scope's bucket now, refilled (its burst when it has no row yet); nothing is taken. */
  async peek(scope: string, limits: CallLimits, at: number = Date.now()): Promise<number> {
    const r = await sql<{ tokens: number }>`
      SELECT LEAST(${limits.burst}::float8, tokens + GREATEST(0, ${Math.floor(at)}::bigint - at) * ${limits.callsPerMin / 60_000}::float8) AS tokens
      FROM limit_buckets WHERE scope = ${scope}`.execute(this.store.db);
    return r.rows.length === 0 ? limits.burst : Number(r.rows[0]!.tokens);
  }

  /** Holds one of the scope's calls at once, for node `instance`, if fewer than `limit` are under way; whether it did. */
  async hold(scope: string, limit: number, instance: string): Promise<boolean> {
    const r = await sql<{ n: number | string }>`
      WITH up AS (
        INSERT INTO limit_slots AS s (scope, in_flight) VALUES (${scope}, 1)
        ON CONFLICT (scope) DO UPDATE SET in_flight = s.in_flight + 1 WHERE s.in_flight < ${limit}::bigint
        RETURNING scope)
      INSERT INTO limit_holds AS h (scope, instance, n) SELECT scope, ${instance}, 1 FROM up
      ON CONFLICT (scope, instance) DO UPDATE SET n = h.n + 1
      RETURNING n`.execute(this.store.db);
    return r.rows.length > 0;
  }

  /**
   * Gives back one call of the scope held by `instance`. The scope's row is locked first, then
   * the node's, in the order hold() locks them: the other order deadlocked with holds of the same
   * scope under load (a user's many uploads at once on PostgreSQL; one of the two was aborted).
   */
  async release(scope: string, instance: string): Promise<void> {
    await sql`
      WITH s AS (
        UPDATE limit_slots SET in_flight = in_flight - 1
        WHERE scope = ${scope} AND EXISTS (SELECT 1 FROM limit_holds WHERE scope = ${scope} AND instance = ${instance} AND n > 0)
        RETURNING scope)
      UPDATE limit_holds SET n = n - 1 WHERE scope IN (SELECT scope FROM s) AND instance = ${instance}`.execute(this.store.db);
  }

  /**
   * release() without waiting for it, tried again a few times with backoff: a release lost to a
   * passing fault would hold the slot until this node is gone (forgetDead). `log` hears the last
   * failure.
   */
  releaseSoon(scope: string, instance: string, log?: (err: unknown) => void, attempt = 0): void {
    this.release(scope, instance).catch((err: unknown) => {
      if (attempt < 5) setTimeout(() => this.releaseSoon(scope, instance, log, attempt + 1), 200 * 2 ** attempt).unref();
      else log?.(err);
    });
  }

  /** Calls under way of a scope, every node's. */
  async inFlight(scope: string): Promise<number> {
    const r = await sql<{ in_flight: number | string }>`SELECT in_flight FROM limit_slots WHERE scope = ${scope}`.execute(this.store.db);
    return Number(r.rows[0]?.in_flight ?? 0);
  }

  /**
   * Gives back the calls held by nodes that are gone (the store's liveness of their instance),
   * and forgets what is idle: holds of none, buckets untouched for an hour (full by then).
   * Any node may run it, at once with others: a hold is given back by whoever deleted it.
   */
  async forgetDead(): Promise<number> {
    const holders = await sql<{ instance: string }>`SELECT DISTINCT instance FROM limit_holds`.execute(this.store.db);
    let freed = 0;
    for (const { instance } of holders.rows) {
      if (await this.store.isLive(instance)) continue;
      const r = await sql<{ n: number | string }>`
        WITH h AS (DELETE FROM limit_holds WHERE instance = ${instance} RETURNING scope, n),
        s AS (UPDATE limit_slots SET in_flight = limit_slots.in_flight - h.n FROM h WHERE limit_slots.scope = h.scope RETURNING h.n)
        SELECT coalesce(sum(n), 0) AS n FROM s`.execute(this.store.db);
      freed += Number(r.rows[0]?.n ?? 0);
    }
    await sql`DELETE FROM limit_holds WHERE n <= 0`.execute(this.store.db);
    await sql`DELETE FROM limit_slots WHERE in_flight <= 0`.execute(this.store.db);
    await sql`DELETE FROM limit_buckets WHERE at < ${Date.now() - 3_600_000}::bigint`.execute(this.store.db);
    return freed;
  }
}
