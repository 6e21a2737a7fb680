import type { Readable } from 'node:stream';
import type { Principal } from '../../auth/principal.ts';
import type { Db, MetadataStore } from '../../store/db.ts';
import { AppError } from '../../errors.ts';
import { DEFAULT_ACL, aclFromStored, aclToApi, canRead, isOwner, parseAcl, type ReadAcl } from '../acl.ts';
import { BlobMissingError, type BlobStore } from '../blobStore.ts';
import type { Connector, FileInfo, ListPage, ReadOptions, ReadResult, WriteOptions } from '../connector.ts';
import { contentTypeFor } from '../contentType.ts';
import { appendEvent, appendEvents, writtenBy } from '../../events/outbox.ts';
import type { MarkerCodec, Position } from '../marker.ts';
import { checkPathLimits, checkSegment } from '../paths.ts';
import { NO_METRICS, type Metrics } from '../../metrics.ts';

export interface HostedOptions {
  maxUploadBytes: number;
  /** Entries per listing page (the contract's limit is 1000). */
  pageSize?: number;
  /** Files removed per transaction by a recursive delete. */
  deleteBatch?: number;
  /**
   * The storage quota an upload by this principal is held to (docs/limits.md): the bytes their
   * user's hosted files may come to, the lower of the user's quota and their key's, and whose
   * it is; undefined: none.
   */
  storageQuota?: (principal: Principal) => StorageQuota | undefined;
  /** Bytes in and out counted for Prometheus (docs/metrics.md). */
  metrics?: Metrics;
}

/** The bytes a user's hosted files may come to, and whose quota that is. */
export interface StorageQuota {
  bytes: number;
  scope: 'user' | 'key';
}

interface Owner {
  id: number;
  name: string;
}

interface NodeRow {
  id: number;
  kind: 'dir' | 'file';
  acl: string | null;
  blob_id: string | null;
  size: number;
  modified_at: number;
}

const NODE_COLUMNS = ['id', 'kind', 'acl', 'blob_id', 'size', 'modified_at'] as const;

/**
 * Hosted data (`data://`): metadata in the store, contents in the blob store.
 *
 * Layout: `data://<owner>/<collection>/<dir>/.../<file>`. A node row is keyed by (owner,
 * parent path, name), so resolving any path is one indexed lookup and listing is a keyset
 * range scan. Collections carry the read ACL; everything inside inherits it.
 *
 * Blob lifecycle: a blob id is recorded in `pending_blobs` before its bytes are written and
 * leaves that table in the same transaction that makes a node point at it; a blob a node
 * stops pointing at enters it in that same transaction. So after any crash, the blobs that
 * may be unreferenced are exactly those listed there, and `recover()` removes them.
 */
export class HostedConnector implements Connector {
  private readonly db: Db;
  private readonly pageSize: number;
  private readonly deleteBatch: number;

  constructor(
    private readonly store: MetadataStore,
    private readonly blobs: BlobStore,
    private readonly markers: MarkerCodec,
    private readonly options: HostedOptions,
    /** Who owns `data://<name>`: the user service answers (names compare without regard to case). */
    private readonly findUser: (name: string) => Promise<{ id: number; username: string } | undefined>,
  ) {
    this.db = store.db;
    this.pageSize = options.pageSize ?? 1000;
    this.deleteBatch = options.deleteBatch ?? 500;
  }

  // ---- resolution and permission -------------------------------------------------------

  private async owner(principal: Principal, segment: string | undefined): Promise<Owner> {
    if (segment === undefined || segment === '.my') return { id: principal.userId, name: principal.username };
    if (segment.startsWith('.')) {
      throw new AppError('reserved_path', `data://${segment} is reserved; your own data is data://.my`);
    }
    const user = await this.findUser(segment);
    if (!user) throw notFound(`data://${segment}`);
    return { id: user.id, name: user.username };
  }

  private async node(db: Db, owner: Owner, rel: string[]): Promise<NodeRow | undefined> {
    return db
      .selectFrom('nodes')
      .select(NODE_COLUMNS)
      .where('owner_id', '=', owner.id)
      .where('dir', '=', rel.slice(0, -1).join('/'))
      .where('name', '=', rel[rel.length - 1]!)
      .executeTakeFirst();
  }

