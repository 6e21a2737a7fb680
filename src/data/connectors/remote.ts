import type { Readable } from 'node:stream';
import type { ByteRange } from '../blobStore.ts';
import { ADDRESS_REFUSED } from '../../addressRule.ts';

/**
 * What a provider of connected storage (S3, WebDAV, Dropbox) implements: plain storage
 * operations on paths given as validated segments relative to the account's root, nothing
 * more. Everything the contract adds on top (the account's path restriction, read-only
 * accounts, paging markers, the listing shape, error codes and messages, size limits, the
 * parent checks that make every source behave like hosted data) lives once, in
 * `ExternalConnector` (external.ts). See docs/connectors.md.
 *
 * Every method takes an AbortSignal (the request's, plus the connector's timeout) and must
 * stop its network work when it fires. Providers throw `RemoteError` for the outcomes the
 * contract distinguishes; any other error is reported as the provider answering unexpectedly.
 * Provider errors must never carry credentials (no signed URLs, no tokens, no passwords).
 */
export interface RemoteStorage {
  /**
   * Object storage has no real directories: a key's prefixes exist as soon as the key does.
   * Paths this deep or deeper (S3: 2, anything under a bucket) need no directory before a
   * file is written into them. Undefined: every directory must exist first, as in hosted data.
   */
  readonly implicitDirectoriesFrom?: number;
  /** What is at `path` (`[]` is the account's root, always a directory); undefined if nothing. */
  stat(path: string[], signal: AbortSignal): Promise<RemoteStat | undefined>;
  /**
   * One page of directory `dir`'s direct children, in the provider's own order, starting at
   * `token` (undefined for the first page). `limit` is a hint; a page may hold more. The
   * token of a page must stay valid for repeating that same page (the connector re-reads a
   * page when it splits it), and `next` is present exactly when more entries remain.
   * A missing directory throws RemoteError('not_found').
   */
  list(dir: string[], token: string | undefined, limit: number, signal: AbortSignal): Promise<RemotePage>;
  /** Opens a file's bytes (only `range`, inclusive, when given). */
  read(path: string[], range: ByteRange | undefined, signal: AbortSignal): Promise<Readable>;
  /**
   * Creates or replaces file `path` with the bytes of `body`, streamed: never the whole file
   * in memory. When `body` errors (the client went away, or the size limit was passed), the
   * provider aborts and nothing is left half-written where the provider can avoid it.
   * Answers what the provider said of the file it stored (its ETag, its size): the event of
   * the write carries it.
   */
  write(path: string[], body: Readable, signal: AbortSignal): Promise<WrittenFile>;
  /** Creates directory `path`; its parent exists (checked by the connector). */
  mkdir(path: string[], signal: AbortSignal): Promise<void>;
  /** Deletes file `path`. */
  deleteFile(path: string[], signal: AbortSignal): Promise<void>;
  /**
   * Deletes directory `path` and everything in it; answers how many files it held. With
   * `deleted`, tells it what went, once it has gone: the files (in as many calls as the
   * provider deletes them in), then the directories, deepest first, `path` last. What a
   * failure left in place is not told; an error thrown by `deleted` stops the delete.
   */
  deleteDir(path: string[], signal: AbortSignal, deleted?: (entries: DeletedEntry[]) => Promise<void>): Promise<number>;
}

export interface RemoteFile {
  kind: 'file';
  size: number;
  /** Milliseconds since the epoch. */
  modified: number;
  /** Changes whenever the content does (S3 ETag, WebDAV getetag, Dropbox content_hash). */
  etag: string;
  /** The provider's content type, when it keeps one. */
  contentType?: string;
}

export type RemoteStat = RemoteFile | { kind: 'dir' };

/** What a provider said of a file it stored; each field only if it said it. */
export interface WrittenFile {
  /** As the provider spells it (quoted or not): the value its stat answers afterwards. */
  etag?: string;
  size?: number;
}

