/**
 * A local stand-in for the Dropbox HTTP API v2, for tests: the real service cannot be reached
 * from here. It is not Dropbox code; it follows Dropbox's public documentation for the
 * endpoints DropboxStorage uses: RPC endpoints take JSON bodies, content endpoints take their
 * argument in the Dropbox-API-Arg header (JSON, non-ASCII escaped as \uXXXX) and answer
 * metadata in Dropbox-API-Result; endpoint errors are HTTP 409 with
 * {"error_summary": "path/not_found/..", "error": {...}}, a bad token is 401
 * invalid_access_token, malformed requests are 400 with a plain-text message.
 *
 * One server plays both hosts: `<url>/api` for api.dropboxapi.com and `<url>/content` for
 * content.dropboxapi.com (an endpoint asked of the wrong host is unknown, as with Dropbox).
 * Files live in a temp directory and are streamed both ways (a 200 MiB file is never held in
 * memory); paths compare without regard to case, like Dropbox's.
 *
 * As its own process (so that a memory test can measure another process):
 *   node --import tsx test/helpers/dropboxStandIn.ts --token T
 * prints one JSON line {"url", "apiUrl", "contentUrl", "root"} and runs until SIGTERM.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { pathToFileURL } from 'node:url';

/** Dropbox refuses more than 150 MiB in one upload request. */
const MAX_REQUEST_BYTES = 150 * 1024 * 1024;
/** content_hash works on 4 MiB blocks. */
const BLOCK = 4 * 1024 * 1024;
const RPC = new Set(['files/get_metadata', 'files/list_folder', 'files/list_folder/continue', 'files/create_folder_v2', 'files/delete_v2']);
const CONTENT = new Set(['files/download', 'files/upload', 'files/upload_session/start', 'files/upload_session/append_v2', 'files/upload_session/finish']);

export interface Fault {
  /** Answer with this status (429, or 503), with Retry-After: `retryAfter` seconds. */
  status?: number;
  retryAfter?: number;
  /** How many requests to refuse (default 1). */
  count?: number;
  /** Only requests to this endpoint ("files/upload_session/append_v2"); any when absent. */
  endpoint?: string;
}

export interface DropboxStandIn {
  url: string;
  apiUrl: string;
  contentUrl: string;
  /** The account's files: tests may put files here or look at what was written. */
  root: string;
  /** Endpoints asked for, in order ("files/list_folder", ...), including refused ones. */
  calls: string[];
  /** Deviations Dropbox's documentation allows, to exercise a client's handling of them. */
  quirks: { ignoreRange: boolean; pageCap?: number };
  /** Refuses the next requests as rate limited. */
  failNext(fault?: Fault): void;
  stop(): Promise<void>;
}

/** Where a Dropbox path points: existing names in their stored case, then the asked ones. */
interface Place {
  parts: string[];
  abs: string;
  stat?: fs.Stats;
  /** A file stands where one of the parent folders should be. */
  blocked: boolean;
}

interface Session { file: string; offset: number; hasher: ContentHasher }