  private async collectionAcl(owner: Owner, collection: string): Promise<ReadAcl | undefined> {
    const row = await this.db
      .selectFrom('nodes')
      .select('acl')
      .where('owner_id', '=', owner.id)
      .where('dir', '=', '')
      .where('name', '=', collection)
      .executeTakeFirst();
    return row ? aclFromStored(row.acl) : undefined;
  }

  /**
   * Read access to a path inside a collection. What a caller may not read answers 404 like
   * what does not exist, so private collections do not reveal their names.
   */
  private async checkRead(principal: Principal, owner: Owner, rel: string[]): Promise<void> {
    if (rel.length === 0 || isOwner(principal, owner.name)) return;
    const acl = await this.collectionAcl(owner, rel[0]!);
    if (acl === undefined || !canRead(principal, owner.name, acl)) throw notFound(uri(owner, rel));
  }

  private checkWrite(principal: Principal, owner: Owner, rel: string[]): void {
    if (!isOwner(principal, owner.name)) {
      throw new AppError('write_denied', `only ${owner.name} can change ${uri(owner, rel)}`);
    }
  }

  /** Resolves a path the caller may read to its node; the user root is a directory. */
  private async resolve(principal: Principal, segments: string[]): Promise<{ owner: Owner; rel: string[]; row?: NodeRow }> {
    const owner = await this.owner(principal, segments[0]);
    const rel = segments.slice(1);
    if (rel.length === 0) return { owner, rel };
    await this.checkRead(principal, owner, rel);
    const row = await this.node(this.db, owner, rel);
    if (!row) throw notFound(uri(owner, rel));
    return { owner, rel, row };
  }

  // ---- reading ------------------------------------------------------------------------

  async read(principal: Principal, segments: string[], options: ReadOptions): Promise<ReadResult> {
    // A concurrent replace may delete the blob between our lookup and our open; the new
    // node is then already committed, so looking again finds the new blob.
    for (let attempt = 0; ; attempt++) {
      const { rel, row } = await this.resolve(principal, segments);
      if (!row || row.kind === 'dir') return { info: { kind: 'dir' } };
      const info = fileInfo(rel, row);
      if (options.skipBody?.(info)) return { info, range: undefined, body: undefined };
      const range = options.pickRange?.(info);
      try {
        const length = range ? range.end - range.start + 1 : info.size;
        const body = await this.blobs.open(row.blob_id!, range, length);
        // A stream is counted once read to its end (a download cut short counts nothing).
        const metrics = this.options.metrics ?? NO_METRICS;
        if (Buffer.isBuffer(body)) metrics.dataBytes('out', length);
        else if (metrics.enabled) body.once('end', () => metrics.dataBytes('out', length));
        return { info, range, body };
      } catch (err) {
        if (!(err instanceof BlobMissingError) || attempt >= 3) throw err;
      }
    }
  }

  async list(principal: Principal, segments: string[], options: { marker?: string; acl: boolean }): Promise<ListPage> {
    const { owner, rel, row } = await this.resolve(principal, segments);
    if (row && row.kind === 'file') {
      throw new AppError('type_conflict', `${uri(owner, rel)} is a file, not a directory`);
    }
    const dir = rel.join('/');
    const scope = `data:${owner.id}:${dir}`;
    // File pages come first, then folder pages, and a page never holds both: the npm client
    // miscounts mixed pages, and the Python CLI finds a file's size and date in the first page
    // of its directory alone. At a user's root there are only collections.
    let pos: Position = options.marker ? this.markers.decode(scope, options.marker) : { phase: rel.length > 0 ? 'files' : 'folders', after: '' };
    const page: ListPage = {};

    if (pos.phase === 'files') {
      const rows = await this.db
        .selectFrom('nodes')
        .select(['name', 'size', 'modified_at'])
        .where('owner_id', '=', owner.id)
        .where('dir', '=', dir)
        .where('kind', '=', 'file')
        .where('name', '>', pos.after)
        .orderBy('name')
        .limit(this.pageSize + 1)
        .execute();
      if (rows.length > this.pageSize) {
        rows.length = this.pageSize;
        page.marker = this.markers.encode(scope, { phase: 'files', after: rows[rows.length - 1]!.name });
      }
      if (rows.length > 0) {
        page.files = rows.map((r) => ({
          filename: r.name,
          last_modified: new Date(r.modified_at).toISOString(),
          size: r.size,
        }));
        if (!page.marker && (await this.hasFolders(owner, dir))) page.marker = this.markers.encode(scope, { phase: 'folders', after: '' });
      } else {
        pos = { phase: 'folders', after: '' };
      }
    }
    if (pos.phase === 'folders') {
      // At a user's root the entries are collections, filtered by what the caller may read.
      let readable: ReadAcl[] | undefined;
      if (rel.length === 0 && !isOwner(principal, owner.name)) {
        readable = principal.algorithm?.owner.toLowerCase() === owner.name.toLowerCase() ? ['public', 'my_algorithms'] : ['public'];
      }
      let q = this.db
        .selectFrom('nodes')
        .select('name')
        .where('owner_id', '=', owner.id)
        .where('dir', '=', dir)
        .where('kind', '=', 'dir')
        .where('name', '>', pos.after)
        .orderBy('name')
        .limit(this.pageSize + 1);
      if (readable) q = q.where('acl', 'in', readable);
      const rows = await q.execute();
      if (rows.length > this.pageSize) {
        rows.length = this.pageSize;
        page.marker = this.markers.encode(scope, { phase: 'folders', after: rows[rows.length - 1]!.name });
      }
      if (rows.length > 0) page.folders = rows.map((r) => ({ name: r.name }));
    }
    if (options.acl && rel.length > 0) {
      page.acl = aclToApi((await this.collectionAcl(owner, rel[0]!)) ?? DEFAULT_ACL);
    }
    return page;
  }

