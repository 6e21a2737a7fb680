import crypto from 'node:crypto';
import fs from 'node:fs';
import { sql } from 'kysely';
import type { Services } from './services.ts';
import { ServerSecret, SECRET_KEY } from './secret.ts';
import { openBlobStream, type BlobStore } from './data/blobStore.ts';
import type { Db } from './store/db.ts';
import { eachLimit } from './concurrency.ts';

/** `meta` rows of a shared store that a move writes: which home it is being or was filled from. */
export const MOVING_KEY = 'moving_from';
export const MOVED_KEY = 'moved_from';

/**
 * The tables a move carries, in the order their foreign keys allow, and their identity columns.
 * Each is read in pages by `id`, or by SQLite's rowid for a table without one (usage and the limits' tables: the
 * source is always SQLite).
 */
const TABLES = [
  { name: 'users', identity: true },
  { name: 'api_keys', identity: false },
  { name: 'nodes', identity: true },
  { name: 'algorithms', identity: true },
  { name: 'builds', identity: true },
  { name: 'versions', identity: true },
  { name: 'connectors', identity: true },
  { name: 'usage', identity: false, rowid: true },
  // A user's own limits, the compute counted per month and the bytes stored (docs/limits.md).
  { name: 'user_limits', identity: false, rowid: true },
  { name: 'compute_months', identity: false, rowid: true },
  { name: 'user_storage', identity: false, rowid: true },
] as const;

type TableName = (typeof TABLES)[number]['name'];

export class MoveError extends Error {
  override name = 'MoveError';
}

export interface MoveReport {
  from: string;
  to: { database: string; blobs: string };
  rows: Record<TableName, number>;
  files: { count: number; bytes: number; copied: number; resumed: number };
  trees: { count: number; missing: string[] };
  verified: true;
}

/** How a move speaks while it runs (stderr in the CLI). */
export type Progress = (line: string) => void;

const COPY_CONCURRENCY = 4;
const ROWS_PER_PAGE = 1000;

/**
 * Carries a single-machine home (its SQLite metadata, the file contents on its disk, its
 * algorithms' source and build trees and its secret) into a shared deployment's PostgreSQL and
 * S3 store, then checks that everything arrived: the same rows in every table, every file's
 * bytes by SHA-256 read back from the new store, every tree's stored checksum.
 *
 * The order makes it safe to interrupt at any point and to run again (it resumes):
 * 1. The target is claimed for this home (`meta.moving_from`): a move never mixes two homes,
 *    and never writes into a deployment that already holds data of its own.
 * 2. File contents are copied first, each recorded as pending in the target (with this
 *    process as holder) before its bytes are written, under the same rule uploads follow: a
 *    move that dies leaves pending rows that its next run claims and keeps (the bytes already
 *    there are not sent again), or that a server's sweep removes if the move is abandoned.
 * 3. Source and build trees are stored as a shared deployment's servers store them
 *    (AlgorithmArtifacts.publish, which skips what is already stored).
 * 4. Every row goes in in one transaction, with the home's secret (so list markers and the
 *    sealed credentials of connected accounts stay readable), the identity sequences moved past
 *    the ids carried, the pending rows of the copied contents dropped, and `meta.moved_from`
 *    set: a deployment holds the whole home or none of its rows.
 * 5. Verification: row counts, and every byte read back.
 *
 * The home is read at rest: the caller holds its lock (no server runs on it) and has run the
 * same recovery a server runs at start.
 */
