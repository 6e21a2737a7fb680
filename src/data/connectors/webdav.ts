import crypto from 'node:crypto';
import type net from 'node:net';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ByteRange } from '../blobStore.ts';
import { httpRequest, type HttpAnswer } from './httpClient.ts';
import { MultistatusParser, type DavEntry } from './multistatus.ts';
import { RemoteError, deletedDirectories, networkError, type DeletedEntry, type RemotePage, type RemoteStat, type RemoteStorage, type WrittenFile } from './remote.ts';

/** A filehost:// account on a WebDAV server: its root collection and, optionally, Basic credentials. */
export interface WebDavConfig {
  url: string;
  username?: string;
  password?: string;
  /** Host name resolution for new connections (the server's egress rule). */
  lookup?: net.LookupFunction;
}

/** What list and deleteDir ask for: not getcontenttype, which some servers (Go's x/net/webdav, so rclone) sniff by opening each file. */
const LIST_PROPS = propfindBody(['resourcetype', 'getcontentlength', 'getlastmodified']);
const STAT_PROPS = propfindBody(['resourcetype', 'getcontentlength', 'getlastmodified', 'getetag', 'getcontenttype']);
/** What deleteDir asks for when its deletions are told: each file's ETag too. */
const DELETE_PROPS = propfindBody(['resourcetype', 'getcontentlength', 'getlastmodified', 'getetag']);
/** How long removing an aborted upload's temporary file may add to the failed write. */
const CLEANUP_MS = 2_000;

const bad = (message: string) => new RemoteError('bad_answer', message);

/**
 * RemoteStorage over WebDAV (RFC 4918) with node:http (httpClient.ts): requests and answers streamed,
 * multistatus answers parsed as they arrive, every request tied to the caller's signal.
 */
export class WebDavStorage implements RemoteStorage {
  /** The root collection's URL without credentials, query or fragment, ending in "/". */
  private readonly root: string;
  /** The root's path, decoded, to map the hrefs of PROPFIND answers back to account paths. */
  private readonly rootSegments: string[];
  private readonly auth: string | undefined;
  private readonly lookup: net.LookupFunction | undefined;