export async function startDropboxStandIn(options: { token: string }): Promise<DropboxStandIn> {
  const work = await fsp.mkdtemp(path.join(os.tmpdir(), 'dropbox-standin-'));
  const root = path.join(work, 'files');
  const spool = path.join(work, 'spool'); // uploads in progress, outside the account
  await fsp.mkdir(root);
  await fsp.mkdir(spool);
  const expected = crypto.createHash('sha256').update(`Bearer ${options.token}`).digest();
  const calls: string[] = [];
  const quirks: DropboxStandIn['quirks'] = { ignoreRange: false };
  const faults: { status: number; retryAfter: number; count: number; endpoint?: string }[] = [];
  const sessions = new Map<string, Session>();
  /** content_hash and rev per file, valid while its inode, size and mtime stay the same. */
  const known = new Map<string, { ino: number; size: number; mtimeMs: number; hash: string; rev: string }>();
  let revs = 0;
  const nextRev = () => (++revs).toString(16).padStart(9, '0');

  async function locate(dbxPath: unknown, tag: string): Promise<Place> {
    const segments = parsePath(dbxPath, tag);
    let abs = root;
    let stat: fs.Stats | undefined = await fsp.stat(root);
    let blocked = false;
    const parts: string[] = [];
    for (const segment of segments) {
      let name = segment;
      if (stat?.isDirectory()) {
        const exact = await fsp.stat(path.join(abs, segment)).catch(() => undefined);
        const found = exact ? segment : (await fsp.readdir(abs)).find((n) => n.toLowerCase() === segment.toLowerCase());
        name = found ?? segment;
        stat = exact ?? (found ? await fsp.stat(path.join(abs, found)) : undefined);
      } else {
        if (stat) blocked = true;
        stat = undefined;
      }
      parts.push(name);
      abs = path.join(abs, name);
    }
    return { parts, abs, stat, blocked };
  }

  async function fileInfo(abs: string, stat: fs.Stats) {
    const cached = known.get(abs);
    if (cached && cached.ino === stat.ino && cached.size === stat.size && cached.mtimeMs === stat.mtimeMs) return cached;
    const hasher = new ContentHasher();
    for await (const chunk of fs.createReadStream(abs)) hasher.update(chunk as Buffer);
    const info = { ino: stat.ino, size: stat.size, mtimeMs: stat.mtimeMs, hash: hasher.digest(), rev: nextRev() };
    known.set(abs, info);
    return info;
  }

  async function metadata(place: Place): Promise<Record<string, unknown>> {
    const stat = place.stat ?? (await fsp.stat(place.abs));
    const display = `/${place.parts.join('/')}`;
    const common = { name: place.parts.at(-1) ?? '', path_lower: display.toLowerCase(), path_display: display, id: `id:${stat.ino}` };
    if (stat.isDirectory()) return { '.tag': 'folder', ...common };
    const info = await fileInfo(place.abs, stat);
    const modified = iso(stat.mtimeMs);
    return { '.tag': 'file', ...common, client_modified: modified, server_modified: modified, rev: info.rev, size: stat.size, is_downloadable: true, content_hash: info.hash };
  }

  /** What list_folder walks: direct children, or the whole tree (the folder first) when recursive. */
  async function listing(dir: Place, recursive: boolean): Promise<Place[]> {
    const out: Place[] = recursive && dir.parts.length > 0 ? [dir] : [];
    const walk = async (place: Place): Promise<void> => {
      for (const name of await fsp.readdir(place.abs)) {
        const abs = path.join(place.abs, name);
        const child: Place = { parts: [...place.parts, name], abs, stat: await fsp.stat(abs), blocked: false };
        out.push(child);
        if (recursive && child.stat?.isDirectory()) await walk(child);
      }
    };
    await walk(dir);
    const key = (p: Place) => `/${p.parts.join('/')}`.toLowerCase();
    return out.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  }

  /** One page after `after` (a path_lower); the cursor holds everything needed to go on, so it can be reused. */
  async function page(dir: Place, recursive: boolean, limit: number, after: string) {
    const all = (await listing(dir, recursive)).filter((p) => `/${p.parts.join('/')}`.toLowerCase() > after);
    const size = Math.min(limit, quirks.pageCap ?? limit);
    const entries = all.slice(0, size);
    const last = entries.at(-1);
    const state = { d: dir.parts, r: recursive, l: limit, a: last ? `/${last.parts.join('/')}`.toLowerCase() : after };
    const cursor = Buffer.from(JSON.stringify(state)).toString('base64url');
    return { entries: await Promise.all(entries.map(metadata)), cursor, has_more: all.length > entries.length };
  }

  /** Streams the request body into `file`, hashing it; refuses more than Dropbox takes in one request. */
  async function receive(req: http.IncomingMessage, file: string, hasher: ContentHasher, append: boolean): Promise<number> {
    let received = 0;
    const count = new Transform({
      transform(chunk: Buffer, _enc, done) {
        received += chunk.length;
        if (received > MAX_REQUEST_BYTES) return done(new Fail(413, 'request body too large'));
        hasher.update(chunk);
        done(null, chunk);
      },
    });
    await pipeline(req, count, fs.createWriteStream(file, { flags: append ? 'a' : 'w' }));
    return received;
  }

  /** Moves a received file into place (what upload and upload_session/finish end with). */
  async function commit(spooled: string, hasher: ContentHasher, target: { path?: unknown; mode?: unknown }): Promise<string> {
    let place: Place;
    try {
      place = await locate(target.path, 'path');
      const mode = typeof target.mode === 'string' ? target.mode : (target.mode as { '.tag'?: unknown } | undefined)?.['.tag'] ?? 'add';
      if (place.parts.length === 0) throw apiError(['path', 'malformed_path']);
      if (place.blocked) throw apiError(['path', 'conflict', 'file']);
      if (place.stat?.isDirectory()) throw apiError(['path', 'conflict', 'folder']);
      if (place.stat && mode !== 'overwrite') throw apiError(['path', 'conflict', 'file']);
      await fsp.mkdir(path.dirname(place.abs), { recursive: true });
      await fsp.rename(spooled, place.abs);
    } catch (err) {
      await fsp.rm(spooled, { force: true });
      throw err;
    }
    const stat = await fsp.stat(place.abs);
    known.set(place.abs, { ino: stat.ino, size: stat.size, mtimeMs: stat.mtimeMs, hash: hasher.digest(), rev: nextRev() });
    return JSON.stringify(await metadata({ ...place, stat }));
  }

  /** Appends a request's body to a session; a body cut short leaves the session as it was. */
  async function append(req: http.IncomingMessage, session: Session): Promise<void> {
    const hasher = session.hasher.clone();
    try {
      session.offset += await receive(req, session.file, hasher, true);
      session.hasher = hasher;
    } catch (err) {
      await fsp.truncate(session.file, session.offset).catch(() => {});
      throw err;
    }
  }

  function session(cursor: unknown, prefix: string[]): Session {
    const c = cursor as { session_id?: unknown; offset?: unknown } | undefined;
    const found = typeof c?.session_id === 'string' ? sessions.get(c.session_id) : undefined;
    if (!found) throw apiError([...prefix, 'not_found']);
    if (c?.offset !== found.offset) throw apiError([...prefix, 'incorrect_offset'], { correct_offset: found.offset });
    return found;
  }

  async function rpc(name: string, arg: Record<string, unknown>): Promise<string> {
    switch (name) {
      case 'files/get_metadata': {
        if (arg.path === '') throw badRequest(name, 'request body: path: The root folder is unsupported.');
        const place = await locate(arg.path, 'path');
        if (!place.stat) throw apiError(['path', 'not_found']);
        return JSON.stringify(await metadata(place));
      }
      case 'files/list_folder': {
        const limit = arg.limit ?? 2000;
        if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > 2000) throw badRequest(name, 'request body: limit: must be 1..2000');
        const place = await locate(arg.path, 'path');
        if (!place.stat) throw apiError(['path', 'not_found']);
        if (!place.stat.isDirectory()) throw apiError(['path', 'not_folder']);
        return JSON.stringify(await page(place, arg.recursive === true, limit, ''));
      }
      case 'files/list_folder/continue': {
        let state: { d: string[]; r: boolean; l: number; a: string };
        try {
          state = JSON.parse(Buffer.from(String(arg.cursor), 'base64url').toString()) as typeof state;
          if (!Array.isArray(state.d) || typeof state.a !== 'string' || typeof state.l !== 'number') throw new Error('shape');
        } catch {
          throw badRequest(name, 'Invalid "cursor" parameter');
        }
        const place = await locate(state.d.length ? `/${state.d.join('/')}` : '', 'path');
        if (!place.stat?.isDirectory()) throw apiError(['reset']);
        return JSON.stringify(await page(place, state.r, state.l, state.a));
      }
      case 'files/create_folder_v2': {
        const place = await locate(arg.path, 'path');
        if (place.parts.length === 0) throw apiError(['path', 'malformed_path']);
        if (place.blocked || place.stat?.isFile()) throw apiError(['path', 'conflict', 'file']);
        if (place.stat) throw apiError(['path', 'conflict', 'folder']);
        await fsp.mkdir(place.abs, { recursive: true });
        return JSON.stringify({ metadata: await metadata(place) });
      }
      case 'files/delete_v2': {
        const place = await locate(arg.path, 'path_lookup');
        if (place.parts.length === 0) throw apiError(['path_lookup', 'malformed_path']);
        if (!place.stat) throw apiError(['path_lookup', 'not_found']);
        const meta = await metadata(place);
        // parent_rev: "perform delete if given rev matches the existing file's latest rev"; not for folders.
        if (arg.parent_rev !== undefined && place.stat.isDirectory()) throw apiError(['path_lookup', 'not_file']);
        if (arg.parent_rev !== undefined && arg.parent_rev !== meta.rev) throw apiError(['path_write', 'conflict', 'file']);
        await fsp.rm(place.abs, { recursive: true, force: true });
        return JSON.stringify({ metadata: meta });
      }
    }
    throw new Fail(404, 'Unknown API function');
  }

  async function content(name: string, arg: Record<string, unknown>, req: http.IncomingMessage, res: http.ServerResponse): Promise<string | undefined> {
    if (name === 'files/download') {
      if (arg.path === '') throw badRequest(name, 'request body: path: must start with "/"');
      const place = await locate(arg.path, 'path');
      if (!place.stat) throw apiError(['path', 'not_found']);
      if (place.stat.isDirectory()) throw apiError(['path', 'not_file']);
      const size = place.stat.size;
      const range = quirks.ignoreRange ? undefined : parseRange(req.headers.range, size);
      const [start, end] = range ?? [0, size - 1];
      res.writeHead(range ? 206 : 200, {
        'content-type': 'application/octet-stream',
        'content-length': String(end - start + 1),
        'accept-ranges': 'bytes',
        'dropbox-api-result': headerSafe(await metadata(place)),
        ...(range ? { 'content-range': `bytes ${start}-${end}/${size}` } : {}),
      });
      if (end < start) res.end();
      else await pipeline(fs.createReadStream(place.abs, { start, end }), res);
      return undefined;
    }
    const type = req.headers['content-type'] ?? '';
    if (type !== 'application/octet-stream' && type !== 'text/plain; charset=dropbox-cors-hack') {
      throw badRequest(name, `Bad HTTP "Content-Type" header: "${type}". Expecting one of "application/octet-stream", "text/plain; charset=dropbox-cors-hack".`);
    }
    if (Number(req.headers['content-length'] ?? 0) > MAX_REQUEST_BYTES) throw new Fail(413, 'request body too large');
    switch (name) {
      case 'files/upload': {
        const spooled = path.join(spool, crypto.randomUUID());
        const hasher = new ContentHasher();
        try {
          await receive(req, spooled, hasher, false);
        } catch (err) {
          await fsp.rm(spooled, { force: true });
          throw err;
        }
        return commit(spooled, hasher, arg);
      }
      case 'files/upload_session/start': {
        const id = `pid_upload_session:${crypto.randomBytes(12).toString('base64url')}`;
        const started: Session = { file: path.join(spool, crypto.randomUUID()), offset: 0, hasher: new ContentHasher() };
        await fsp.writeFile(started.file, '');
        await append(req, started);
        sessions.set(id, started);
        return JSON.stringify({ session_id: id });
      }
      case 'files/upload_session/append_v2': {
        await append(req, session(arg.cursor, []));
        return 'null';
      }
      case 'files/upload_session/finish': {
        const found = session(arg.cursor, ['lookup_failed']);
        await append(req, found);
        sessions.delete((arg.cursor as { session_id: string }).session_id);
        return commit(found.file, found.hasher, (arg.commit ?? {}) as Record<string, unknown>);
      }
    }
    throw new Fail(404, 'Unknown API function');
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://stand-in');
    const match = /^\/(api|content)\/2\/(.+)$/.exec(url.pathname);
    const name = match?.[2] ?? '';
    if (!match || !(match[1] === 'api' ? RPC : CONTENT).has(name)) throw new Fail(404, 'Unknown API function');
    calls.push(name);
    if (req.method !== 'POST' && !(name === 'files/download' && req.method === 'GET')) throw new Fail(405, 'Method not allowed');
    const auth = req.headers.authorization;
    if (!auth) throw badRequest(name, 'Must provide HTTP header "Authorization" or URL parameter "authorization".');
    if (!crypto.timingSafeEqual(crypto.createHash('sha256').update(auth).digest(), expected)) {
      throw new Fail(401, JSON.stringify({ error_summary: 'invalid_access_token/..', error: { '.tag': 'invalid_access_token' } }), { 'content-type': 'application/json' });
    }
    const fault = faults.find((f) => f.endpoint === undefined || f.endpoint === name);
    if (fault) {
      if (--fault.count <= 0) faults.splice(faults.indexOf(fault), 1);
      const headers = { 'retry-after': String(fault.retryAfter), 'content-type': 'application/json' };
      if (fault.status !== 429) throw new Fail(fault.status, 'Service Unavailable', { 'retry-after': String(fault.retryAfter) });
      throw new Fail(429, JSON.stringify({ error_summary: 'too_many_requests/..', error: { reason: { '.tag': 'too_many_requests' }, retry_after: fault.retryAfter } }), headers);
    }
    let answer: string | undefined;
    if (match[1] === 'api') {
      if (!/^application\/json\s*(;|$)/.test(req.headers['content-type'] ?? '')) throw badRequest(name, 'Bad HTTP "Content-Type" header. Expecting "application/json".');
      answer = await rpc(name, await readJson(req, name));
    } else {
      const raw = req.headers['dropbox-api-arg'] ?? url.searchParams.get('arg');
      if (typeof raw !== 'string') throw badRequest(name, 'Must provide HTTP header "Dropbox-API-Arg" or URL parameter "arg".');
      // Header values reach us as latin1: an unescaped non-ASCII character would arrive garbled.
      if (/[^\x20-\x7e]/.test(raw)) throw badRequest(name, 'HTTP header "Dropbox-API-Arg": could not decode input as JSON (escape non-ASCII as \\uXXXX)');
      let arg: Record<string, unknown>;
      try {
        arg = JSON.parse(raw) as Record<string, unknown>;
      } catch {
        throw badRequest(name, 'HTTP header "Dropbox-API-Arg": could not decode input as JSON');
      }
      answer = await content(name, arg, req, res);
    }
    if (answer !== undefined) res.writeHead(200, { 'content-type': 'application/json' }).end(answer);
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (res.headersSent) return void res.destroy();
      const fail = err instanceof Fail ? err : new Fail(500, 'Internal Server Error');
      res.writeHead(fail.status, { 'content-type': 'text/plain; charset=utf-8', ...fail.headers }).end(fail.body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    url: base,
    apiUrl: `${base}/api`,
    contentUrl: `${base}/content`,
    root,
    calls,
    quirks,
    failNext(fault = {}) {
      faults.push({ status: fault.status ?? 429, retryAfter: fault.retryAfter ?? 1, count: fault.count ?? 1, ...(fault.endpoint ? { endpoint: fault.endpoint } : {}) });
    },
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await fsp.rm(work, { recursive: true, force: true });
    },
  };
}

