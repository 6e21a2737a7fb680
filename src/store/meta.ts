import type { Db } from './db.ts';

/**
 * The value of a `meta` row that every server of a shared store must agree on: read, or made
 * with `make` by whichever server comes first (a second one's insert is a no-op, and it reads
 * the first one's value).
 */
export async function sharedMetaValue(db: Db, key: string, make: () => string): Promise<string> {
  const read = async () => (await db.selectFrom('meta').select('value').where('key', '=', key).executeTakeFirst())?.value;
  const value = await read();
  if (value !== undefined) return value;
  await db.insertInto('meta').values({ key, value: make() }).onConflict((oc) => oc.column('key').doNothing()).execute();
  return (await read())!;
}