/** A file or directory a recursive delete removed, by its path from the account's root. */
export type DeletedEntry = { kind: 'file'; path: string[]; size: number; etag?: string } | { kind: 'dir'; path: string[] };

/**
 * The directories of a deleted tree rooted at `top`, from the directories seen in it (each
 * given at, or under, `top`): those and every directory between them and `top`, deepest first,
 * then `top` itself, each once.
 */
export function deletedDirectories(top: string[], dirs: Iterable<string[]>): DeletedEntry[] {
  const found = new Map<string, string[]>();
  for (const d of dirs) {
    for (let depth = top.length + 1; depth <= d.length; depth++) {
      const dir = d.slice(0, depth);
      found.set(dir.join('/'), dir);
    }
  }
  const deepestFirst = [...found.entries()].sort(([ka, a], [kb, b]) => b.length - a.length || (ka < kb ? -1 : ka > kb ? 1 : 0));
  return [...deepestFirst.map(([, path]) => ({ kind: 'dir' as const, path })), { kind: 'dir', path: top }];
}

export interface RemotePage {
  folders: string[];
  files: { name: string; size: number; modified: number }[];
  /** The token of the next page, present exactly when more entries remain. */
  next?: string;
}

/** Outcomes of a provider call that the contract tells apart. */
export type RemoteErrorKind =
  /** Nothing at the path (404). */
  | 'not_found'
  /** The provider refused: credentials rejected, or no permission (403). */
  | 'denied'
  /** The address rule refused the address its host resolved to when connecting (403; src/addressRule.ts). */
  | 'address_refused'
  /** Something of the other kind is in the way: a file where a directory is wanted (409). */
  | 'conflict'
  /** The operation makes no sense for this provider (creating a bucket, a file at the root) (400). */
  | 'invalid'
  /** The provider refuses the size (413). */
  | 'too_large'
  /** The provider cannot be reached: refused, reset, DNS, TLS (502). */
  | 'unreachable'
  /** The provider did not answer in time (504). */
  | 'timeout'
  /** The provider answered something we cannot use (502). */
  | 'bad_answer';

export class RemoteError extends Error {
  constructor(
    readonly kind: RemoteErrorKind,
    /** Safe to show the account's owner: no credentials, no signed URLs. */
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'RemoteError';
  }
}

/** Network failures of fetch and node:http that mean the provider could not be reached. */
const UNREACHABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'CERT_HAS_EXPIRED', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'ERR_TLS_CERT_ALTNAME_INVALID']);

/**
 * Classifies a network-level failure (not an HTTP answer) of a provider request: an abort by
 * our timeout, a connection failure, or something else. Providers use it in their catch blocks.
 */
export function networkError(err: unknown, signal: AbortSignal): RemoteError {
  if (err instanceof RemoteError) return err;
  if (signal.aborted) {
    const reason: unknown = signal.reason;
    if (reason instanceof Error && reason.name === 'TimeoutError') return new RemoteError('timeout', 'it did not answer in time', { cause: err });
    return new RemoteError('unreachable', 'the request was cancelled', { cause: err });
  }
  let e: unknown = err;
  for (let depth = 0; e && depth < 4; depth++) {
    const code = (e as { code?: unknown }).code;
    if (code === ADDRESS_REFUSED) {
      // "refused by the address rule: HOST resolved to ADDRESS, WHY": the account's own endpoint, nothing of a socket's.
      return new RemoteError('address_refused', (e as Error).message, { cause: err });
    }
    if (typeof code === 'string' && UNREACHABLE.has(code)) return new RemoteError('unreachable', `it could not be reached (${code})`, { cause: err });
    if (typeof code === 'string' && (code === 'ETIMEDOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT')) {
      return new RemoteError('timeout', `it did not answer in time (${code})`, { cause: err });
    }
    e = (e as { cause?: unknown }).cause;
  }
  return new RemoteError('bad_answer', 'the request failed', { cause: err });
}