  private async hasFolders(owner: Owner, dir: string): Promise<boolean> {
    const row = await this.db
      .selectFrom('nodes')
      .select('id')
      .where('owner_id', '=', owner.id)
      .where('dir', '=', dir)
      .where('kind', '=', 'dir')
      .limit(1)
      .executeTakeFirst();
    return row !== undefined;
  }

  // ---- writing ------------------------------------------------------------------------

  /** Checks that `rel`'s parent is an existing directory and `rel` is not one. */
  private async checkFileTarget(db: Db, owner: Owner, rel: string[]): Promise<NodeRow | undefined> {
    const parentRel = rel.slice(0, -1);
    const parent = await this.node(db, owner, parentRel);
    if (!parent) {
      throw new AppError('not_found', `directory ${uri(owner, parentRel)} does not exist; create it first`);
    }
    if (parent.kind !== 'dir') throw new AppError('type_conflict', `${uri(owner, parentRel)} is a file, not a directory`);
    const existing = await this.node(db, owner, rel);
    if (existing?.kind === 'dir') {
      throw new AppError('type_conflict', `${uri(owner, rel)} is a directory; a file cannot replace it`);
    }
    return existing;
  }

  async write(principal: Principal, segments: string[], body: Readable, options: WriteOptions): Promise<string> {
    const owner = await this.owner(principal, segments[0]);
    const rel = segments.slice(1);
    this.checkWrite(principal, owner, rel);
    if (rel.length < 2) {
      // A collection named as the file: the same answer as any other directory in the way.
      if (rel.length === 1 && (await this.node(this.db, owner, rel))?.kind === 'dir') {
        throw new AppError('type_conflict', `${uri(owner, rel)} is a collection (a directory); a file cannot replace it: name a file inside it, e.g. ${uri(owner, rel)}/<file name>`);
      }
      throw new AppError('invalid_path', 'a file goes inside a collection: data://.my/<collection>/<file name>');
    }
    // Refuse early, before any byte is stored; checked again when committing.
    const before = await this.checkFileTarget(this.db, owner, rel);
    // The storage quota: a body declared too large is refused before a byte is stored; one of
    // no declared length is read only while it fits (the blob store keeps nothing of a body cut
    // off). Both checked again when committing, under the store's write lock.
    const quota = this.options.storageQuota?.(principal);
    let maxBytes = this.options.maxUploadBytes;
    if (quota !== undefined) {
      const room = this.room(quota, await this.storedBytes(owner.id), before?.size ?? 0);
      if (options.size !== undefined && options.size > room) throw quotaExceeded(quota, await this.storedBytes(owner.id), options.size, before?.size ?? 0);
      maxBytes = Math.min(maxBytes, room);
    }

    const blobId = this.blobs.newId();
    await this.db.insertInto('pending_blobs').values({ blob_id: blobId, created_at: Date.now(), holder: this.store.instance }).execute();
    let oldBlob: string | null = null;
    try {
      let size: number;
      try {
        ({ size } = await this.blobs.put(blobId, body, { maxBytes, signal: options.signal }));
      } catch (err) {
        // Cut off at the quota's room (not at the upload limit): the quota's answer.
        if (quota !== undefined && maxBytes < this.options.maxUploadBytes && err instanceof AppError && err.code === 'payload_too_large') {
          throw quotaExceeded(quota, await this.storedBytes(owner.id), undefined, before?.size ?? 0);
        }
        throw err;
      }
      this.options.metrics?.dataBytes('in', size);
      const now = Date.now();
      oldBlob = await this.store.write(async (trx) => {
        // Another server took this one for dead and claimed the blob to remove it (its
        // notice connection to the database was down): the upload cannot stand.
        const ours = await trx.deleteFrom('pending_blobs').where('blob_id', '=', blobId).where('holder', '=', this.store.instance).executeTakeFirst();
        if (Number(ours.numDeletedRows) !== 1) {
          throw new AppError('storage_unavailable', 'the upload was interrupted while this server had lost the database; send it again');
        }
        const existing = await this.checkFileTarget(trx, owner, rel);
        const replaced = existing?.size ?? 0;
        if (quota !== undefined) {
          const used = await this.storedBytes(owner.id, trx);
          if (size > this.room(quota, used, replaced)) throw quotaExceeded(quota, used, size, replaced);
        }
        await addStored(trx, owner.id, size - replaced);
        const name = rel[rel.length - 1]!;
        await appendEvent(trx, {
          userId: owner.id,
          type: existing ? 'data.file.updated' : 'data.file.created',
          subject: uri(owner, rel),
          data: { size, content_type: contentTypeFor(name), etag: `"${blobId}"`, ...writtenBy(principal) },
          time: now,
          traceparent: principal.traceparent,
        });
        if (existing) {
          await trx.updateTable('nodes').set({ blob_id: blobId, size, modified_at: now }).where('id', '=', existing.id).execute();
          await trx.insertInto('pending_blobs').values({ blob_id: existing.blob_id!, created_at: now, holder: this.store.instance }).execute();
        } else {
          await trx
            .insertInto('nodes')
            .values({
              owner_id: owner.id,
              dir: rel.slice(0, -1).join('/'),
              name: rel[rel.length - 1]!,
              kind: 'file',
              acl: null,
              blob_id: blobId,
              size,
              created_at: now,
              modified_at: now,
            })
            .execute();
        }
        await options.along?.(trx, uri(owner, rel));
        return existing?.blob_id ?? null;
      });
    } catch (err) {
      await this.releaseBlobs([blobId]);
      throw err;
    }
    if (oldBlob) await this.releaseBlobs([oldBlob]);
    return uri(owner, rel);
  }