  constructor(config: WebDavConfig) {
    this.lookup = config.lookup;
    let url: URL;
    try {
      url = new URL(config.url);
    } catch {
      throw new RemoteError('invalid', 'the WebDAV URL is not valid');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new RemoteError('invalid', 'the WebDAV URL must start with http:// or https://');
    let { username, password } = config;
    // Credentials in the URL are taken out: they must not reach messages or Destination headers.
    if (url.username || url.password) {
      if (!username) {
        try {
          username = decodeURIComponent(url.username);
          password = decodeURIComponent(url.password);
        } catch {
          throw new RemoteError('invalid', 'the user name or password in the WebDAV URL is not valid percent-encoded UTF-8');
        }
      }
      url.username = url.password = '';
    }
    url.search = url.hash = '';
    this.root = url.href.endsWith('/') ? url.href : `${url.href}/`;
    try {
      this.rootSegments = segmentsOf(url.pathname);
    } catch {
      throw new RemoteError('invalid', 'the WebDAV URL is not valid');
    }
    this.auth = username ? `Basic ${Buffer.from(`${username}:${password ?? ''}`).toString('base64')}` : undefined;
  }

  async stat(path: string[], signal: AbortSignal): Promise<RemoteStat | undefined> {
    if (path.length === 0) return { kind: 'dir' };
    let own: DavEntry | undefined;
    const found = await this.propfind(path, 0, STAT_PROPS, signal, (entry, name) => {
      if (name === SELF) own = entry;
    });
    if (!found) return undefined;
    if (!own) throw bad('its answer did not describe the path');
    if (own.collection) return { kind: 'dir' };
    const size = parseSize(own.props.get('getcontentlength'));
    // Stat drives range reads, so a file without a size is unusable (list is lenient instead).
    if (size === undefined) throw bad('it did not give the file size');
    const modified = parseDate(own.props.get('getlastmodified'));
    // Servers without getetag: size and time change with the content in practice.
    const etag = own.props.get('getetag') || `"${size}-${modified}"`;
    const contentType = own.props.get('getcontenttype') || undefined;
    return { kind: 'file', size, modified, etag, ...(contentType ? { contentType } : {}) };
  }

  /**
   * WebDAV has no paging: each page is a fresh Depth 1 PROPFIND that keeps only the `limit`
   * smallest entries after the token (files first, then folders, each in UTF-8 byte order),
   * so memory is O(limit) however large the directory, and a token (the last entry returned)
   * stays valid for repeating its page and survives entries being added or removed.
   */
  async list(dir: string[], token: string | undefined, limit: number, signal: AbortSignal): Promise<RemotePage> {
    const after = token === undefined ? undefined : decodeToken(token);
    const max = Math.max(1, Math.floor(limit) || 1);
    const kept: Entry[] = [];
    let more = false;
    const found = await this.propfind(dir, 1, LIST_PROPS, signal, (e, name) => {
      if (name === SELF) {
        if (!e.collection) throw new RemoteError('conflict', 'it is a file, not a directory');
        return;
      }
      const entry: Entry = { dir: e.collection, name, size: parseSize(e.props.get('getcontentlength')) ?? 0, modified: parseDate(e.props.get('getlastmodified')) };
      if (after && compareEntries(entry, after) <= 0) return;
      // Binary insertion into the sorted page; a duplicate (same kind and name) is dropped.
      let lo = 0;
      let hi = kept.length;
      if (kept.length === max && compareEntries(kept[max - 1]!, entry) < 0) lo = hi; // the common case, in O(1)
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (compareEntries(kept[mid]!, entry) < 0) lo = mid + 1;
        else hi = mid;
      }
      if (lo < kept.length && compareEntries(kept[lo]!, entry) === 0) return;
      if (kept.length < max) kept.splice(lo, 0, entry);
      else {
        more = true; // one of max + 1 distinct entries after the token stays out of this page
        if (lo < max) {
          kept.splice(lo, 0, entry);
          kept.pop();
        }
      }
    });
    if (!found) throw new RemoteError('not_found', 'the directory does not exist');
    const page: RemotePage = {
      folders: kept.filter((e) => e.dir).map((e) => e.name),
      files: kept.filter((e) => !e.dir).map(({ name, size, modified }) => ({ name, size, modified })),
    };
    const last = kept.at(-1);
    if (more && last) page.next = encodeToken(last);
    return page;
  }

  async read(path: string[], range: ByteRange | undefined, signal: AbortSignal): Promise<Readable> {
    const res = await this.send('GET', path, { signal, headers: range ? { range: `bytes=${range.start}-${range.end}` } : {} });
    if (range && res.status === 416) throw await dropping(res, new RemoteError('invalid', 'the range is outside the file'));
    if (!res.ok) throw await failure(res);
    let skip = 0;
    let take = Infinity;
    if (range) {
      take = range.end - range.start + 1;
      if (res.status === 206) {
        const m = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(res.header('content-range') ?? '');
        const [start, end, total] = [Number(m?.[1]), Number(m?.[2]), Number(m?.[3])];
        // A shorter end is fine only when the file ends there (a range past the end, as HTTP allows).
        if (!m || start !== range.start || (end !== range.end && !(end < range.end && end === total - 1))) {
          throw await dropping(res, bad('it answered another range than the one asked for'));
        }
        take = end - start + 1;
      } else if (res.status === 200) {
        // The server ignored Range: trim the full answer ourselves (costs reading the skipped bytes).
        skip = range.start;
      } else {
        throw await dropping(res, bad(`it answered ${res.status} to a range request`));
      }
    } else if (res.status !== 200) {
      throw await dropping(res, bad(`it answered ${res.status} to a download`));
    }
    return slice(res, skip, take, signal);
  }

