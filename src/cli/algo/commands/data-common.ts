/**
 * What the data commands share: telling data URIs from local paths, what is at a URI, turning
 * the server's refusals into messages that name the URI as the user typed it, per-argument
 * failures, and writing to a stdout that may be a closed pipe.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { Writable } from 'node:stream';
import { AlgohostError, AlgorithmError, ApiError, NetworkError, parseDataUri, type AlgohostClient, type DataUri } from '../../../../client/src/index.ts';
import { CliError, UsageError, type Context } from '../context.ts';

/** `scheme://` or `scheme+label://`: a data URI (data, objstore, filehost, s3, dropbox). */
const DATA_URI = /^[A-Za-z][A-Za-z0-9]*(\+[A-Za-z0-9-]*)?:\/\//;

export function isDataUri(arg: string): boolean {
  return DATA_URI.test(arg);
}

/**
 * A data URI from the command line. Where only data can be meant (ls, rm...), a path
 * without a scheme is hosted data, as in the original CLI. An unknown scheme is a usage error.
 */
export function dataUri(arg: string): DataUri {
  try {
    return parseDataUri(arg);
  } catch (err) {
    if (err instanceof AlgohostError && err.code === 'invalid_uri') throw new UsageError(err.message);
    throw err;
  }
}

/** The URI of `rel` (slash-separated) inside the directory `dir`. */
export function joinUri(dir: DataUri, rel: string): string {
  if (rel === '') return dir.uri;
  return dir.path === '' ? `${dir.connector}://${rel}` : `${dir.uri}/${rel}`;
}

/** The last segment of a data URI's path ('' at a source's root). */
export function baseName(uri: DataUri): string {
  return uri.path.slice(uri.path.lastIndexOf('/') + 1);
}

/** The directory holding `uri` (itself at a source's root). */
export function parentUri(uri: DataUri): string {
  const slash = uri.path.lastIndexOf('/');
  return `${uri.connector}://${slash < 0 ? '' : uri.path.slice(0, slash)}`;
}

/** Command-line flags; a flag the command does not know is a usage error. */
export function flags<T extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: T) {
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message.replace(/\. To specify a positional argument.*$/s, ''));
  }
}

export type Remote =
  | { type: 'file'; size: number; lastModified: Date | undefined }
  | { type: 'dir' }
  | { type: 'missing' };

/** What is at a data URI: a file (with its size), a directory, or nothing the caller may read. */
export async function remoteKind(client: AlgohostClient, uri: string, signal?: AbortSignal): Promise<Remote> {
  try {
    const info = await client.file(uri).stat({ signal });
    return { type: 'file', size: info.size, lastModified: info.lastModified };
  } catch (err) {
    // The client's own type_conflict (not the server's 409): HEAD said "directory".
    if (err instanceof AlgohostError && !(err instanceof ApiError) && err.code === 'type_conflict') return { type: 'dir' };
    if (err instanceof ApiError && err.status === 404 && err.code === 'not_found') return { type: 'missing' };
    throw err;
  }
}

/** A 404 `not_found` from the server. */
export function isNotFound(err: unknown): boolean {
  return err instanceof ApiError && err.status === 404 && err.code === 'not_found';
}

/**
 * Failures that end the whole command at once (the key, the server, the network): the
 * command's other arguments would fail the same way. The rest concern one argument.
 */
export function isFatal(err: unknown): boolean {
  if (err instanceof CliError) return false;
  if (err instanceof ApiError) return err.status === 401 || err.status === 503 || err.code === 'key_permission_denied';
  const e = err as NodeJS.ErrnoException;
  if (e && typeof e.code === 'string' && e.syscall) return false; // a local file's problem
  return true;
}

/**
 * The client's own refusals (a bad URI, a file where a directory was expected...) as a
 * CliError, which main reports as a plain line; other errors as they are.
 */
export function plain(err: unknown): unknown {
  if (err instanceof AlgohostError && !(err instanceof ApiError) && !(err instanceof NetworkError) && !(err instanceof AlgorithmError)) {
    return new CliError(err.message);
  }
  return err;
}

/** One line about a failure that concerns one argument. */
export function describe(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  if (e && typeof e.code === 'string' && e.syscall && !(err instanceof AlgohostError)) {
    const what: Record<string, string> = {
      ENOENT: 'no such file or directory', EACCES: 'permission denied', EISDIR: 'is a directory',
      ENOTDIR: 'not a directory', ENOSPC: 'no space left on the device', EEXIST: 'already exists',
    };
    return `${e.path ?? ''}: ${what[e.code] ?? e.message}`;
  }
  return (err as Error).message;
}

/**
 * Runs `each` on every argument in turn, going on after a failure that concerns one argument
 * (as rm(1) and cat(1) do). With one argument its failure is the command's; with several,
 * each is noted as it happens and the command fails at the end with a count.
 */
export async function eachArg<T>(ctx: Context, command: string, args: T[], verb: string, each: (arg: T) => Promise<void>): Promise<void> {
  let failed = 0;
  for (const arg of args) {
    try {
      await each(arg);
    } catch (caught) {
      const err = plain(caught);
      if (isFatal(err) || args.length === 1) throw err;
      ctx.note(`algo ${command}: ${describe(err)}`);
      failed++;
    }
  }
  if (failed > 0) throw new CliError(`${failed} of ${args.length} not ${verb}`);
}

/**
 * stdout for data that may be large: waits when the pipe is full, and stops quietly (as if
 * done) once the reader went away (`algo cat big | head`).
 */
export class Out {
  /** The reader went away: nothing more is written. */
  closed = false;
  private failure: Error | undefined;

  constructor(private readonly stream: Writable) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      this.closed = true;
      if (err.code !== 'EPIPE') this.failure = err;
    });
  }

  async write(data: string | Buffer): Promise<void> {
    if (this.failure) throw this.failure;
    if (this.closed) return;
    if (this.stream.write(data)) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        this.stream.off('drain', done);
        this.stream.off('close', done);
        this.stream.off('error', done);
        resolve();
      };
      this.stream.on('drain', done);
      this.stream.on('close', done);
      this.stream.on('error', done);
    });
    if (this.failure) throw this.failure;
  }
}