  async mkdir(principal: Principal, parentSegments: string[], name: string, aclInput: unknown): Promise<string> {
    const owner = await this.owner(principal, parentSegments[0]);
    const parentRel = parentSegments.slice(1);
    const rel = [...parentRel, checkSegment(name)];
    checkPathLimits([...parentSegments, name]);
    this.checkWrite(principal, owner, rel);
    let acl: ReadAcl | null = null;
    if (parentRel.length === 0) {
      if (name.startsWith('.')) {
        throw new AppError('reserved_path', 'collection names may not start with "."; those names are reserved');
      }
      acl = aclInput === undefined ? DEFAULT_ACL : parseAcl(aclInput);
    } else if (aclInput !== undefined) {
      throw new AppError(
        'invalid_acl',
        `ACLs are set on collections; ${uri(owner, rel)} takes the ACL of ${uri(owner, parentRel.slice(0, 1))}`,
      );
    }
    await this.store.write(async (trx) => {
      if (parentRel.length > 0) {
        const parent = await this.node(trx, owner, parentRel);
        if (!parent) throw new AppError('not_found', `directory ${uri(owner, parentRel)} does not exist; create it first`);
        if (parent.kind !== 'dir') throw new AppError('type_conflict', `${uri(owner, parentRel)} is a file, not a directory`);
      }
      // Looked up first, not learned from the unique index: a failed statement ends a
      // PostgreSQL transaction. Writers exclude each other, so nothing comes in between.
      const existing = await this.node(trx, owner, rel);
      if (existing?.kind === 'file') {
        throw new AppError('type_conflict', `${uri(owner, rel)} is a file; a directory cannot have its name`);
      }
      if (existing) throw new AppError('already_exists', `directory ${uri(owner, rel)} already exists`);
      const now = Date.now();
      await trx
        .insertInto('nodes')
        .values({ owner_id: owner.id, dir: parentRel.join('/'), name, kind: 'dir', acl, blob_id: null, size: 0, created_at: now, modified_at: now })
        .execute();
      await appendEvent(trx, { userId: owner.id, type: 'data.directory.created', subject: uri(owner, rel), data: { ...writtenBy(principal) }, time: now, traceparent: principal.traceparent });
    });
    return uri(owner, rel);
  }

