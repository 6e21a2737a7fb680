import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ByteRange } from '../blobStore.ts';
import { httpRequest, type HttpAnswer } from './httpClient.ts';
import { RemoteError, deletedDirectories, networkError, type DeletedEntry, type RemotePage, type RemoteStat, type RemoteStorage, type WrittenFile } from './remote.ts';

export interface DropboxOptions {
  accessToken: string;
  /** Base of the RPC endpoints (stand-ins in tests). */
  apiUrl?: string;
  /** Base of the content upload and download endpoints. */
  contentUrl?: string;
  /** Bytes per upload request: a body this size or smaller goes in one request. */
  chunkSize?: number;
  /** How many times a 429 or 503 is retried before giving up. */
  maxRetries?: number;
  /** The longest Retry-After honoured; asked to wait longer, the call fails at once. */
  maxRetryWaitMs?: number;
}

const MiB = 1024 * 1024;
/** Dropbox refuses more than 150 MiB in one upload request. */
const MAX_CHUNK = 150 * MiB;
/** Dropbox's largest list_folder page. */
const MAX_LIMIT = 2000;
/** Error bodies are a few hundred bytes; more than this is not worth reading. */
const MAX_ERROR_BODY = 64 * 1024;
/** Every write replaces what is there, under the exact name (no "file (1).txt"). */
const COMMIT = { mode: 'overwrite', autorename: false, mute: true } as const;

/** A request body, or one made per attempt (a stream the first time, the buffered bytes after). */
type Body = string | Buffer | undefined | ((attempt: number) => Readable | Promise<Buffer>);

/** The fields of Dropbox file and folder metadata this provider reads. */
interface Entry {
  '.tag'?: unknown;
  name?: unknown;
  size?: unknown;
  server_modified?: unknown;
  content_hash?: unknown;
  rev?: unknown;
  path_display?: unknown;
}

/**
 * Connected storage in a Dropbox account over its HTTP API v2, with an access token. Paths
 * are the account's ("/a/b"); Dropbox compares them without regard to case.
 */
export class DropboxStorage implements RemoteStorage {
  private readonly api: string;
  private readonly content: string;
  private readonly auth: string;
  private readonly chunkSize: number;
  private readonly maxRetries: number;
  private readonly maxRetryWaitMs: number;

  constructor(options: DropboxOptions) {
    this.api = (options.apiUrl ?? 'https://api.dropboxapi.com').replace(/\/+$/, '');
    this.content = (options.contentUrl ?? 'https://content.dropboxapi.com').replace(/\/+$/, '');
    this.auth = `Bearer ${options.accessToken}`;
    this.chunkSize = options.chunkSize ?? 8 * MiB;
    if (!Number.isInteger(this.chunkSize) || this.chunkSize < 1 || this.chunkSize > MAX_CHUNK) throw new Error(`chunkSize must be 1..${MAX_CHUNK}`);
    this.maxRetries = options.maxRetries ?? 3;
    this.maxRetryWaitMs = options.maxRetryWaitMs ?? 10_000;
  }

  async stat(path: string[], signal: AbortSignal): Promise<RemoteStat | undefined> {
    // Dropbox has no metadata for the root ("unsupported"), and the root is always a folder.
    if (path.length === 0) return { kind: 'dir' };
    try {
      return toStat(await this.rpc('files/get_metadata', { path: dbxPath(path) }, signal));
    } catch (err) {
      if (err instanceof RemoteError && err.kind === 'not_found') return undefined;
      throw err;
    }
  }