/** An HTTP Range header as [start, end] inclusive, undefined to send everything; throws 416 when unsatisfiable. */
function parseRange(header: string | undefined, size: number): [number, number] | undefined {
  const m = header ? /^bytes=(\d*)-(\d*)$/.exec(header.trim()) : null;
  if (!m || (m[1] === '' && m[2] === '')) return undefined;
  const unsatisfiable = new Fail(416, '', { 'content-range': `bytes */${size}` });
  if (m[1] === '') {
    const suffix = Number(m[2]);
    if (suffix === 0 || size === 0) throw unsatisfiable;
    return [Math.max(0, size - suffix), size - 1];
  }
  const start = Number(m[1]);
  const end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  if (start >= size || end < start) throw unsatisfiable;
  return [start, end];
}

/** An answer other than 200, thrown by the handlers. */
class Fail extends Error {
  constructor(readonly status: number, readonly body: string, readonly headers: Record<string, string> = {}) {
    super(`HTTP ${status}`);
  }
}

/**
 * An endpoint error as Dropbox documents it: 409, the tags joined into error_summary (Dropbox
 * adds a varying number of dots so that clients parse it rather than compare it) and the
 * same union nested in error.
 */
function apiError(tags: string[], extra: Record<string, unknown> = {}): Fail {
  let error: Record<string, unknown> = { '.tag': tags.at(-1), ...extra };
  for (let i = tags.length - 2; i >= 0; i--) error = { '.tag': tags[i], [tags[i] as string]: error };
  return new Fail(409, JSON.stringify({ error_summary: `${tags.join('/')}/..`, error }), { 'content-type': 'application/json' });
}