  async update(principal: Principal, segments: string[], changes: { acl?: unknown }): Promise<string> {
    const owner = await this.owner(principal, segments[0]);
    const rel = segments.slice(1);
    this.checkWrite(principal, owner, rel);
    if (rel.length === 0) throw new AppError('invalid_path', 'name a collection to change: data://.my/<collection>');
    const row = await this.node(this.db, owner, rel);
    if (!row) throw notFound(uri(owner, rel));
    if (row.kind === 'file') throw new AppError('type_conflict', `${uri(owner, rel)} is a file; only directories have settings`);
    if (changes.acl !== undefined) {
      if (rel.length > 1) {
        throw new AppError('invalid_acl', `ACLs are set on collections; ${uri(owner, rel)} takes the ACL of ${uri(owner, rel.slice(0, 1))}`);
      }
      const acl = parseAcl(changes.acl);
      await this.db.updateTable('nodes').set({ acl, modified_at: Date.now() }).where('id', '=', row.id).execute();
    }
    return uri(owner, rel);
  }

  async delete(principal: Principal, segments: string[], force: boolean): Promise<number> {
    const owner = await this.owner(principal, segments[0]);
    const rel = segments.slice(1);
    this.checkWrite(principal, owner, rel);
    if (rel.length === 0) throw new AppError('invalid_path', "a user's root cannot be deleted; name a collection");
    const row = await this.node(this.db, owner, rel);
    if (!row) throw notFound(uri(owner, rel));
    if (row.kind === 'file') {
      const blob = await this.store.write(async (trx) => {
        const current = await this.node(trx, owner, rel);
        if (!current || current.kind !== 'file') throw notFound(uri(owner, rel));
        await trx.insertInto('pending_blobs').values({ blob_id: current.blob_id!, created_at: Date.now(), holder: this.store.instance }).execute();
        await trx.deleteFrom('nodes').where('id', '=', current.id).execute();
        await addStored(trx, owner.id, -current.size);
        await appendEvent(trx, { userId: owner.id, type: 'data.file.deleted', subject: uri(owner, rel), data: { size: current.size, etag: `"${current.blob_id}"`, ...writtenBy(principal) }, traceparent: principal.traceparent });
        return current.blob_id!;
      });
      await this.releaseBlobs([blob]);
      return 1;
    }
    return force ? this.deleteTree(principal, owner, rel) : this.deleteEmptyDir(principal, owner, rel);
  }

  private async deleteEmptyDir(principal: Principal, owner: Owner, rel: string[]): Promise<number> {
    const dir = rel.join('/');
    await this.store.write(async (trx) => {
      const child = await trx.selectFrom('nodes').select('id').where('owner_id', '=', owner.id).where('dir', '=', dir).limit(1).executeTakeFirst();
      if (child) {
        throw new AppError('directory_not_empty', `${uri(owner, rel)} is not empty; pass force=true to delete it with everything in it`);
      }
      const res = await trx
        .deleteFrom('nodes')
        .where('owner_id', '=', owner.id)
        .where('dir', '=', rel.slice(0, -1).join('/'))
        .where('name', '=', rel[rel.length - 1]!)
        .where('kind', '=', 'dir')
        .executeTakeFirst();
      if (Number(res.numDeletedRows) === 0) throw notFound(uri(owner, rel));
      await appendEvent(trx, { userId: owner.id, type: 'data.directory.deleted', subject: uri(owner, rel), data: { ...writtenBy(principal) }, traceparent: principal.traceparent });
    });
    return 0;
  }

