import crypto from 'node:crypto';
import type { Readable } from 'node:stream';
import { AppError } from '../errors.ts';
import { ConfigError, type S3BlobsConfig } from '../config.ts';
import { BlobMissingError, byteLimit, type BlobStore, type BlobWriteOptions, type ByteRange } from './blobStore.ts';
import { RemoteError } from './connectors/remote.ts';
import { S3Storage, type S3Options } from './connectors/s3.ts';

/** Below this many bytes a read is answered from one buffer (as on disk). */
const SMALL_READ = 64 * 1024;
/** From this many bytes a read comes on a connection of its own through connectors/pooledReads.ts. */
const POOLED_READS_FROM = 1024 * 1024;

/**
 * A signal that never aborts, one per operation: the storage and the SDK listen on it for as
 * long as the operation lasts, and one shared signal would collect a listener per concurrent
 * operation (Node warns of a leak past ten).
 */
const never = () => new AbortController().signal;

/**
 * Hosted file contents in an S3-compatible bucket, at `<prefix>blobs/<2 hex>/<id>`, through
 * the same S3 client as objstore:// accounts. An object becomes visible only when its upload
 * completes (one PutObject, or CompleteMultipartUpload for a large one), so a blob is whole or
 * absent, as on disk. (A lax server may keep a cut-off upload's bytes, as s3rver does; such a
 * blob is still pending, never referenced, and swept.) A multipart upload cut short by an error is aborted at once; one cut
 * short by the process dying leaves invisible parts behind, which the bucket's
 * AbortIncompleteMultipartUpload lifecycle rule removes (docs/deployment.md). Blobs that a
 * crash left unreferenced are found through the metadata store (pending_blobs), as on disk.
 */
export class S3BlobStore implements BlobStore {
  readonly location: string;
  private readonly storage: S3Storage;

  constructor(
    private readonly config: S3BlobsConfig,
    options: S3Options = {},
  ) {
    this.location = config.display;
    this.storage = new S3Storage(
      {
        ...(config.endpoint ? { endpoint: config.endpoint } : {}),
        region: config.region,
        force_path_style: config.forcePathStyle,
        access_key_id: config.accessKeyId,
        secret_access_key: config.secretAccessKey,
        ...(config.sessionToken ? { session_token: config.sessionToken } : {}),
      },
      // Large reads through the pooled transport: a relayed file costs a fraction of the CPU.
      { pooledReadsFrom: POOLED_READS_FROM, ...options },
    );
  }

  newId(): string {
    return crypto.randomBytes(16).toString('hex');
  }

  private pathOf(id: string): string[] {
    if (!/^[0-9a-f]{32}$/.test(id)) throw new Error(`not a blob id: ${id}`);
    return [this.config.bucket, ...`${this.config.prefix}blobs/${id.slice(0, 2)}/${id}`.split('/')];
  }

  async put(id: string, source: Readable, options: BlobWriteOptions): Promise<{ size: number }> {
    const counted = byteLimit(options.maxBytes);
    // The body's own failure (the client went away, the size limit) is what the upload answers,
    // not the store's wording of it.
    let bodyError: Error | undefined;
    counted.on('error', (err) => (bodyError ??= err));
    source.on('error', (err) => {
      bodyError ??= err;
      counted.destroy(err);
    });
    source.pipe(counted);
    try {
      await this.storage.write(this.pathOf(id), counted, options.signal ?? never());
    } catch (err) {
      source.unpipe(counted);
      counted.destroy();
      throw bodyError ?? this.translate(err, id);
    }
    return { size: counted.bytes };
  }

  async open(id: string, range: ByteRange | undefined, length: number): Promise<Readable | Buffer> {
    let body: Readable;
    try {
      body = await this.storage.read(this.pathOf(id), range ?? (length > 0 ? { start: 0, end: length - 1 } : undefined), never());
    } catch (err) {
      throw this.translate(err, id);
    }
    if (length > SMALL_READ) return body;
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  async delete(id: string): Promise<void> {
    try {
      await this.storage.deleteFile(this.pathOf(id), never());
    } catch (err) {
      if (err instanceof RemoteError && err.kind === 'not_found') return;
      throw this.translate(err, id);
    }
  }

  async *list(): AsyncIterable<string> {
    const root = [this.config.bucket, ...`${this.config.prefix}blobs`.split('/')];
    const pages = async function* (storage: S3Storage, dir: string[], signal: AbortSignal) {
      let token: string | undefined;
      do {
        let page;
        try {
          page = await storage.list(dir, token, 1000, signal);
        } catch (err) {
          if (err instanceof RemoteError && err.kind === 'not_found') return; // nothing stored yet
          throw err;
        }
        yield page;
        token = page.next;
      } while (token);
    };
    for await (const top of pages(this.storage, root, never())) {
      for (const prefix of top.folders) {
        for await (const page of pages(this.storage, [...root, prefix], never())) {
          for (const f of page.files) if (/^[0-9a-f]{32}$/.test(f.name)) yield f.name;
        }
      }
    }
  }

  /** Nothing of ours is half-written in a bucket (see the class comment). */
  async recover(): Promise<void> {}

  /** At start: the bucket exists and takes our credentials; else one line naming the setting. */
  async check(): Promise<void> {
    const where = `ALGOHOST_BLOBS (${this.config.display})`;
    let stat;
    try {
      stat = await this.storage.stat([this.config.bucket], AbortSignal.timeout(10_000));
    } catch (err) {
      const e = err as RemoteError;
      if (e.kind === 'denied') throw new ConfigError(`${where}: the store refused the credentials (${e.message}); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY`);
      throw new ConfigError(`${where}: the store cannot be reached: ${e.message}`);
    }
    if (!stat) throw new ConfigError(`${where}: there is no bucket "${this.config.bucket}"; create it first`);
  }

  async ping(): Promise<void> {
    try {
      if (!(await this.storage.stat([this.config.bucket], AbortSignal.timeout(5_000)))) throw new Error(`no bucket ${this.config.bucket}`);
    } catch (err) {
      throw this.translate(err, undefined);
    }
  }

  close(): void {
    this.storage.close();
  }

  /** The store's failures in the contract's terms: a missing blob, our size limit, or 503. */
  private translate(err: unknown, id: string | undefined): Error {
    if (err instanceof AppError || err instanceof BlobMissingError) return err;
    if (id !== undefined && err instanceof RemoteError && err.kind === 'not_found') return new BlobMissingError(id);
    // The body failed on its own account (the client went away, the size limit): its error stands.
    if (!(err instanceof RemoteError)) return err as Error;
    return new AppError('storage_unavailable', `the file store is not answering (${err.message}); try again shortly`, undefined, err);
  }
}