  /**
   * PUT to a temporary name in the same collection, then MOVE over the target. Servers differ
   * on what an interrupted PUT leaves: rclone (so any rclone-served remote) keeps the
   * truncated bytes *in place of* the old file. With a temporary name, an errored body costs
   * at most a stray temporary file (which we then delete), never the target's content; the
   * price is one more request and the temporary name being visible while uploading.
   *
   * The ETag a PUT answers is the temporary file's, which a server need not keep through the
   * MOVE; so the file's own is the MOVE answer's, or else one PROPFIND after it (the write's
   * event carries it; docs/events.md says what that costs).
   */
  async write(path: string[], body: Readable, signal: AbortSignal): Promise<WrittenFile> {
    if (path.length === 0) throw new RemoteError('invalid', 'the root is a directory');
    const temp = [...path.slice(0, -1), `.algohost-upload-${crypto.randomBytes(8).toString('hex')}.part`];
    const stop = new AbortController();
    let bodyError: unknown;
    const onBodyError = (err: unknown) => {
      bodyError ??= err ?? new Error('the upload failed');
      stop.abort(bodyError);
    };
    // Destroyed without an error (the client went away) is a failed body too, not a server fault.
    const onBodyClose = () => body.readableEnded || onBodyError(new Error('the upload stopped before its end'));
    body.on('error', onBodyError).on('close', onBodyClose);
    // Whether the server answered the PUT: then what it left of the upload is there now.
    let answered = false;
    try {
      const res = await this.send('PUT', temp, { body, signal: AbortSignal.any([signal, stop.signal]) }).catch((err: unknown) => {
        throw bodyError ?? networkError(err, signal);
      });
      answered = true;
      if (!res.ok) {
        stop.abort(); // the server may answer (507, 413) before reading the whole body: stop sending it
        throw await failure(res);
      }
      await discard(res);
      if (bodyError !== undefined) throw bodyError;
      // MOVE with Overwrite: T onto a collection deletes the whole tree first (RFC 4918 9.9.3).
      if ((await this.stat(path, signal))?.kind === 'dir') throw new RemoteError('conflict', 'a directory is in the way');
      const moved = await this.send('MOVE', temp, { signal, headers: { destination: this.urlOf(path), overwrite: 'T' } });
      if (!moved.ok) throw await failure(moved);
      await discard(moved);
      const etag = moved.header('etag');
      if (etag) return { etag };
    } catch (err) {
      stop.abort(); // after a timeout too, so that the body stream stops waiting for `body`
      await this.removeQuietly(temp, answered);
      throw err;
    } finally {
      body.off('error', onBodyError).off('close', onBodyClose);
    }
    // The file is written: a failure to describe it now fails nothing, the event only lacks it.
    const written = await this.stat(path, signal).catch(() => undefined);
    return written?.kind === 'file' ? { etag: written.etag, size: written.size } : {};
  }

  async mkdir(path: string[], signal: AbortSignal): Promise<void> {
    if (path.length === 0) throw new RemoteError('conflict', 'the root already exists');
    const res = await this.send('MKCOL', path, { signal, dir: true });
    // 405: something already exists there (RFC 4918 9.3.1).
    if (res.status === 405) throw await dropping(res, new RemoteError('conflict', 'something is already there'));
    if (!res.ok) throw await failure(res);
    await discard(res);
  }

  /** Stats first: DELETE on a collection removes the whole tree, which deleteFile must never do. */
  async deleteFile(path: string[], signal: AbortSignal): Promise<void> {
    const there = await this.stat(path, signal);
    if (!there) throw new RemoteError('not_found', 'the file does not exist');
    if (there.kind === 'dir') throw new RemoteError('conflict', 'it is a directory, not a file');
    const res = await this.send('DELETE', path, { signal });
    if (!res.ok) throw await failure(res);
    await discard(res);
  }