  /**
   * Recursive delete in batches, so a large tree never holds the write lock for long. Files
   * go first, batch by batch; the directories go last, in the same transaction that sees no
   * file left (a file uploaded meanwhile is caught by that check). A failure part-way
   * answers how many files were already deleted.
   */
  private async deleteTree(principal: Principal, owner: Owner, rel: string[]): Promise<number> {
    const dir = rel.join('/');
    const inTree = (db: Db) =>
      db
        .selectFrom('nodes')
        .where('owner_id', '=', owner.id)
        .where((eb) => eb.or([eb('dir', '=', dir), eb.and([eb('dir', '>=', `${dir}/`), eb('dir', '<', `${dir}0`)])]));
    let deleted = 0;
    try {
      for (;;) {
        const batch = await this.store.write(async (trx) => {
          const files = await inTree(trx).select(['id', 'blob_id', 'dir', 'name', 'size']).where('kind', '=', 'file').orderBy('dir').orderBy('name').limit(this.deleteBatch).execute();
          if (files.length === 0) {
            const dirs = await inTree(trx).select(['id', 'dir', 'name']).execute();
            for (let i = 0; i < dirs.length; i += 500) {
              await trx.deleteFrom('nodes').where('id', 'in', dirs.slice(i, i + 500).map((d) => d.id)).execute();
            }
            const top = await trx
              .deleteFrom('nodes')
              .where('owner_id', '=', owner.id)
              .where('dir', '=', rel.slice(0, -1).join('/'))
              .where('name', '=', rel[rel.length - 1]!)
              .executeTakeFirst();
            // The directories, deepest first, then the one named.
            const gone = dirs.map((d) => relOf(d.dir, d.name)).sort((a, b) => b.length - a.length);
            if (Number(top.numDeletedRows) > 0) gone.push(rel);
            await appendEvents(trx, gone.map((r) => ({ userId: owner.id, type: 'data.directory.deleted' as const, subject: uri(owner, r), data: { ...writtenBy(principal) }, traceparent: principal.traceparent })));
            return null;
          }
          const now = Date.now();
          await trx.insertInto('pending_blobs').values(files.map((f) => ({ blob_id: f.blob_id!, created_at: now, holder: this.store.instance }))).execute();
          await trx.deleteFrom('nodes').where('id', 'in', files.map((f) => f.id)).execute();
          await addStored(trx, owner.id, -files.reduce((n, f) => n + f.size, 0));
          await appendEvents(
            trx,
            files.map((f) => ({ userId: owner.id, type: 'data.file.deleted' as const, subject: uri(owner, relOf(f.dir, f.name)), data: { size: f.size, etag: `"${f.blob_id}"`, ...writtenBy(principal) }, time: now, traceparent: principal.traceparent })),
          );
          return files.map((f) => f.blob_id!);
        });
        if (batch === null) return deleted;
        deleted += batch.length;
        await this.releaseBlobs(batch);
      }
    } catch (err) {
      throw new AppError(
        'delete_incomplete',
        `deleting ${uri(owner, rel)} stopped after ${deleted} files: ${err instanceof AppError ? err.message : 'internal error'}; delete again to finish`,
        { deleted },
        err,
      );
    }
  }

  // ---- the storage quota --------------------------------------------------------------

  /** The bytes of a user's hosted files (user_storage, kept with their rows). */
  async storedBytes(userId: number, db: Db = this.db): Promise<number> {
    const row = await db.selectFrom('user_storage').select('bytes').where('user_id', '=', userId).executeTakeFirst();
    return row ? Number(row.bytes) : 0;
  }

  /**
   * How large a file may be under the quota, `used` bytes stored, replacing one of `replaced`
   * bytes: what is left of the quota, and never less than the file it replaces (a user over
   * their quota, lowered since, may still replace a file with one no larger).
   */
  private room(quota: StorageQuota, used: number, replaced: number): number {
    return Math.max(quota.bytes - used + replaced, replaced);
  }

  // ---- blob housekeeping -------------------------------------------------------------

  /** Deletes blobs that no node refers to any more, then forgets them. */
  async releaseBlobs(blobIds: string[]): Promise<void> {
    if (blobIds.length === 0) return;
    for (const id of blobIds) await this.blobs.delete(id);
    for (let i = 0; i < blobIds.length; i += 500) {
      await this.db.deleteFrom('pending_blobs').where('blob_id', 'in', blobIds.slice(i, i + 500)).execute();
    }
  }

