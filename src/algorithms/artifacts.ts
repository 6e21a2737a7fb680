import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Transform, type Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { openBlobStream, type BlobStore } from '../data/blobStore.ts';
import type { Db, MetadataStore } from '../store/db.ts';
import type { AlgorithmFiles } from './files.ts';

export type ArtifactKind = 'source' | 'build';

const TAR = '/bin/tar';
/** An artifact is our own tarball of a tree we made; this bounds one anyway. */
const MAX_ARTIFACT_BYTES = 4 * 1024 ** 3;

/**
 * Algorithm sources and builds where several servers share the file store: the server that
 * makes one (an upload, a compile) keeps its tree on its own disk as before and also stores a
 * tarball of it as a blob, recorded in `artifacts`; any other server that needs the tree (a
 * call, a compile, a clone) fetches that tarball once, checks its SHA-256 and unpacks it into
 * the same place on its disk, by rename, so a reader never sees half a tree. On one machine
 * (blobs on the home's disk) nothing is stored twice: every tree is already where it is read.
 *
 * The blob follows hosted data's crash rule: pending before its bytes are written, leaving
 * pending in the transaction that records it, so an interrupted store leaves nothing behind.
 */
export class AlgorithmArtifacts {
  private readonly db: Db;
  /** Trees known to be on this disk: the warm call path checks this set and nothing else. */
  private readonly present = new Set<string>();
  private readonly fetching = new Map<string, Promise<boolean>>();

  constructor(
    private readonly store: MetadataStore,
    private readonly blobs: BlobStore,
    private readonly files: AlgorithmFiles,
    /** Whether other servers share the file store (and so need the trees from it). */
    readonly shared: boolean,
  ) {
    this.db = store.db;
  }

  dir(algorithmId: number, kind: ArtifactKind, hash: string): string {
    return kind === 'source' ? this.files.sourceDir(algorithmId, hash) : this.files.buildDir(algorithmId, hash);
  }

  /** Sync and cheap: whether the tree is known to be here already (then `ensure` is not needed). */
  isPresent(algorithmId: number, kind: ArtifactKind, hash: string): boolean {
    return this.present.has(`${algorithmId}:${kind}:${hash}`);
  }

  /**
   * Makes sure the tree is on this disk, fetching it from the file store when another server
   * made it. False when it is nowhere (never stored, or this is one machine and it is gone).
   */
  async ensure(algorithmId: number, kind: ArtifactKind, hash: string): Promise<boolean> {
    const key = `${algorithmId}:${kind}:${hash}`;
    if (this.present.has(key)) return true;
    if (fs.existsSync(this.dir(algorithmId, kind, hash))) {
      this.present.add(key);
      return true;
    }
    if (!this.shared) return false;
    let pending = this.fetching.get(key);
    if (!pending) {
      pending = this.fetch(algorithmId, kind, hash).finally(() => this.fetching.delete(key));
      this.fetching.set(key, pending);
    }
    const found = await pending;
    if (found) this.present.add(key);
    return found;
  }

  private async fetch(algorithmId: number, kind: ArtifactKind, hash: string): Promise<boolean> {
    const row = await this.db
      .selectFrom('artifacts')
      .select(['blob_id', 'size', 'sha256'])
      .where('algorithm_id', '=', algorithmId)
      .where('kind', '=', kind)
      .where('hash', '=', hash)
      .executeTakeFirst();
    if (!row) return false;
    const target = this.dir(algorithmId, kind, hash);
    const scratch = await this.files.scratch(`fetch-${kind}-`);
    try {
      const source = await openBlobStream(this.blobs, row.blob_id, row.size);
      const digest = crypto.createHash('sha256');
      const hashing = new Transform({
        transform(chunk: Buffer, _enc, done) {
          digest.update(chunk);
          done(null, chunk);
        },
      });
      const tree = path.join(scratch, 'tree');
      await fs.promises.mkdir(tree);
      const unpack = tar(['-x', '-z', '-f', '-', '-C', tree, '--no-same-owner']);
      await pipeline(source, hashing, unpack.stdin);
      await unpack.done;
      if (digest.digest('hex') !== row.sha256) throw new Error(`the stored ${kind} ${hash} of algorithm ${algorithmId} does not match its checksum`);
      await fs.promises.mkdir(path.dirname(target), { recursive: true });
      try {
        await fs.promises.rename(tree, target);
      } catch (err) {
        // Another request of this server put it there first.
        if (!fs.existsSync(target)) throw err;
      }
      return true;
    } finally {
      await fs.promises.rm(scratch, { recursive: true, force: true });
    }
  }