/** A malformed request: 400 with a plain-text message, as Dropbox answers. */
function badRequest(name: string, message: string): Fail {
  return new Fail(400, `Error in call to API function "${name}": ${message}`);
}

/** A Dropbox path as segments ("" is the root); empty, "." and ".." segments are malformed. */
function parsePath(value: unknown, tag: string): string[] {
  if (value === '') return [];
  if (typeof value !== 'string' || !value.startsWith('/')) throw new Fail(400, `request body: path: '${String(value)}' did not match pattern '(/(.|[\\r\\n])*)?'`);
  const segments = value.slice(1).split('/');
  for (const s of segments) {
    if (s === '' || s === '.' || s === '..' || s.includes('\0') || Buffer.byteLength(s) > 255) throw apiError([tag, 'malformed_path']);
  }
  return segments;
}

async function readJson(req: http.IncomingMessage, name: string): Promise<Record<string, unknown>> {
  const parts: Buffer[] = [];
  let length = 0;
  for await (const chunk of req) {
    length += (chunk as Buffer).length;
    if (length > 1024 * 1024) throw badRequest(name, 'request body too large');
    parts.push(chunk as Buffer);
  }
  try {
    const value: unknown = JSON.parse(Buffer.concat(parts).toString('utf8'));
    if (value && typeof value === 'object') return value as Record<string, unknown>;
  } catch { /* answered below */ }
  throw badRequest(name, 'request body: could not decode input as JSON');
}