export async function moveHome(home: string, source: Services, target: Services, progress: Progress): Promise<MoveReport> {
  if (source.store.dialect !== 'sqlite') throw new MoveError('the home to move must be a single-machine home (SQLite); unset ALGOHOST_DATABASE_URL');
  if (target.store.dialect === 'sqlite' || target.config.blobs === undefined) {
    throw new MoveError('the target must be shared: give --to postgres://… and --blobs s3://… (or ALGOHOST_DATABASE_URL and ALGOHOST_BLOBS)');
  }
  const secret = ServerSecret.loadOrCreate(home);
  const homeId = crypto.createHash('sha256').update(secret.bytes).digest('hex').slice(0, 16);
  const src = source.store.db;
  const dst = target.store.db;
  const where = { database: target.store.location, blobs: target.blobs.location };

  const state = await claimTarget(dst, homeId);
  let copied = 0;
  let resumed = 0;
  if (state === 'done') {
    progress(`the target already holds this home (moved earlier); verifying`);
  } else {
    // 2. File contents.
    const files = await filesOf(src);
    const ours = `${target.store.instance}#move`;
    // Pending rows an earlier, interrupted run left: claimed by this run, its bytes kept if whole.
    const earlier = await dst.selectFrom('pending_blobs').select(['blob_id', 'holder']).where('holder', 'like', '%#move').execute();
    const resumable = new Set<string>();
    for (const row of earlier) {
      if (await target.store.isLive(row.holder)) throw new MoveError('another move into this deployment is running; wait for it to finish');
      resumable.add(row.blob_id);
    }
    if (resumable.size > 0) await dst.updateTable('pending_blobs').set({ holder: ours }).where('holder', 'like', '%#move').execute();
    // Already there: what an earlier run stored of a file the home still has.
    const wanted = new Set(files.map((f) => f.blob_id!));
    const present = new Set<string>();
    for await (const id of target.blobs.list()) if (resumable.has(id) && wanted.has(id)) present.add(id);
    let bytes = 0;
    let lastSaid = Date.now();
    await eachLimit(files, COPY_CONCURRENCY, async ({ blob_id, size }) => {
      const id = blob_id!;
      // Kept only if it is whole: S3 never shows a cut-short upload, but not every store that
      // speaks its protocol is as strict (s3rver keeps the bytes it got before the kill).
      if (present.has(id) && !(await sameBytes(source.blobs, target.blobs, id, size))) present.delete(id);
      if (!present.has(id)) {
        if (!resumable.has(id)) await dst.insertInto('pending_blobs').values({ blob_id: id, created_at: Date.now(), holder: ours }).execute();
        const body = await openBlobStream(source.blobs, id, size);
        const put = await target.blobs.put(id, body, { maxBytes: size });
        if (put.size !== size) throw new MoveError(`file contents ${id}: ${put.size} bytes arrived of ${size}`);
        copied++;
      }
      bytes += size;
      if (Date.now() - lastSaid >= 1000) {
        lastSaid = Date.now();
        progress(`files: ${copied + present.size} of ${files.length} (${mib(bytes)} MiB)`);
      }
    });
    resumed = present.size;
    progress(`files: ${files.length} in the new store (${copied} copied now, ${resumed} whole from an earlier run)`);

    // 3. Trees.
    const trees = await treesOf(src);
    let stored = 0;
    for (const t of trees) {
      if (!fs.existsSync(target.artifacts.dir(t.algorithmId, t.kind, t.hash))) continue;
      await target.artifacts.publish(t.algorithmId, t.kind, t.hash);
      stored++;
    }
    progress(`algorithm trees: ${stored} stored`);

    // 4. Rows.
    await target.store.write(async (trx) => {
      const still = await trx.selectFrom('meta').select('value').where('key', '=', MOVING_KEY).executeTakeFirst();
      if (still?.value !== homeId) throw new MoveError('the target was claimed by another move meanwhile');
      for (const t of TABLES) {
        // In pages by id, so that a home of millions of files is never held in memory whole.
        for (let after: string | number | undefined; ; ) {
          let rows: Record<string, unknown>[];
          if ('rowid' in t) {
            const page = await src
              .selectFrom(t.name)
              .select(sql<number>`rowid`.as('move_rowid'))
              .selectAll()
              .where(sql`rowid`, '>', after ?? 0)
              .orderBy(sql`rowid`)
              .limit(ROWS_PER_PAGE)
              .execute();
            if (page.length === 0) break;
            after = page[page.length - 1]!.move_rowid;
            rows = page.map(({ move_rowid: _, ...row }) => row);
          } else {
            let q = src.selectFrom(t.name).selectAll().orderBy('id').limit(ROWS_PER_PAGE);
            if (after !== undefined) q = q.where('id', '>', after as never);
            rows = (await q.execute()) as Record<string, unknown>[];
            if (rows.length === 0) break;
            after = rows[rows.length - 1]!.id as string | number;
          }
          if (t.name === 'builds') for (const r of rows) r.holder = null;
          await insertAll(trx, t.name, rows);
        }
        if (t.identity && target.store.dialect === 'postgres') {
          // The ids were carried as they were: new rows must be numbered after them.
          await sql`SELECT setval(pg_get_serial_sequence(${t.name}, 'id'), coalesce((SELECT max(id) FROM ${sql.table(t.name)}), 0) + 1, false)`.execute(trx);
        }
      }
      const metaRows = await src.selectFrom('meta').selectAll().where('key', 'not in', [SECRET_KEY, MOVING_KEY, MOVED_KEY]).execute();
      metaRows.push({ key: SECRET_KEY, value: secret.bytes.toString('base64') }, { key: MOVED_KEY, value: homeId });
      for (const m of metaRows) {
        await trx.insertInto('meta').values(m).onConflict((oc) => oc.column('key').doUpdateSet({ value: m.value })).execute();
      }
      await trx.deleteFrom('meta').where('key', '=', MOVING_KEY).execute();
      // The copied contents are now referenced. A pending row of an earlier run whose file is
      // gone from the home (its server ran in between) stays pending: the sweep removes it.
      await trx
        .deleteFrom('pending_blobs')
        .where('holder', '=', ours)
        .where(({ exists, selectFrom }) => exists(selectFrom('nodes').select('nodes.id').whereRef('nodes.blob_id', '=', 'pending_blobs.blob_id')))
        .execute();
    });
    progress('rows: in the new database');
  }

  // 5. Verification.
  const rows = {} as Record<TableName, number>;
  for (const t of TABLES) {
    const [a, b] = await Promise.all([count(src, t.name), count(dst, t.name)]);
    if (a !== b) throw new MoveError(`verification failed: ${t.name} has ${a} rows in the home and ${b} in the database`);
    rows[t.name] = a;
  }
  const files = await filesOf(src);
  let bytes = 0;
  await eachLimit(files, COPY_CONCURRENCY, async ({ blob_id, size }) => {
    const [a, b] = await Promise.all([digest(source.blobs, blob_id!, size), digest(target.blobs, blob_id!, size)]);
    if (a !== b) throw new MoveError(`verification failed: file contents ${blob_id} differ in the new store (sha256 ${b}, not ${a})`);
    bytes += size;
  });
  const trees = await treesOf(src);
  const missing: string[] = [];
  let stored = 0;
  for (const t of trees) {
    const row = await dst
      .selectFrom('artifacts')
      .select(['blob_id', 'size', 'sha256'])
      .where('algorithm_id', '=', t.algorithmId)
      .where('kind', '=', t.kind)
      .where('hash', '=', t.hash)
      .executeTakeFirst();
    if (!row) {
      missing.push(`algorithm ${t.algorithmId} ${t.kind} ${t.hash}`);
      continue;
    }
    const got = await digest(target.blobs, row.blob_id, row.size);
    if (got !== row.sha256) throw new MoveError(`verification failed: the stored ${t.kind} ${t.hash} of algorithm ${t.algorithmId} does not match its checksum`);
    stored++;
  }
  if (missing.length > 0) progress(`not in the home, so not moved (calls to them failed there too): ${missing.join(', ')}`);
  progress(`verified: ${Object.entries(rows).map(([k, v]) => `${v} ${k}`).join(', ')}; ${files.length} files (${mib(bytes)} MiB) and ${stored} trees read back by SHA-256`);
  return {
    from: home,
    to: where,
    rows,
    files: { count: files.length, bytes, copied, resumed },
    trees: { count: stored, missing },
    verified: true,
  };
}