  /** After a tree was made here: store it for the other servers (once per kind and hash). */
  async publish(algorithmId: number, kind: ArtifactKind, hash: string): Promise<void> {
    this.present.add(`${algorithmId}:${kind}:${hash}`);
    if (!this.shared) return;
    const known = await this.db.selectFrom('artifacts').select('blob_id').where('algorithm_id', '=', algorithmId).where('kind', '=', kind).where('hash', '=', hash).executeTakeFirst();
    if (known) return;
    const blobId = this.blobs.newId();
    await this.db.insertInto('pending_blobs').values({ blob_id: blobId, created_at: Date.now(), holder: this.store.instance }).execute();
    const digest = crypto.createHash('sha256');
    const hashing = new Transform({
      transform(chunk: Buffer, _enc, done) {
        digest.update(chunk);
        done(null, chunk);
      },
    });
    try {
      const pack = tar(['-c', '-z', '-f', '-', '--sort=name', '--numeric-owner', '--owner=0', '--group=0', '-C', this.dir(algorithmId, kind, hash), '.']);
      pack.stdin.end();
      const { size } = await this.blobs.put(blobId, pack.stdout.pipe(hashing), { maxBytes: MAX_ARTIFACT_BYTES });
      await pack.done;
      await this.store.write(async (trx) => {
        const ours = await trx.deleteFrom('pending_blobs').where('blob_id', '=', blobId).where('holder', '=', this.store.instance).executeTakeFirst();
        if (Number(ours.numDeletedRows) !== 1) throw new Error('the stored tree was claimed by a sweep while this server had lost the database');
        const raced = await trx.selectFrom('artifacts').select('blob_id').where('algorithm_id', '=', algorithmId).where('kind', '=', kind).where('hash', '=', hash).executeTakeFirst();
        if (raced) throw new Raced();
        await trx.insertInto('artifacts').values({ algorithm_id: algorithmId, kind, hash, blob_id: blobId, size, sha256: digest.digest('hex'), created_at: Date.now() }).execute();
      });
    } catch (err) {
      await this.blobs.delete(blobId).catch(() => undefined);
      await this.db.deleteFrom('pending_blobs').where('blob_id', '=', blobId).execute();
      if (!(err instanceof Raced)) throw err;
    }
  }

  /** This machine no longer has the algorithm's files (another server deleted it; they were pruned). */
  forget(algorithmId: number): void {
    for (const key of [...this.present]) if (key.startsWith(`${algorithmId}:`)) this.present.delete(key);
  }

  /** An algorithm was deleted: its stored trees go too (after its rows, so none is read again). */
  async removeAlgorithm(algorithmId: number): Promise<void> {
    this.forget(algorithmId);
    if (!this.shared) return;
    const ids = await this.store.write(async (trx) => {
      const rows = await trx.selectFrom('artifacts').select('blob_id').where('algorithm_id', '=', algorithmId).execute();
      if (rows.length === 0) return [];
      await trx.insertInto('pending_blobs').values(rows.map((r) => ({ blob_id: r.blob_id, created_at: Date.now(), holder: this.store.instance }))).execute();
      await trx.deleteFrom('artifacts').where('algorithm_id', '=', algorithmId).execute();
      return rows.map((r) => r.blob_id);
    });
    for (const id of ids) await this.blobs.delete(id);
    if (ids.length > 0) await this.db.deleteFrom('pending_blobs').where('blob_id', 'in', ids).execute();
  }

  /** At start: trees of algorithms deleted while their server was stopped mid-way. */
  async recover(): Promise<void> {
    const orphans = await this.db
      .selectFrom('artifacts')
      .select('algorithm_id')
      .distinct()
      .where(({ not, exists, selectFrom }) => not(exists(selectFrom('algorithms').select('algorithms.id').whereRef('algorithms.id', '=', 'artifacts.algorithm_id'))))
      .execute();
    for (const { algorithm_id } of orphans) await this.removeAlgorithm(algorithm_id);
  }
}

class Raced extends Error {}

/**
 * GNU tar on our own trees only (sources were checked on their way in by archive.ts, builds
 * are what we made of them). `done` settles when tar has exited: a stream that ended early is
 * only trusted once tar says it finished.
 */
function tar(args: string[]): { stdin: Writable; stdout: Readable; done: Promise<void> } {
  const child = spawn(TAR, args, { stdio: ['pipe', 'pipe', 'pipe'], env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' } });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr = (stderr + s).slice(-2000)));
  const done = new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => (code === 0 ? resolve() : reject(new Error(`tar ${args[0]} failed (${code ?? signal}): ${stderr.trim()}`))));
  });
  done.catch(() => undefined);
  return { stdin: child.stdin, stdout: child.stdout, done };
}