  /**
   * Counts the files with one Depth 1 PROPFIND per directory (Depth infinity is often refused),
   * holding only the folders still to visit, then DELETEs the collection. With `deleted`, the
   * walk also keeps what it saw (a path, a size and an ETag per file: memory in proportion to
   * the tree), told once the DELETE has succeeded: one request removes the whole tree, so
   * nothing is told when it fails, and what was added between the walk and the DELETE is
   * removed untold.
   */
  async deleteDir(path: string[], signal: AbortSignal, deleted?: (entries: DeletedEntry[]) => Promise<void>): Promise<number> {
    if (path.length === 0) throw new RemoteError('invalid', 'the root cannot be deleted');
    let files = 0;
    const seen: DeletedEntry[] = [];
    const dirs: string[][] = [];
    const pending: string[][] = [path];
    for (let dir = pending.pop(); dir; dir = pending.pop()) {
      const top = dir === path;
      const here = dir;
      const found = await this.propfind(here, 1, deleted ? DELETE_PROPS : LIST_PROPS, signal, (e, name) => {
        if (name !== SELF) {
          if (e.collection) {
            pending.push([...here, name]);
            if (deleted) dirs.push([...here, name]);
          } else {
            files++;
            if (deleted) {
              const size = parseSize(e.props.get('getcontentlength')) ?? 0;
              // As stat makes it for a server without getetag: the ETag the file was served with.
              const etag = e.props.get('getetag') || `"${size}-${parseDate(e.props.get('getlastmodified'))}"`;
              seen.push({ kind: 'file', path: [...here, name], size, etag });
            }
          }
        } else if (!e.collection && top) throw new RemoteError('conflict', 'it is a file, not a directory');
      });
      if (!found && top) throw new RemoteError('not_found', 'the directory does not exist');
    }
    const res = await this.send('DELETE', path, { signal, dir: true, headers: { depth: 'infinity' } });
    // 207: some members could not be deleted, and the collection is still there.
    if (res.status === 207) throw await dropping(res, bad('it could not delete everything in the directory'));
    if (!res.ok) throw await failure(res);
    await discard(res);
    if (deleted) {
      for (let i = 0; i < seen.length; i += 1000) await deleted(seen.slice(i, i + 1000));
      await deleted(deletedDirectories(path, dirs));
    }
    return files;
  }

  private urlOf(path: string[], dir = false): string {
    return this.root + path.map(encodeURIComponent).join('/') + (dir && path.length > 0 ? '/' : '');
  }

  private async send(
    method: string,
    path: string[],
    opts: { signal: AbortSignal; dir?: boolean; headers?: Record<string, string>; body?: string | Readable },
  ): Promise<HttpAnswer> {
    const headers: Record<string, string> = { ...opts.headers };
    if (this.auth) headers.authorization = this.auth;
    try {
      // node:http follows no redirect: one is reported (the account's URL is likely wrong),
      // never followed with the credentials to wherever it points.
      return await httpRequest(this.urlOf(path, opts.dir), { method, headers, ...(opts.body !== undefined ? { body: opts.body } : {}), signal: opts.signal, ...(this.lookup ? { lookup: this.lookup } : {}) });
    } catch (err) {
      throw networkError(err, opts.signal);
    }
  }

