import type { Db, MetadataStore } from '../store/db.ts';
import { LIMIT_FIELDS, ownLimits, type LimitSettings } from './limits.ts';
import { utcMonth } from './compute.ts';

/**
 * A user's own call limits and quotas in the store (user_limits; docs/limits.md), as the admin command
 * sets them. A commit here empties every server's key cache (and, on PostgreSQL, others' by
 * the change notice), so the next call of the user's is held to the new values.
 */

/** Every value the operator's default. */
export const NO_SETTINGS: Readonly<LimitSettings> = Object.freeze({ calls_per_min: null, burst: null, concurrency: null, compute_seconds_per_month: null, storage_bytes: null, share: null, requests_per_min: null, request_burst: null });

/** The user's own values (null: they have none, the operator's defaults hold). */
export async function readUserLimits(db: Db, userId: number): Promise<LimitSettings | null> {
  const row = await db.selectFrom('user_limits').select(LIMIT_FIELDS).where('user_id', '=', userId).executeTakeFirst();
  return row ? ownLimits(row) : null;
}

/**
 * Changes some of the user's values (`undefined`: left as it is; null: back to the default),
 * or, with `clear`, removes them all. Answers the values after.
 */
export async function writeUserLimits(store: MetadataStore, userId: number, change: Partial<LimitSettings>, clear = false): Promise<LimitSettings | null> {
  return store.write(async (trx) => {
    if (clear) {
      await trx.deleteFrom('user_limits').where('user_id', '=', userId).execute();
      return null;
    }
    const before = await readUserLimits(trx, userId);
    const after = { ...NO_SETTINGS };
    for (const f of Object.keys(NO_SETTINGS) as (keyof LimitSettings)[]) after[f] = change[f] !== undefined ? change[f] : (before?.[f] ?? null);
    if (Object.values(after).every((v) => v === null)) {
      await trx.deleteFrom('user_limits').where('user_id', '=', userId).execute();
      return null;
    }
    const row = { ...after, updated_at: Date.now() };
    await trx
      .insertInto('user_limits')
      .values({ user_id: userId, ...row })
      .onConflict((oc) => oc.column('user_id').doUpdateSet(row))
      .execute();
    return after;
  });
}

/** Compute seconds the store has counted for the user in the UTC month of `now` (every key together). */
export async function computeUsedS(db: Db, userId: number, now: number): Promise<number> {
  const row = await db.selectFrom('compute_months').select('ms').where('user_id', '=', userId).where('month', '=', utcMonth(now)).where('key_id', '=', '').executeTakeFirst();
  return row ? Number(row.ms) / 1000 : 0;
}