  /**
   * Inside a user-deletion transaction: forgets all of an owner's nodes and returns the
   * blobs to release once that transaction commits.
   */
  async purgeOwner(trx: Db, ownerId: number): Promise<string[]> {
    const files = await trx.selectFrom('nodes').select('blob_id').where('owner_id', '=', ownerId).where('kind', '=', 'file').execute();
    const ids = files.map((f) => f.blob_id!);
    const now = Date.now();
    for (let i = 0; i < ids.length; i += 500) {
      await trx.insertInto('pending_blobs').values(ids.slice(i, i + 500).map((blob_id) => ({ blob_id, created_at: now, holder: this.store.instance }))).execute();
    }
    await trx.deleteFrom('nodes').where('owner_id', '=', ownerId).execute();
    await trx.deleteFrom('user_storage').where('user_id', '=', ownerId).execute();
    return ids;
  }

  /** At start-up: removes interrupted writes and blobs left unreferenced by a crash. */
  async recover(): Promise<{ removed: number }> {
    await this.blobs.recover();
    return this.sweep();
  }

  /**
   * Removes the blobs that processes now dead left pending: written but never committed, or
   * unreferenced but not yet deleted. A live process's pending blobs (an upload in flight on
   * another server sharing the store) are left alone. Each row is first claimed in the store,
   * so two servers sweeping at once never both work on it, and an upload whose row was claimed
   * fails at its commit instead of pointing at a deleted blob.
   */
  async sweep(): Promise<{ removed: number }> {
    const holders = await this.db.selectFrom('pending_blobs').select('holder').distinct().execute();
    const claim = `${this.store.instance}#sweep`;
    let removed = 0;
    for (const { holder } of holders) {
      if (await this.store.isLive(holder)) continue;
      for (;;) {
        const batch = await this.store.write(async (trx) => {
          let q = trx.selectFrom('pending_blobs').select('blob_id').limit(500);
          q = holder === null ? q.where('holder', 'is', null) : q.where('holder', '=', holder);
          const rows = await q.execute();
          if (rows.length > 0) {
            await trx.updateTable('pending_blobs').set({ holder: claim }).where('blob_id', 'in', rows.map((r) => r.blob_id)).execute();
          }
          return rows.map((r) => r.blob_id);
        });
        if (batch.length === 0) break;
        for (const blob_id of batch) {
          const used = await this.db.selectFrom('nodes').select('id').where('blob_id', '=', blob_id).limit(1).executeTakeFirst();
          if (!used) {
            await this.blobs.delete(blob_id);
            removed++;
          }
          await this.db.deleteFrom('pending_blobs').where('blob_id', '=', blob_id).execute();
        }
      }
    }
    return { removed };
  }
}

/** A node's path inside its owner's space, from its row's `dir` and `name`. */
function relOf(dir: string, name: string): string[] {
  return dir === '' ? [name] : [...dir.split('/'), name];
}

function uri(owner: Owner, rel: string[]): string {
  return rel.length === 0 ? `data://${owner.name}` : `data://${owner.name}/${rel.join('/')}`;
}

/** Adds `delta` bytes to a user's stored total, in the transaction that changes their files. */
async function addStored(trx: Db, userId: number, delta: number): Promise<void> {
  if (delta === 0) return;
  await trx
    .insertInto('user_storage')
    .values({ user_id: userId, bytes: delta })
    .onConflict((oc) => oc.column('user_id').doUpdateSet((eb) => ({ bytes: eb('user_storage.bytes', '+', eb.ref('excluded.bytes')) })))
    .execute();
}

/** An upload refused by the storage quota (`size`: the body's, when known). */
function quotaExceeded(quota: StorageQuota, used: number, size: number | undefined, replaced: number): AppError {
  const left = Math.max(0, quota.bytes - used + replaced);
  const who = quota.scope === 'user' ? 'your hosted files' : 'your hosted files, for uploads with this key,';
  return new AppError(
    'storage_quota_exceeded',
    `${who} may come to ${quota.bytes} bytes; ${used} are stored, so this file may be ${left} bytes${replaced > 0 ? ' (with the one it replaces)' : ''}${size !== undefined ? ` and it is ${size}` : ' and it is larger'}; nothing of it was stored`,
    { limit: 'storage_bytes', scope: quota.scope, storage_bytes: quota.bytes, used_bytes: used, remaining_bytes: Math.max(0, quota.bytes - used) },
  );
}

function notFound(what: string): AppError {
  return new AppError('not_found', `${what} does not exist (or you may not read it)`);
}

function fileInfo(rel: string[], row: NodeRow): FileInfo {
  return {
    kind: 'file',
    size: row.size,
    etag: `"${row.blob_id}"`,
    modified: row.modified_at,
    contentType: contentTypeFor(rel[rel.length - 1]!),
  };
}
