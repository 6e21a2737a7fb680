import http from 'node:http';
import https from 'node:https';
import type net from 'node:net';
import { Readable } from 'node:stream';
import {
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { state as sdkNotices } from '@aws-sdk/core/client';
import type { ByteRange } from '../blobStore.ts';
import { contentTypeFor } from '../contentType.ts';
import { PooledReadHandler } from './pooledReads.ts';
import { deletedDirectories, networkError, RemoteError, type DeletedEntry, type RemotePage, type RemoteStat, type RemoteStorage, type WrittenFile } from './remote.ts';

/** What an objstore account's `cred_data` holds. */
export interface S3Credentials {
  endpoint?: string;
  region?: string;
  access_key_id: string;
  secret_access_key: string;
  force_path_style?: boolean;
  /** Temporary credentials' token (hosted file contents on S3 with an assumed role). */
  session_token?: string;
}

export interface S3Options {
  /** Bytes per part of a multipart upload (S3's minimum is 5 MiB). */
  partSize?: number;
  /** Parts uploaded at once; memory held by one upload is about partSize × (queueSize + 1). */
  queueSize?: number;
  /** Socket inactivity limit of the HTTP client, ms. */
  socketTimeoutMs?: number;
  /** Host name resolution for new connections (the server's egress rule). */
  lookup?: net.LookupFunction;
  /**
   * Reads of at least this many bytes go through the pooled transport (pooledReads.ts) instead
   * of the SDK's own: hosted file contents only, whose endpoint is the operator's.
   */
  pooledReadsFrom?: number;
}

const MIB = 1024 * 1024;

// The SDK is pinned (package.json) to releases that run on Node 20; its notice that later
// releases will not would otherwise land on every server's stderr at its first S3 request,
// and in the middle of a one-line start-up error.
sdkNotices.warningEmitted = true;

/**
 * objstore:// over the S3 protocol: AWS, MinIO, Ceph, R2, anything with an endpoint and
 * path-style addressing. The first segment is a bucket; directories are key prefixes ending
 * in "/", and a directory made through us is a zero-byte marker object named "<prefix>/".
 * Buckets are neither created nor deleted through an account: that is the provider console's job.
 */
export class S3Storage implements RemoteStorage {
  readonly implicitDirectoriesFrom = 2;
  private readonly client: S3Client;
  /** The same client on the pooled transport, for large reads (S3Options.pooledReadsFrom). */
  private readonly bulkClient: S3Client | undefined;
  private readonly pooledReadsFrom: number;
  private readonly partSize: number;
  private readonly queueSize: number;

  constructor(credentials: S3Credentials, options: S3Options = {}) {
    const config: S3ClientConfig = {
      ...(credentials.endpoint ? { endpoint: credentials.endpoint } : {}),
      region: credentials.region ?? 'us-east-1',
      forcePathStyle: credentials.force_path_style ?? Boolean(credentials.endpoint),
      credentials: {
        accessKeyId: credentials.access_key_id,
        secretAccessKey: credentials.secret_access_key,
        ...(credentials.session_token ? { sessionToken: credentials.session_token } : {}),
      },
      // Since early 2025 the SDK adds CRC32 checksums and aws-chunked bodies by default, which
      // many S3-compatible servers do not understand; ask for checksums only where S3 requires them.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      // One retry for a dropped connection; our own deadline bounds the whole request anyway.
      maxAttempts: 2,
    };
    this.client = new S3Client({
      ...config,
      requestHandler: {
        connectionTimeout: 10_000,
        requestTimeout: options.socketTimeoutMs ?? 60_000,
        ...(options.lookup
          ? { httpAgent: new http.Agent({ keepAlive: true, maxSockets: 50, lookup: options.lookup }), httpsAgent: new https.Agent({ keepAlive: true, maxSockets: 50, lookup: options.lookup }) }
          : {}),
      },
    });
    this.pooledReadsFrom = options.pooledReadsFrom ?? Infinity;
    this.bulkClient =
      options.pooledReadsFrom === undefined || options.lookup
        ? undefined
        : new S3Client({
            ...config,
            requestHandler: new PooledReadHandler({ connectionTimeoutMs: 10_000, socketTimeoutMs: options.socketTimeoutMs ?? 60_000 }) as S3ClientConfig['requestHandler'],
          });
    this.partSize = Math.max(5 * MIB, options.partSize ?? 8 * MIB);
    this.queueSize = options.queueSize ?? 2;
  }

  close(): void {
    this.client.destroy();
    this.bulkClient?.destroy();
  }

  private async send<T>(signal: AbortSignal, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (err) {
      throw translate(err, signal);
    }
  }

  async stat(path: string[], signal: AbortSignal): Promise<RemoteStat | undefined> {
    if (path.length === 0) return { kind: 'dir' };
    const [bucket, ...rest] = path as [string, ...string[]];
    if (rest.length === 0) {
      try {
        await this.send(signal, () => this.client.send(new HeadBucketCommand({ Bucket: bucket }), { abortSignal: signal }));
        return { kind: 'dir' };
      } catch (err) {
        if (err instanceof RemoteError && err.kind === 'not_found') return undefined;
        throw err;
      }
    }
    const key = rest.join('/');
    try {
      const head = await this.send(signal, () => this.client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }), { abortSignal: signal }));
      return {
        kind: 'file',
        size: head.ContentLength ?? 0,
        modified: head.LastModified?.getTime() ?? 0,
        etag: head.ETag ?? `${head.ContentLength}-${head.LastModified?.getTime()}`,
        ...(head.ContentType ? { contentType: head.ContentType } : {}),
      };
    } catch (err) {
      if (!(err instanceof RemoteError && err.kind === 'not_found')) throw err;
    }
    // Not an object: a directory if any key has it as a prefix (its marker object included).
    const probe = await this.send(signal, () =>
      this.client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `${key}/`, MaxKeys: 1 }), { abortSignal: signal }),
    );
    return (probe.KeyCount ?? probe.Contents?.length ?? 0) > 0 ? { kind: 'dir' } : undefined;
  }

  async list(dir: string[], token: string | undefined, limit: number, signal: AbortSignal): Promise<RemotePage> {
    if (dir.length === 0) {
      // Buckets: one page (the classic ListBuckets has no paging, and S3-compatible servers rarely do).
      const out = await this.send(signal, () => this.client.send(new ListBucketsCommand({}), { abortSignal: signal }));
      const folders = (out.Buckets ?? []).map((b) => b.Name).filter((n): n is string => typeof n === 'string' && n !== '');
      return { folders: folders.sort(), files: [] };
    }
    const [bucket, ...rest] = dir as [string, ...string[]];
    const prefix = rest.length === 0 ? '' : `${rest.join('/')}/`;
    const out = await this.send(signal, () =>
      this.client.send(
        new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, Delimiter: '/', MaxKeys: Math.min(1000, Math.max(1, limit)), ContinuationToken: token }),
        { abortSignal: signal },
      ),
    );
    const folders: string[] = [];
    for (const p of out.CommonPrefixes ?? []) {
      const name = p.Prefix?.slice(prefix.length, -1);
      // "a//b" style keys give an empty name: not addressable through a data path, so not listed.
      if (name) folders.push(name);
    }
    const files: RemotePage['files'] = [];
    let sawMarker = false;
    for (const o of out.Contents ?? []) {
      if (o.Key === prefix) {
        sawMarker = true; // the directory's own marker object
        continue;
      }
      const name = o.Key?.slice(prefix.length);
      if (name) files.push({ name, size: o.Size ?? 0, modified: o.LastModified?.getTime() ?? 0 });
    }
    if (token === undefined && prefix !== '' && folders.length === 0 && files.length === 0 && !sawMarker && !out.IsTruncated) {
      throw new RemoteError('not_found', 'no such folder');
    }
    return { folders, files, ...(out.IsTruncated && out.NextContinuationToken ? { next: out.NextContinuationToken } : {}) };
  }

  async read(path: string[], range: ByteRange | undefined, signal: AbortSignal): Promise<Readable> {
    const [bucket, ...rest] = path as [string, ...string[]];
    const client = this.bulkClient && range && range.end - range.start + 1 >= this.pooledReadsFrom ? this.bulkClient : this.client;
    const out = await this.send(signal, () =>
      client.send(
        new GetObjectCommand({ Bucket: bucket, Key: rest.join('/'), ...(range ? { Range: `bytes=${range.start}-${range.end}` } : {}) }),
        { abortSignal: signal },
      ),
    );
    const body = out.Body;
    if (!(body instanceof Readable)) throw new RemoteError('bad_answer', 'the object came without a readable body');
    if (range && out.ContentRange && !out.ContentRange.startsWith(`bytes ${range.start}-${range.end}/`)) {
      body.destroy();
      throw new RemoteError('bad_answer', `asked for bytes ${range.start}-${range.end}, got ${out.ContentRange}`);
    }
    return body;
  }

  async write(path: string[], body: Readable, signal: AbortSignal): Promise<WrittenFile> {
    if (path.length < 2) throw new RemoteError('invalid', 'files live in a bucket: name the bucket, then the file');
    const [bucket, ...rest] = path as [string, ...string[]];
    // lib-storage sends one PutObject when the body fits in one part, else a multipart
    // upload; a failed or aborted multipart upload is aborted, so no parts are left behind.
    const upload = new Upload({
      client: this.client,
      params: { Bucket: bucket, Key: rest.join('/'), Body: body, ContentType: contentTypeFor(rest[rest.length - 1]!) },
      partSize: this.partSize,
      queueSize: this.queueSize,
      leavePartsOnError: false,
    });
    const abort = () => void upload.abort().catch(() => undefined);
    signal.addEventListener('abort', abort, { once: true });
    // A body that fails (client gone, size limit) must fail the upload, not end it early.
    const failed = new Promise<never>((_, reject) => body.once('error', reject));
    failed.catch(() => undefined);
    try {
      // PutObject and CompleteMultipartUpload both answer the object's ETag.
      const done = await this.send(signal, () => Promise.race([upload.done(), failed]));
      return typeof done.ETag === 'string' && done.ETag !== '' ? { etag: done.ETag } : {};
    } catch (err) {
      abort();
      throw err;
    } finally {
      signal.removeEventListener('abort', abort);
    }
  }

  async mkdir(path: string[], signal: AbortSignal): Promise<void> {
    if (path.length < 2) throw new RemoteError('invalid', 'buckets are not created through a connected account; create the bucket with your storage provider');
    const [bucket, ...rest] = path as [string, ...string[]];
    await this.send(signal, () => this.client.send(new PutObjectCommand({ Bucket: bucket, Key: `${rest.join('/')}/`, Body: new Uint8Array(0), ContentLength: 0 }), { abortSignal: signal }));
  }

  async deleteFile(path: string[], signal: AbortSignal): Promise<void> {
    const [bucket, ...rest] = path as [string, ...string[]];
    await this.send(signal, () => this.client.send(new DeleteObjectCommand({ Bucket: bucket, Key: rest.join('/') }), { abortSignal: signal }));
  }

  async deleteDir(path: string[], signal: AbortSignal, deleted?: (entries: DeletedEntry[]) => Promise<void>): Promise<number> {
    if (path.length < 2) throw new RemoteError('invalid', 'buckets are not deleted through a connected account; delete the bucket with your storage provider');
    const [bucket, ...rest] = path as [string, ...string[]];
    const prefix = `${rest.join('/')}/`;
    let files = 0;
    let token: string | undefined;
    // The directories seen, told once the last key has gone (only when someone asks).
    const dirs = new Map<string, string[]>();
    // Page by page: list up to 1000 keys, delete them in one request, go on.
    do {
      const page = await this.send(signal, () =>
        this.client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, MaxKeys: 1000, ContinuationToken: token }), { abortSignal: signal }),
      );
      const objects = (page.Contents ?? []).filter((o): o is typeof o & { Key: string } => typeof o.Key === 'string');
      if (objects.length > 0) {
        const out = await this.send(signal, () =>
          this.client.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: objects.map(({ Key }) => ({ Key })), Quiet: true } }), { abortSignal: signal }),
        );
        const errors = out.Errors ?? [];
        const failed = new Set(errors.map((e) => e.Key));
        // An error that names no key leaves unknown what went: nothing of the batch is told then.
        if (deleted && !failed.has(undefined)) {
          // What went, even when some of the batch did not: told before the failure is.
          const gone: DeletedEntry[] = [];
          for (const o of objects) {
            if (failed.has(o.Key)) continue;
            const segments = [bucket, ...o.Key.split('/')];
            // Keys with empty segments ("a//b") are not addressable through a data path: not told.
            if (o.Key.endsWith('/')) {
              segments.pop();
              if (!segments.includes('')) dirs.set(segments.join('/'), segments);
            } else if (!segments.includes('')) {
              gone.push({ kind: 'file', path: segments, size: o.Size ?? 0, ...(o.ETag ? { etag: o.ETag } : {}) });
              const dir = segments.slice(0, -1);
              dirs.set(dir.join('/'), dir);
            }
          }
          if (gone.length > 0) await deleted(gone);
        }
        if (errors.length > 0) {
          const first = errors[0]!;
          throw new RemoteError(first.Code === 'AccessDenied' ? 'denied' : 'bad_answer', `${errors.length} objects could not be deleted (${first.Code ?? 'error'})`);
        }
        files += objects.filter((o) => !o.Key.endsWith('/')).length;
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    if (deleted) await deleted(deletedDirectories(path, dirs.values()));
    return files;
  }
}