  /**
   * A page token is the Dropbox cursor to continue from: a cursor stays valid and can be
   * passed to list_folder/continue again, which repeats the same page, and it carries the
   * folder and the limit of the first call, so nothing else needs to go in the token.
   */
  async list(dir: string[], token: string | undefined, limit: number, signal: AbortSignal): Promise<RemotePage> {
    const answer = token === undefined
      ? await this.rpc('files/list_folder', { path: dbxPath(dir), limit: Math.min(MAX_LIMIT, Math.max(1, Math.floor(limit) || 1)) }, signal)
      : await this.rpc('files/list_folder/continue', { cursor: token }, signal);
    const { entries, cursor, hasMore } = listResult(answer);
    const page: RemotePage = { folders: [], files: [] };
    for (const entry of entries) {
      if (typeof entry.name !== 'string') throw badShape();
      if (entry['.tag'] === 'folder') page.folders.push(entry.name);
      else if (entry['.tag'] === 'file') page.files.push({ name: entry.name, ...fileFields(entry) });
      // 'deleted' entries only come with include_deleted, which is never asked for.
    }
    if (hasMore) page.next = cursor;
    return page;
  }

  async read(path: string[], range: ByteRange | undefined, signal: AbortSignal): Promise<Readable> {
    // No compression: ranges must count the file's own bytes.
    const headers: Record<string, string> = { 'Dropbox-API-Arg': headerJson({ path: dbxPath(path) }), 'Accept-Encoding': 'identity' };
    if (range) headers.Range = `bytes=${range.start}-${range.end}`;
    const res = await this.send(`${this.content}/2/files/download`, headers, undefined, signal);
    if (!range) return bodyStream(res, 0, Infinity, signal);
    if (res.status === 206) {
      const first = /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(res.header('content-range') ?? '')?.[1];
      if (Number(first) !== range.start) {
        res.body.destroy();
        throw new RemoteError('bad_answer', 'it answered another range than the one asked for');
      }
      return bodyStream(res, 0, Infinity, signal);
    }
    // A whole-file answer to a range request is legal HTTP: cut the range out ourselves.
    return bodyStream(res, range.start, range.end - range.start + 1, signal);
  }

  /**
   * One upload request when the body fits in a chunk; otherwise an upload session, committed
   * by `finish` only once the body has ended well: a body that errors leaves an unfinished
   * session (Dropbox drops those), never a file. The first chunk is read whole to choose; the
   * next ones stream to Dropbox as the client sends them, copied into one reused buffer on the
   * way so that a rate-limited request can be sent again. Memory: about one chunk.
   */
  /** Answers what the committing request's FileMetadata says (its content_hash, as stat does, and size). */
  async write(path: string[], body: Readable, signal: AbortSignal): Promise<WrittenFile> {
    const target = dbxPath(path);
    const reader = new ChunkReader(body, signal);
    const first = await reader.first(this.chunkSize);
    if (first.last) return writtenFile(await this.upload('files/upload', { path: target, ...COMMIT }, first.data, signal));
    const started = await this.upload('files/upload_session/start', { close: false }, first.data, signal);
    const sessionId = (started as { session_id?: unknown } | null)?.session_id;
    if (typeof sessionId !== 'string') throw badShape();
    let offset = first.data.length;
    // A full first chunk: its buffer is free again once Dropbox has taken it.
    const buffer = first.data;
    while (await reader.hasMore()) {
      const fill = new ChunkFill(reader, buffer);
      const arg = { cursor: { session_id: sessionId, offset }, close: false };
      try {
        await this.upload('files/upload_session/append_v2', arg, (attempt) => (attempt === 0 ? fill.stream() : fill.whole()), signal);
        await fill.complete;
      } catch (err) {
        throw fill.bodyError ?? err;
      }
      offset += fill.filled;
    }
    const cursor = { session_id: sessionId, offset };
    return writtenFile(await this.upload('files/upload_session/finish', { cursor, commit: { path: target, ...COMMIT } }, Buffer.alloc(0), signal));
  }

  async mkdir(path: string[], signal: AbortSignal): Promise<void> {
    await this.rpc('files/create_folder_v2', { path: dbxPath(path), autorename: false }, signal);
  }

