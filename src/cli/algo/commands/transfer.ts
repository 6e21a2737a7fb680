/**
 * One file copied between a local path and a data URI, or between two data URIs, always
 * streamed (never gathered in memory, remote to remote never through the disk), and a small
 * pool that runs several at a time.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Transform, pipeline, type Readable } from 'node:stream';
import { pipeline as pipe } from 'node:stream/promises';
import { AlgohostError, ApiError, type AlgohostClient, type DataUri } from '../../../../client/src/index.ts';
import { CliError } from '../context.ts';
import { isNotFound, parentUri, plain } from './data-common.ts';

export type Loc = { kind: 'local'; path: string } | { kind: 'remote'; uri: DataUri };

export const show = (l: Loc): string => (l.kind === 'local' ? l.path : l.uri.uri);

export interface Job {
  from: Loc;
  to: Loc;
  /** Bytes, as the source's stat or listing gave them. */
  size: number;
}

/** Reads 1 MiB at a time, what the server's own streams use (docs/performance.md). */
const CHUNK = 1 << 20;

/**
 * Passes bytes through, telling `onBytes` how many went by. With `expected`, a stream that
 * ends short fails (a local file truncated while read), so that an upload announced with that
 * Content-Length is not left waiting for bytes that never come.
 */
function counter(onBytes: (n: number) => void, expected?: number): Transform {
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      if (expected !== undefined && seen > expected) return done(changed(seen, expected));
      onBytes(chunk.length);
      done(null, chunk);
    },
    flush(done) {
      if (expected !== undefined && seen !== expected) done(changed(seen, expected));
      else done();
    },
  });
}

const changed = (seen: number, expected: number) => new CliError(`the file changed while it was read (${expected} bytes expected, ${seen > expected ? 'more' : seen} read)`);

/** `source` through a counter; an error on either side destroys both (and so the upload). */
function counted(source: Readable, onBytes: (n: number) => void, expected?: number): Readable {
  return pipeline(source, counter(onBytes, expected), () => {});
}

/** Temporary files of downloads in progress (removed on failure, and on Ctrl-C by cp). */
export const partials = new Set<string>();

async function openRemote(client: AlgohostClient, from: DataUri, signal: AbortSignal): Promise<Readable> {
  try {
    return await client.file(from.uri).stream({ signal });
  } catch (err) {
    if (isNotFound(err)) throw new CliError(`no such file ${from.uri}`);
    if (err instanceof AlgohostError && !(err instanceof ApiError) && err.code === 'type_conflict') throw new CliError(`${from.uri} is a directory: use -r`);
    throw plain(err);
  }
}

async function upload(client: AlgohostClient, to: DataUri, body: Readable, size: number | undefined, signal: AbortSignal): Promise<void> {
  try {
    await client.file(to.uri).put(body, { size, signal });
  } catch (err) {
    body.destroy();
    if (isNotFound(err)) throw new CliError(`no such directory ${parentUri(to)}`);
    if (err instanceof ApiError && err.code === 'type_conflict') throw new CliError(`cannot write ${to.uri}: ${err.message}`);
    throw plain(err);
  }
}

/**
 * Copies one file. A download goes to a temporary file next to its destination, renamed into
 * place once complete, so an interrupted copy never leaves a truncated file under the real name.
 */
export async function copyFile(client: AlgohostClient, job: Job, onBytes: (n: number) => void, signal: AbortSignal): Promise<void> {
  const { from, to } = job;
  if (from.kind === 'local' && to.kind === 'remote') {
    const file = fs.createReadStream(from.path, { highWaterMark: CHUNK });
    return upload(client, to.uri, counted(file, onBytes, job.size), job.size, signal);
  }
  if (from.kind === 'remote' && to.kind === 'remote') {
    // Sent chunked: the listing's size may be stale by now, and a wrong length would stall the upload.
    const body = await openRemote(client, from.uri, signal);
    return upload(client, to.uri, counted(body, onBytes), undefined, signal);
  }
  if (from.kind === 'remote' && to.kind === 'local') {
    const body = await openRemote(client, from.uri, signal);
    const dir = path.dirname(to.path);
    const tmp = path.join(dir, `.${path.basename(to.path)}.algo-${process.pid}-${crypto.randomBytes(4).toString('hex')}.part`);
    partials.add(tmp);
    try {
      await pipe(body, counter(onBytes), fs.createWriteStream(tmp, { flags: 'wx' }), { signal });
      await fs.promises.rename(tmp, to.path).catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'EISDIR' || err.code === 'ENOTEMPTY' || err.code === 'EEXIST') throw new CliError(`${to.path} is a directory`);
        throw err;
      });
    } catch (err) {
      body.destroy();
      await fs.promises.rm(tmp, { force: true });
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' && (err as NodeJS.ErrnoException).path === tmp) throw new CliError(`no such directory ${dir}`);
      throw err;
    } finally {
      partials.delete(tmp);
    }
    return;
  }
  throw new Error('a local to local copy reached the transfer code');
}