/** S3's answers in the contract's terms; never the request's signature or credentials. */
function translate(err: unknown, signal: AbortSignal): RemoteError {
  if (err instanceof RemoteError) return err;
  if (err instanceof S3ServiceException || (typeof err === 'object' && err !== null && '$metadata' in err && (err as S3ServiceException).$metadata?.httpStatusCode)) {
    const e = err as S3ServiceException;
    const status = e.$metadata?.httpStatusCode ?? 0;
    // A HEAD answer has no body, so its error has no S3 code: the status says it all then.
    const code = e.name && e.name !== 'Unknown' && e.name !== String(status) ? e.name : undefined;
    const what = code ? `${code}, HTTP ${status}` : `HTTP ${status}`;
    if (status === 404 || code === 'NoSuchKey' || code === 'NoSuchBucket' || code === 'NotFound') return new RemoteError('not_found', what, { cause: err });
    if (status === 401 || status === 403) return new RemoteError('denied', what, { cause: err });
    if (status === 413 || code === 'EntityTooLarge') return new RemoteError('too_large', what, { cause: err });
    if (status === 503 || code === 'SlowDown') return new RemoteError('bad_answer', `${what}: the service is busy, try again`, { cause: err });
    if (status > 0) return new RemoteError('bad_answer', what, { cause: err });
  }
  return networkError(err, signal);
}