  /**
   * delete_v2 removes folders too, so the file's rev is looked up first and passed as
   * parent_rev: Dropbox then deletes only that version of a file, never a folder that
   * has taken its place in the meantime.
   */
  async deleteFile(path: string[], signal: AbortSignal): Promise<void> {
    const target = dbxPath(path);
    const meta = await this.rpc('files/get_metadata', { path: target }, signal) as Entry | null;
    const stat = toStat(meta);
    if (!stat) throw new RemoteError('not_found', 'it has no such file');
    if (stat.kind !== 'file') throw new RemoteError('conflict', 'it is a folder, not a file');
    const rev = meta?.rev;
    await this.rpc('files/delete_v2', typeof rev === 'string' ? { path: target, parent_rev: rev } : { path: target }, signal);
  }

  /**
   * Counts the tree's files first (delete_v2 does not say): files added meanwhile are not counted.
   * With `deleted`, the walk keeps what it saw (memory in proportion to the tree), told once
   * delete_v2 has succeeded; files added meanwhile go untold.
   */
  async deleteDir(path: string[], signal: AbortSignal, deleted?: (entries: DeletedEntry[]) => Promise<void>): Promise<number> {
    if (path.length === 0) throw new RemoteError('invalid', 'the root folder cannot be deleted');
    const target = dbxPath(path);
    let files = 0;
    const seen: DeletedEntry[] = [];
    const dirs: string[][] = [];
    let answer = await this.rpc('files/list_folder', { path: target, recursive: true, limit: MAX_LIMIT }, signal);
    for (;;) {
      const { entries, cursor, hasMore } = listResult(answer);
      for (const entry of entries) {
        if (entry['.tag'] === 'file') files++;
        if (!deleted) continue;
        // Dropbox's paths compare without regard to case: the part asked for is kept as asked.
        const display = typeof entry.path_display === 'string' ? entry.path_display.split('/').slice(1) : [];
        if (display.length <= path.length || display.includes('')) continue; // the folder itself (it comes first), or no usable path
        const at = [...path, ...display.slice(path.length)];
        if (entry['.tag'] === 'folder') dirs.push(at);
        else if (entry['.tag'] === 'file') {
          const stat = toStat(entry);
          if (stat?.kind === 'file') seen.push({ kind: 'file', path: at, size: stat.size, etag: stat.etag });
        }
      }
      if (!hasMore) break;
      answer = await this.rpc('files/list_folder/continue', { cursor }, signal);
    }
    await this.rpc('files/delete_v2', { path: target }, signal);
    if (deleted) {
      for (let i = 0; i < seen.length; i += 1000) await deleted(seen.slice(i, i + 1000));
      await deleted(deletedDirectories(path, dirs));
    }
    return files;
  }

  private async rpc(name: string, arg: unknown, signal: AbortSignal): Promise<unknown> {
    const res = await this.send(`${this.api}/2/${name}`, { 'Content-Type': 'application/json' }, JSON.stringify(arg), signal);
    return readJson(res, signal);
  }

  private async upload(name: string, arg: unknown, data: Body, signal: AbortSignal): Promise<unknown> {
    const headers = { 'Content-Type': 'application/octet-stream', 'Dropbox-API-Arg': headerJson(arg) };
    return readJson(await this.send(`${this.content}/2/${name}`, headers, data, signal), signal);
  }

  /** POSTs, retrying what Dropbox asks to retry; answers a 2xx response or throws a RemoteError. */
  private async send(url: string, headers: Record<string, string>, body: Body, signal: AbortSignal): Promise<HttpAnswer> {
    for (let attempt = 0; ; attempt++) {
      let res: HttpAnswer;
      try {
        const payload = typeof body === 'function' ? await body(attempt) : body;
        res = await httpRequest(url, { method: 'POST', headers: { Authorization: this.auth, ...headers }, body: payload, signal });
      } catch (err) {
        throw networkError(err, signal);
      }
      if (res.status >= 200 && res.status < 300) return res;
      const failure = await describeFailure(res, signal);
      if (failure.retryAfterMs === undefined) throw failure.error;
      if (attempt >= this.maxRetries) throw new RemoteError('bad_answer', `it kept refusing (${failure.error.message}) after ${attempt + 1} tries`);
      if (failure.retryAfterMs > this.maxRetryWaitMs) {
        throw new RemoteError('bad_answer', `it asked to wait ${Math.ceil(failure.retryAfterMs / 1000)} s before retrying (${failure.error.message})`);
      }
      try {
        await sleep(failure.retryAfterMs, undefined, { signal });
      } catch (err) {
        throw networkError(err, signal);
      }
    }
  }
}