/** The target is empty (claimed now), or this home's earlier move is under way, or done. */
async function claimTarget(dst: Db, homeId: string): Promise<'fresh' | 'resumed' | 'done'> {
  const meta = new Map((await dst.selectFrom('meta').select(['key', 'value']).where('key', 'in', [MOVING_KEY, MOVED_KEY]).execute()).map((r) => [r.key, r.value]));
  if (meta.get(MOVED_KEY) === homeId) return 'done';
  if (meta.has(MOVED_KEY)) throw new MoveError('the database already holds another home moved into it; move into an empty database');
  if (meta.has(MOVING_KEY) && meta.get(MOVING_KEY) !== homeId) throw new MoveError('the database is being filled from another home; move into an empty database');
  if (meta.get(MOVING_KEY) === homeId) return 'resumed';
  const holdsData = await dst.selectFrom('users').select('id').limit(1).executeTakeFirst();
  if (holdsData) throw new MoveError('the database already holds users of its own; move into an empty database (a deployment that has never served)');
  await dst.insertInto('meta').values({ key: MOVING_KEY, value: homeId }).execute();
  return 'fresh';
}

/** Every file's contents in the home: its blob and size. */
function filesOf(db: Db): Promise<{ blob_id: string | null; size: number }[]> {
  return db.selectFrom('nodes').select(['blob_id', 'size']).where('kind', '=', 'file').where('blob_id', 'is not', null).orderBy('blob_id').execute();
}

