import type { Db, MetadataStore } from '../store/db.ts';
import { ownLimits, type LimitSettings } from './limits.ts';

/**
 * A user's own call limits in the store (user_limits; docs/limits.md), as the admin command
 * sets them. A commit here empties every server's key cache (and, on PostgreSQL, others' by
 * the change notice), so the next call of the user's is held to the new values.
 */

/** The user's own values (null: they have none, the operator's defaults hold). */
export async function readUserLimits(db: Db, userId: number): Promise<LimitSettings | null> {
  const row = await db.selectFrom('user_limits').select(['calls_per_min', 'burst', 'concurrency']).where('user_id', '=', userId).executeTakeFirst();
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
    const after: LimitSettings = {
      calls_per_min: change.calls_per_min !== undefined ? change.calls_per_min : (before?.calls_per_min ?? null),
      burst: change.burst !== undefined ? change.burst : (before?.burst ?? null),
      concurrency: change.concurrency !== undefined ? change.concurrency : (before?.concurrency ?? null),
    };
    if (after.calls_per_min === null && after.burst === null && after.concurrency === null) {
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