/** Dropbox paths: "" is the root (only list_folder takes it), others start with "/". */
function dbxPath(segments: string[]): string {
  return segments.length === 0 ? '' : `/${segments.join('/')}`;
}

/** Dropbox-API-Arg must be "HTTP header safe": JSON with 0x7F and every non-ASCII character as \uXXXX. */
function headerJson(value: unknown): string {
  return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function badShape(): RemoteError {
  return new RemoteError('bad_answer', 'it answered in an unexpected shape');
}

function toStat(value: unknown): RemoteStat | undefined {
  const entry = value as Entry | null;
  if (entry?.['.tag'] === 'folder') return { kind: 'dir' };
  if (entry?.['.tag'] === 'deleted') return undefined;
  if (entry?.['.tag'] !== 'file') throw badShape();
  const etag = typeof entry.content_hash === 'string' ? entry.content_hash : entry.rev;
  if (typeof etag !== 'string' || etag === '') throw badShape();
  return { kind: 'file', ...fileFields(entry), etag };
}

/** What an upload's FileMetadata (no `.tag`: it is not a union there) says of the file. */
function writtenFile(value: unknown): WrittenFile {
  const entry = value as Entry | null;
  const etag = typeof entry?.content_hash === 'string' && entry.content_hash !== '' ? entry.content_hash : typeof entry?.rev === 'string' && entry.rev !== '' ? entry.rev : undefined;
  const size = typeof entry?.size === 'number' && Number.isSafeInteger(entry.size) && entry.size >= 0 ? entry.size : undefined;
  return { ...(etag !== undefined ? { etag } : {}), ...(size !== undefined ? { size } : {}) };
}

function fileFields(entry: Entry): { size: number; modified: number } {
  const modified = typeof entry.server_modified === 'string' ? Date.parse(entry.server_modified) : NaN;
  if (typeof entry.size !== 'number' || !Number.isSafeInteger(entry.size) || entry.size < 0 || !Number.isFinite(modified)) throw badShape();
  return { size: entry.size, modified };
}

function listResult(value: unknown): { entries: Entry[]; cursor: string; hasMore: boolean } {
  const r = value as { entries?: unknown; cursor?: unknown; has_more?: unknown } | null;
  if (!r || !Array.isArray(r.entries) || typeof r.has_more !== 'boolean') throw badShape();
  if (r.has_more && (typeof r.cursor !== 'string' || r.cursor === '')) throw badShape();
  return { entries: r.entries as Entry[], cursor: String(r.cursor), hasMore: r.has_more };
}

async function readJson(res: HttpAnswer, signal: AbortSignal): Promise<unknown> {
  let text: string;
  try {
    text = await res.text(64 * 1024 * 1024);
  } catch (err) {
    throw networkError(err, signal);
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new RemoteError('bad_answer', 'it answered something that is not JSON');
  }
}


/** The tags of an error_summary ("path/not_found/.." → path, not_found): never user text. */
function summaryTags(body: string): string[] {
  let summary: unknown;
  try {
    summary = (JSON.parse(body) as { error_summary?: unknown } | null)?.error_summary;
  } catch {
    return [];
  }
  if (typeof summary !== 'string') return [];
  return summary.split('/').map((s) => s.trim()).filter((s) => /^[a-z0-9_]+$/.test(s));
}

/** What a 409's error_summary means for the contract; the most specific tag wins. */
function kindOf(tags: string[]): RemoteError['kind'] {
  const has = (...names: string[]) => names.some((n) => tags.includes(n));
  if (has('not_found')) return 'not_found';
  if (has('insufficient_space', 'too_large', 'payload_too_large')) return 'too_large';
  if (has('no_write_permission', 'restricted_content', 'team_folder', 'no_permission')) return 'denied';
  if (has('malformed_path', 'disallowed_name', 'too_long', 'reset')) return 'invalid';
  if (has('conflict', 'not_folder', 'not_file')) return 'conflict';
  return 'bad_answer';
}

/** Turns a non-2xx answer into a RemoteError, with the wait before a retry when Dropbox asks for one. */
async function describeFailure(res: HttpAnswer, signal: AbortSignal): Promise<{ error: RemoteError; retryAfterMs?: number }> {
  let body: string;
  try {
    body = await res.text(MAX_ERROR_BODY);
  } catch (err) {
    throw networkError(err, signal);
  }
  const tags = summaryTags(body);
  const said = tags.length > 0 ? tags.join('/') : `HTTP ${res.status}`;
  switch (res.status) {
    case 401: return { error: new RemoteError('denied', `it rejected the access token (${tags[0] ?? 'HTTP 401'})`) };
    case 403: return { error: new RemoteError('denied', `it refused access (${said})`) };
    case 400: return { error: new RemoteError('invalid', 'it refused the request as malformed (HTTP 400)') };
    case 413: return { error: new RemoteError('too_large', 'it refused the size (HTTP 413)') };
    case 416: return { error: new RemoteError('invalid', 'the range is outside the file (HTTP 416)') };
    case 429:
    case 503: return { error: new RemoteError('bad_answer', `it is limiting requests (${said})`), retryAfterMs: retryAfter(res, body) };
    case 409:
      // Dropbox answers a lock on the account's namespace as a 409 that asks to be retried.
      if (tags.includes('too_many_write_operations')) return { error: new RemoteError('bad_answer', `it answered ${said}`), retryAfterMs: retryAfter(res, body) };
      return { error: new RemoteError(kindOf(tags), `it answered ${said}`) };
    default: return { error: new RemoteError('bad_answer', `it answered HTTP ${res.status}`) };
  }
}

/** Retry-After in seconds or as a date, else the body's retry_after, else one second. */
function retryAfter(res: HttpAnswer, body: string): number {
  const header = res.header('retry-after')?.trim();
  if (header && /^\d+$/.test(header)) return Number(header) * 1000;
  if (header && Number.isFinite(Date.parse(header))) return Math.max(0, Date.parse(header) - Date.now());
  try {
    const seconds = (JSON.parse(body) as { error?: { retry_after?: unknown } } | null)?.error?.retry_after;
    if (typeof seconds === 'number' && seconds >= 0) return seconds * 1000;
  } catch { /* not JSON: fall through */ }
  return 1000;
}

/**
 * The answer's bytes as a Readable, `skip` bytes dropped and at most `take` kept. Destroying
 * the Readable cancels the download; network failures become RemoteErrors.
 */
function bodyStream(res: HttpAnswer, skip: number, take: number, signal: AbortSignal): Readable {
  const body = res.body;
  async function* bytes(): AsyncGenerator<Buffer> {
    if (!body) return;
    try {
      for await (const chunk of body as AsyncIterable<Buffer>) {
        let buf = chunk;
        if (skip >= buf.length) {
          skip -= buf.length;
          continue;
        }
        buf = buf.subarray(skip);
        skip = 0;
        if (buf.length >= take) {
          yield buf.subarray(0, take);
          return; // leaving the loop cancels the rest of the download
        }
        take -= buf.length;
        yield buf;
      }
    } catch (err) {
      throw networkError(err, signal);
    }
  }
  return Readable.from(bytes(), { objectMode: false });
}

/**
 * The upload body, read piece by piece. `first` reads a whole chunk and looks one piece
 * ahead, so that a body that fits in one chunk is known to before anything is sent.
 */
class ChunkReader {
  private readonly pieces: AsyncIterator<unknown>;
  private pending: Buffer | undefined;
  private ended = false;

  constructor(body: Readable, private readonly signal: AbortSignal) {
    this.pieces = body[Symbol.asyncIterator]();
  }

  async first(size: number): Promise<{ data: Buffer; last: boolean }> {
    const parts: Buffer[] = [];
    let length = 0;
    while (length < size) {
      const piece = await this.piece(size - length);
      if (!piece) break;
      parts.push(piece);
      length += piece.length;
    }
    return { data: Buffer.concat(parts, length), last: !(await this.hasMore()) };
  }

  async hasMore(): Promise<boolean> {
    this.pending ??= await this.pull();
    return this.pending !== undefined;
  }

  /** The next bytes of the body, at most `max`; undefined at its end. */
  async piece(max: number): Promise<Buffer | undefined> {
    const piece = this.pending ?? (await this.pull());
    this.pending = piece && piece.length > max ? piece.subarray(max) : undefined;
    return piece && piece.length > max ? piece.subarray(0, max) : piece;
  }

  /**
   * The body's next step, or the abort: waiting on a slow client must still end when the
   * request is cancelled. (Not Promise.race against one long-lived abort promise: every race
   * would leave a reaction on it holding its piece, and a 200 MiB upload stayed in memory.)
   */
  private nextOrAbort(): Promise<IteratorResult<unknown>> {
    const signal = this.signal;
    if (signal.aborted) return Promise.reject(networkError(signal.reason, signal));
    return new Promise((resolve, reject) => {
      const fail = () => reject(networkError(signal.reason, signal));
      signal.addEventListener('abort', fail, { once: true });
      this.pieces.next().then(
        (step) => (signal.removeEventListener('abort', fail), resolve(step)),
        (err: unknown) => (signal.removeEventListener('abort', fail), reject(err)),
      );
    });
  }

  /** The body's next non-empty piece; the body's own error is thrown as is. */
  private async pull(): Promise<Buffer | undefined> {
    while (!this.ended) {
      const step = await this.nextOrAbort();
      if (step.done) {
        this.ended = true;
        break;
      }
      const value = step.value;
      const piece = Buffer.isBuffer(value) ? value : typeof value === 'string' ? Buffer.from(value) : Buffer.from(value as Uint8Array);
      if (piece.length > 0) return piece;
    }
    return undefined;
  }
}

/**
 * Copies the body's next chunk into `buffer` at the client's pace, independently of the
 * request that streams it (`stream`): if Dropbox refuses that request, the chunk is still
 * read whole and can be sent again from the buffer (`whole`).
 */
class ChunkFill {
  filled = 0;
  bodyError: unknown;
  readonly complete: Promise<void>;
  private ended = false;
  private waiters: (() => void)[] = [];

  constructor(private readonly reader: ChunkReader, private readonly buffer: Buffer) {
    this.complete = this.run();
    this.complete.catch(() => {});
  }

  private async run(): Promise<void> {
    try {
      while (this.filled < this.buffer.length) {
        const piece = await this.reader.piece(this.buffer.length - this.filled);
        if (!piece) break;
        piece.copy(this.buffer, this.filled);
        this.filled += piece.length;
        this.wake();
      }
    } catch (err) {
      this.bodyError = err;
      throw err;
    } finally {
      this.ended = true;
      this.wake();
    }
  }

  private wake(): void {
    for (const resolve of this.waiters.splice(0)) resolve();
  }

  /** The chunk as it fills, for one request; the bytes pushed are views of the buffer, sent before it is reused. */
  stream(): Readable {
    let sent = 0;
    const next = async (): Promise<Buffer | null> => {
      while (this.filled <= sent && !this.ended) await new Promise<void>((resolve) => this.waiters.push(resolve));
      if (this.filled > sent) {
        const view = this.buffer.subarray(sent, this.filled);
        sent = this.filled;
        return view;
      }
      await this.complete; // throws the body's error
      return null;
    };
    return new Readable({
      read() {
        next().then(
          (chunk) => this.push(chunk),
          (err: Error) => this.destroy(err),
        );
      },
    });
  }

  async whole(): Promise<Buffer> {
    await this.complete;
    return this.buffer.subarray(0, this.filled);
  }
}