  /**
   * PROPFIND `path` and hand each entry of the multistatus to `onEntry` as it is parsed, with
   * where it is: SELF, or the name of a direct child (deeper ones are skipped). Answers false
   * when nothing is there.
   */
  private async propfind(path: string[], depth: 0 | 1, props: string, signal: AbortSignal, onEntry: (entry: DavEntry, name: string | typeof SELF) => void): Promise<boolean> {
    const url = this.urlOf(path);
    const expected = [...this.rootSegments, ...path];
    const res = await this.send('PROPFIND', path, { signal, body: props, headers: { depth: String(depth), 'content-type': 'application/xml; charset=utf-8' } });
    if (res.status === 404) {
      await discard(res);
      return false;
    }
    if (res.status !== 207) throw await failure(res);
    const parser = new MultistatusParser((entry) => {
      const name = place(entry.href, url, expected);
      if (name !== undefined) onEntry(entry, name);
    });
    const decoder = new TextDecoder('utf-8', { fatal: true });
    try {
      for await (const chunk of res.body as AsyncIterable<Buffer>) parser.write(decoder.decode(chunk, { stream: true }));
      parser.write(decoder.decode());
      parser.end();
    } catch (err) {
      if (err instanceof RemoteError) throw err;
      if (err instanceof TypeError && !signal.aborted && (err as { code?: string }).code === 'ERR_ENCODING_INVALID_ENCODED_DATA') throw bad('its answer was not valid UTF-8');
      throw networkError(err, signal);
    }
    return true;
  }

  /**
   * Best effort, bounded: the write has already failed, and its error is what matters. A
   * server may still hold the aborted upload when we get here (rclone answers 423 Locked
   * until it notices the broken connection), so 423 is retried within the budget. When we
   * broke the upload off (`answered` false), the server may not even have started on it yet:
   * rclone, under load, creates the file after a DELETE that found nothing (seen in CI). A 404
   * is then asked again a few times, 25 ms apart and doubling (under 0.8 s in all).
   */
  private async removeQuietly(path: string[], answered: boolean): Promise<void> {
    const signal = AbortSignal.timeout(CLEANUP_MS);
    let askAgain = answered ? 0 : 5;
    let pause = 25;
    try {
      for (;;) {
        const res = await this.send('DELETE', path, { signal });
        await discard(res);
        if (res.status === 423) {
          await sleep(50, undefined, { signal });
        } else if (res.status === 404 && askAgain-- > 0) {
          await sleep(pause, undefined, { signal });
          pause *= 2;
        } else {
          return;
        }
      }
    } catch {
      // The server is gone, slow or still busy: the temporary file, if any, stays.
    }
  }
}

const SELF = Symbol('the entry of the path asked for');

/**
 * Where an href (an absolute URL or path, percent-encoded) is relative to the collection whose
 * decoded segments from the server root are `expected`: SELF, a direct child's name, or
 * undefined (deeper). Anything else means we cannot map the server's answers to our paths.
 */
function place(href: string, requestUrl: string, expected: string[]): string | typeof SELF | undefined {
  let segments: string[];
  try {
    segments = segmentsOf(new URL(href, requestUrl).pathname);
  } catch {
    throw bad('it answered an href that is not a valid URL');
  }
  if (segments.length < expected.length || expected.some((s, i) => segments[i] !== s)) throw bad('it answered entries outside the directory asked for');
  if (segments.length === expected.length) return SELF;
  return segments.length === expected.length + 1 ? segments.at(-1) : undefined;
}

interface Entry {
  dir: boolean;
  name: string;
  size: number;
  modified: number;
}

function propfindBody(props: string[]): string {
  return `<?xml version="1.0" encoding="utf-8"?><d:propfind xmlns:d="DAV:"><d:prop>${props.map((p) => `<d:${p}/>`).join('')}</d:prop></d:propfind>`;
}

/** A path's segments, percent-decoded; empty segments (leading, trailing, doubled slashes) dropped. */
function segmentsOf(pathname: string): string[] {
  return pathname.split('/').filter((s) => s !== '').map((s) => decodeURIComponent(s));
}

function parseSize(value: string | undefined): number | undefined {
  return value !== undefined && /^\d+$/.test(value) ? Number(value) : undefined;
}

function parseDate(value: string | undefined): number {
  const ms = value ? Date.parse(value) : NaN;
  return Number.isFinite(ms) ? ms : 0;
}

