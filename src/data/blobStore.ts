import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Transform, type Readable } from 'node:stream';
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
  newId(): string;
  /** Streams `source` into a new blob; it becomes visible whole or not at all. */
  put(id: string, source: Readable, options: BlobWriteOptions): Promise<{ size: number }>;
  /** Opens a blob for reading; throws BlobMissingError when it does not exist. */
  open(id: string, range?: ByteRange): Promise<Readable>;
  /** Removes a blob; removing one that does not exist is not an error. */
  delete(id: string): Promise<void>;
  /** Removes leftovers of writes interrupted by a crash. */
  recover(): Promise<void>;
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

  constructor(root: string) {
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
    let size = 0;
    const limit = new Transform({
      transform(chunk: Buffer, _enc, done) {
        size += chunk.length;
        if (size > options.maxBytes) {
          done(new AppError('payload_too_large', `the file is larger than the limit of ${options.maxBytes} bytes`));
        } else {
          done(null, chunk);
        }
      },
    });
    try {
      await pipeline(source, limit, fs.createWriteStream(tmp, { flags: 'wx', mode: 0o600, flush: true }), {
        signal: options.signal,
      });
      const dir = path.dirname(final);
      if (!this.madeDirs.has(dir)) {
        await fs.promises.mkdir(dir, { recursive: true, mode: 0o700 });
        this.madeDirs.add(dir);
      }
      await fs.promises.rename(tmp, final);
      await fsyncDir(dir);
    } catch (err) {
      await fs.promises.rm(tmp, { force: true });
      throw err;
    }
    return { size };
  }

  async open(id: string, range?: ByteRange): Promise<Readable> {
    let handle: fs.promises.FileHandle;
    try {
      handle = await fs.promises.open(this.pathOf(id), 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new BlobMissingError(id);
      throw err;
    }
    return handle.createReadStream(range ? { start: range.start, end: range.end } : {});
  }

  async delete(id: string): Promise<void> {
    await fs.promises.rm(this.pathOf(id), { force: true });
  }

  async recover(): Promise<void> {
    for (const name of await fs.promises.readdir(this.tmpDir)) {
      await fs.promises.rm(path.join(this.tmpDir, name), { force: true, recursive: true });
    }
  }
}

async function fsyncDir(dir: string): Promise<void> {
  const fd = await fs.promises.open(dir, 'r');
  try {
    await fd.sync();
  } finally {
    await fd.close();
  }
}