interface Tree {
  algorithmId: number;
  kind: 'source' | 'build';
  hash: string;
}

/** The trees a deployment needs: each algorithm's current source, and every successful build. */
async function treesOf(db: Db): Promise<Tree[]> {
  const sources = await db.selectFrom('algorithms').select(['id', 'source_hash']).where('source_hash', 'is not', null).orderBy('id').execute();
  const builds = await db.selectFrom('builds').select(['algorithm_id', 'hash']).where('status', '=', 'succeeded').orderBy('id').execute();
  return [
    ...sources.map((s) => ({ algorithmId: s.id, kind: 'source' as const, hash: s.source_hash! })),
    ...builds.map((b) => ({ algorithmId: b.algorithm_id, kind: 'build' as const, hash: b.hash })),
  ];
}

async function insertAll(trx: Db, table: TableName, rows: Record<string, unknown>[]): Promise<void> {
  if (rows.length === 0) return;
  // PostgreSQL takes at most 65,535 parameters in one statement.
  const per = Math.max(1, Math.floor(60_000 / Object.keys(rows[0]!).length));
  for (let i = 0; i < rows.length; i += per) {
    await trx
      .insertInto(table)
      .values(rows.slice(i, i + per) as never)
      .execute();
  }
}

async function count(db: Db, table: TableName): Promise<number> {
  const r = await db.selectFrom(table).select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
  return Number(r.n);
}

/** Whether the target holds exactly the source's bytes under `id` (false if it cannot read them). */
async function sameBytes(source: BlobStore, target: BlobStore, id: string, size: number): Promise<boolean> {
  try {
    const [a, b] = await Promise.all([digest(source, id, size), digest(target, id, size)]);
    return a === b;
  } catch {
    return false;
  }
}

async function digest(blobs: BlobStore, id: string, size: number): Promise<string> {
  const hash = crypto.createHash('sha256');
  const body = await blobs.open(id, undefined, size);
  if (Buffer.isBuffer(body)) return hash.update(body).digest('hex');
  for await (const chunk of body) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

function mib(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(1);
}
