/**
 * Where the trigger dispatchers stand (src/events/triggers.ts): whether they have read the outbox
 * to its end. Read this before reading the runs: runs read after it include every run the
 * dispatchers had made by then (read the other way round, a fan-out between the two reads would
 * show no runs and a cursor already past their event).
 */
import type { Db } from '../../src/store/db.ts';
import { DISPATCH_CURSORS, lastEventId } from '../../src/events/outbox.ts';

export async function triggerDispatch(db: Db): Promise<{ caughtUp: boolean; cursor: number; last: number }> {
  const last = await lastEventId(db);
  const row = await db.selectFrom('meta').select('value').where('key', '=', DISPATCH_CURSORS.triggers).executeTakeFirst();
  const cursor = Number(row?.value ?? 0);
  return { caughtUp: cursor >= last, cursor, last };
}