/** Files first, then folders (as hosted data pages them), each by name in UTF-8 byte order (code point order, not UTF-16's). */
function compareEntries(a: { dir: boolean; name: string }, b: { dir: boolean; name: string }): number {
  if (a.dir !== b.dir) return a.dir ? 1 : -1;
  const n = Math.min(a.name.length, b.name.length);
  for (let i = 0; i < n; i++) {
    const x = a.name.charCodeAt(i);
    const y = b.name.charCodeAt(i);
    if (x !== y) return codePointRank(x) - codePointRank(y);
  }
  return a.name.length - b.name.length;
}

/** Moves surrogates (U+D800-DFFF, which encode code points above U+FFFF) after U+E000-FFFF. */
function codePointRank(unit: number): number {
  if (unit >= 0xe000) return unit - 0x800;
  return unit >= 0xd800 ? unit + 0x2000 : unit;
}

/** A token names the last entry of its page: "d" or "f", then the name, base64url. */
function encodeToken(e: { dir: boolean; name: string }): string {
  return Buffer.from((e.dir ? 'd' : 'f') + e.name).toString('base64url');
}

function decodeToken(token: string): { dir: boolean; name: string } {
  const text = Buffer.from(token, 'base64url').toString('utf8');
  const kind = text[0];
  if ((kind !== 'd' && kind !== 'f') || text.length < 2 || Buffer.from(text).toString('base64url') !== token) {
    throw new RemoteError('invalid', 'the page token is not valid');
  }
  return { dir: kind === 'd', name: text.slice(1) };
}

async function discard(res: HttpAnswer): Promise<void> {
  res.discard();
}

/** Releases an answer's connection and gives back `err`, for `throw await dropping(res, err)`. */
async function dropping(res: HttpAnswer, err: RemoteError): Promise<RemoteError> {
  await discard(res);
  return err;
}

/** An HTTP answer that is not a success, as the contract's outcome; messages hold no URL. */
async function failure(res: HttpAnswer): Promise<RemoteError> {
  await discard(res);
  const s = res.status;
  if (s === 404 || s === 410) return new RemoteError('not_found', `nothing is there (${s})`);
  if (s === 401) return new RemoteError('denied', 'it refused the credentials (401)');
  if (s === 403) return new RemoteError('denied', 'it refused access (403)');
  if (s === 409 || s === 412) return new RemoteError('conflict', `something is in the way (${s})`);
  if (s === 413) return new RemoteError('too_large', 'it refused the size (413)');
  if (s === 507) return new RemoteError('too_large', 'it is out of space (507)');
  if (s >= 300 && s < 400) return bad(`it redirected the request (${s}); check the account's URL`);
  return bad(`it answered ${s}`);
}

/** The answer's bytes `skip` to `skip + take`, with failures (abort, timeout, reset) as RemoteErrors. */
function slice(res: HttpAnswer, skip: number, take: number, signal: AbortSignal): Readable {
  const src = res.body;
  const end = skip + take;
  let pos = 0;
  let done = false;
  const out = new Readable({
    read: () => void src.resume(),
    destroy: (err, cb) => {
      done = true;
      src.destroy();
      cb(err);
    },
  });
  src.on('data', (chunk: Buffer) => {
    if (done) return;
    const from = Math.max(0, skip - pos);
    const to = Math.min(chunk.length, end - pos);
    pos += chunk.length;
    if (to > from && !out.push(chunk.subarray(from, to))) src.pause();
    if (pos >= end) {
      done = true;
      out.push(null);
      src.destroy(); // the rest (a server that ignored Range) is not needed
    }
  });
  src.on('end', () => {
    if (done) return;
    done = true;
    if (Number.isFinite(end) && pos < end) out.destroy(bad('its answer was shorter than the range'));
    else out.push(null);
  });
  src.on('error', (err) => {
    if (!done) out.destroy(networkError(err, signal));
  });
  return out;
}