/** JSON made "HTTP header safe" as Dropbox asks: 0x7F and non-ASCII as \uXXXX. */
function headerSafe(value: unknown): string {
  return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Dropbox timestamps: ISO 8601 in UTC, to the second. */
function iso(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Dropbox's content_hash: SHA-256 of the concatenated SHA-256 digests of each 4 MiB block. */
class ContentHasher {
  private blocks: Buffer[] = [];
  private block = crypto.createHash('sha256');
  private inBlock = 0;

  update(data: Buffer): void {
    for (let at = 0; at < data.length;) {
      const n = Math.min(BLOCK - this.inBlock, data.length - at);
      this.block.update(data.subarray(at, at + n));
      this.inBlock += n;
      at += n;
      if (this.inBlock === BLOCK) {
        this.blocks.push(this.block.digest());
        this.block = crypto.createHash('sha256');
        this.inBlock = 0;
      }
    }
  }

  /** A copy to hash a request into, kept only if the request completes. */
  clone(): ContentHasher {
    const copy = new ContentHasher();
    copy.blocks = [...this.blocks];
    copy.block = this.block.copy();
    copy.inBlock = this.inBlock;
    return copy;
  }

  digest(): string {
    const blocks = this.inBlock > 0 ? [...this.blocks, this.block.copy().digest()] : this.blocks;
    return crypto.createHash('sha256').update(Buffer.concat(blocks)).digest('hex');
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const at = process.argv.indexOf('--token');
  const token = at > 0 ? process.argv[at + 1] : undefined;
  if (!token) {
    process.stderr.write('usage: node --import tsx test/helpers/dropboxStandIn.ts --token TOKEN\n');
    process.exit(2);
  }
  const standIn = await startDropboxStandIn({ token });
  process.stdout.write(`${JSON.stringify({ url: standIn.url, apiUrl: standIn.apiUrl, contentUrl: standIn.contentUrl, root: standIn.root })}\n`);
  const stop = () => void standIn.stop().finally(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}
