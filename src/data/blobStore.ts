import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { PassThrough, Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { AppError } from '../errors.ts';

export interface ByteRange {
  start: number;
  /** Inclusive, as in HTTP. */
  end: number;
}

export interface BlobWriteOptions {
  maxBytes: number;
  signal?: AbortSignal;
}

/**
 * Where file contents live, addressed by an opaque id. Ids are never reused: a changed file
 * gets a new blob, so a blob's bytes never change after `put` returns and an id doubles as a
 * strong ETag. Which blobs are referenced is the metadata store's business, not this one's.
 */
export interface BlobStore {
  /** Where the blobs are, for logs and /health (no secret). */
  readonly location: string;
  newId(): string;
  /** Streams `source` into a new blob; it becomes visible whole or not at all. */
  put(id: string, source: Readable, options: BlobWriteOptions): Promise<{ size: number }>;
  /**
   * Opens `length` bytes of a blob (from `range.start`, or 0) for reading: a small part comes
   * back whole as a Buffer, a larger one as a stream. Throws BlobMissingError when the blob
   * does not exist.
   */
  open(id: string, range: ByteRange | undefined, length: number): Promise<Readable | Buffer>;
  /** Removes a blob; removing one that does not exist is not an error. */
  delete(id: string): Promise<void>;
  /** Every blob's id, in no particular order (audits, moving a home, tests). */
  list(): AsyncIterable<string>;
  /** Removes leftovers of writes interrupted by a crash. */
  recover(): Promise<void>;
  /** At start: throws a ConfigError naming the setting when the store cannot be used. */
  check(): Promise<void>;
  /** Resolves when the store answers now; for /health. */
  ping(): Promise<void>;
  close(): void;
}

/**
 * Passes bytes through up to `maxBytes` and counts them; one byte more fails the stream with
 * payload_too_large (the upload is then abandoned, never stored cut short).
 */
export function byteLimit(maxBytes: number): Transform & { bytes: number } {
  const limit = new Transform({
    transform(chunk: Buffer, _enc, done) {
      limit.bytes += chunk.length;
      if (limit.bytes > maxBytes) {
        done(new AppError('payload_too_large', `the file is larger than the limit of ${maxBytes} bytes`));
      } else {
        done(null, chunk);
      }
    },
  }) as Transform & { bytes: number };
  limit.bytes = 0;
  return limit;
}

/** A blob's first `length` bytes as a stream, whether the store answered with a stream or (small) a Buffer. */
export async function openBlobStream(blobs: BlobStore, id: string, length: number): Promise<Readable> {
  const body = await blobs.open(id, undefined, length);
  if (!Buffer.isBuffer(body)) return body;
  const stream = new PassThrough();
  stream.end(body);
  return stream;
}

export class BlobMissingError extends Error {
  constructor(id: string) {
    super(`blob ${id} is missing`);
  }
}

/**
 * Blobs as files under `<root>/blobs/<2 hex>/<id>`. A write goes to `<root>/tmp`, is flushed
 * to disk, then renamed into place and the directory entry flushed: after a crash a blob is
 * either complete or absent, and what is left in tmp is removed on the next start.
 */
export class LocalBlobStore implements BlobStore {
  private readonly blobDir: string;
  private readonly tmpDir: string;
  private readonly madeDirs = new Set<string>();
  readonly location: string;

  constructor(root: string) {
    this.location = root;
    this.blobDir = path.join(root, 'blobs');
    this.tmpDir = path.join(root, 'tmp');
    fs.mkdirSync(this.blobDir, { recursive: true, mode: 0o700 });
    fs.mkdirSync(this.tmpDir, { recursive: true, mode: 0o700 });
  }

  newId(): string {
    return crypto.randomBytes(16).toString('hex');
  }

  private pathOf(id: string): string {
    if (!/^[0-9a-f]{32}$/.test(id)) throw new Error(`not a blob id: ${id}`);
    return path.join(this.blobDir, id.slice(0, 2), id);
  }

  async put(id: string, source: Readable, options: BlobWriteOptions): Promise<{ size: number }> {
    const final = this.pathOf(id);
    const tmp = path.join(this.tmpDir, `${id}.part`);
    const limit = byteLimit(options.maxBytes);
    try {
      await pipeline(source, limit, fs.createWriteStream(tmp, { flags: 'wx', mode: 0o600, flush: true, highWaterMark: STREAM_CHUNK }), {
        signal: options.signal,
      });
      const dir = path.dirname(final);
      if (!this.madeDirs.has(dir)) {
        // A new prefix directory must itself be on disk before a commit refers into it.
        if ((await fs.promises.mkdir(dir, { recursive: true, mode: 0o700 })) !== undefined) await fsyncDir(this.blobDir);
        this.madeDirs.add(dir);
      }
      await fs.promises.rename(tmp, final);
      await fsyncDir(dir);
    } catch (err) {
      await fs.promises.rm(tmp, { force: true });
      throw err;
    }
    return { size: limit.bytes };
  }

  async open(id: string, range: ByteRange | undefined, length: number): Promise<Readable | Buffer> {
    let fd: number;
    try {
      fd = await openFile(this.pathOf(id));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new BlobMissingError(id);
      throw err;
    }
    const start = range?.start ?? 0;
    if (length <= SMALL_READ) {
      try {
        const buf = Buffer.allocUnsafe(length);
        let got = 0;
        while (got < length) {
          const n = await readFile(fd, buf, got, length - got, start + got);
          if (n === 0) break;
          got += n;
        }
        return got === length ? buf : buf.subarray(0, got);
      } finally {
        fs.close(fd, () => undefined);
      }
    }
    // The classic fd stream: FileHandle streams read through promises, which costs about a
    // third of the throughput on large files.
    return fs.createReadStream('', { fd, start, end: start + length - 1, highWaterMark: STREAM_CHUNK });
  }

  async delete(id: string): Promise<void> {
    await fs.promises.rm(this.pathOf(id), { force: true });
  }

  async *list(): AsyncIterable<string> {
    for (const prefix of await fs.promises.readdir(this.blobDir)) {
      for (const name of await fs.promises.readdir(path.join(this.blobDir, prefix))) {
        if (/^[0-9a-f]{32}$/.test(name)) yield name;
      }
    }
  }

  async recover(): Promise<void> {
    for (const name of await fs.promises.readdir(this.tmpDir)) {
      await fs.promises.rm(path.join(this.tmpDir, name), { force: true, recursive: true });
    }
  }

  /** The directories were made (or found) in the constructor; writable is what counts. */
  async check(): Promise<void> {
    await fs.promises.access(this.tmpDir, fs.constants.W_OK);
  }

  async ping(): Promise<void> {
    await fs.promises.access(this.blobDir, fs.constants.W_OK);
  }

  close(): void {}
}

/**
 * Chunk size of file streams. Larger chunks mean fewer allocations and far less garbage
 * collection per transfer (64 KiB chunks left big transfers at ~75% of a bare server's speed,
 * 256 KiB at ~82%, 1 MiB at 94-113%: docs/performance.md); the cost is this much buffered per
 * transfer and direction.
 */
const STREAM_CHUNK = 1024 * 1024;

/** Below this many bytes a read is answered from one buffer: no stream to set up. */
const SMALL_READ = 64 * 1024;

const openFile = promisify(fs.open) as (path: string, flags?: string) => Promise<number>;
const readFile = (fd: number, buf: Buffer, offset: number, length: number, position: number) =>
  new Promise<number>((resolve, reject) => fs.read(fd, buf, offset, length, position, (err, n) => (err ? reject(err) : resolve(n))));

async function fsyncDir(dir: string): Promise<void> {
  const fd = await fs.promises.open(dir, 'r');
  try {
    await fd.sync();
  } finally {
    await fd.close();
  }
}
