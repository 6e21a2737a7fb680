import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { AppError } from '../errors.ts';

/**
 * Unpacking an algorithm's source: a tar.gz body sent by a stranger. Nothing in it is trusted,
 * so the reader is our own small tar parser over node's gunzip, every limit is checked before
 * the bytes it covers are inflated, and nothing is ever written through a link: links are made
 * last, after every file, and each must then resolve inside the destination.
 */

export interface ExtractLimits {
  maxCompressedBytes: number;
  /** File contents, hard link copies, extended headers and anything after the end marker. */
  maxTotalBytes: number;
  /** Files, directories (also those only implied by a path) and links. */
  maxEntries: number;
  maxFileBytes: number;
}

const MiB = 1024 * 1024;

export const DEFAULT_EXTRACT_LIMITS: ExtractLimits = Object.freeze({
  maxCompressedBytes: 50 * MiB,
  maxTotalBytes: 256 * MiB,
  maxEntries: 20_000,
  maxFileBytes: 100 * MiB,
});

export interface ExtractResult {
  /** Regular files written, hard link copies included. */
  files: number;
  /** Bytes of file content written. */
  bytes: number;
  /** Tree hash (40 lowercase hex), see treeHash. */
  hash: string;
}

const BLOCK = 512;
const MAX_PATH_BYTES = 1024;
const MAX_DEPTH = 32;
/** Extended headers are held in memory whole; real ones are a few hundred bytes. */
const MAX_META_BYTES = 64 * 1024;
/** Without a cap, a stream of ignored global headers would never reach an entry to count. */
const MAX_META_IN_A_ROW = 8;
const INFLATE_CHUNK = 64 * 1024;
const EMPTY_SHA256 = sha256(Buffer.alloc(0));

type Kind = 'file' | 'dir' | 'link';

interface TreeNode {
  kind: Kind;
  /** False for a directory that only a deeper path implied (so far). */
  explicit: boolean;
  mode: number;
  size: number;
  /** sha256 of the content (files), of the target (links), of nothing (directories). */
  digest: string;
}

/**
 * Extracts into `dest` (must exist and be empty). Throws AppError('invalid_archive', msg) for any
 * bad archive, AppError('payload_too_large', msg) when a limit is exceeded. On any throw, dest may
 * hold partial content: the caller deletes dest.
 */
export async function extractTarGz(
  input: AsyncIterable<Buffer> | NodeJS.ReadableStream,
  dest: string,
  limits?: Partial<ExtractLimits>,
): Promise<ExtractResult> {
  const lim: ExtractLimits = { ...DEFAULT_EXTRACT_LIMITS };
  for (const [key, value] of Object.entries(limits ?? {}) as [keyof ExtractLimits, number | undefined][]) {
    if (value !== undefined) lim[key] = value;
  }
  // Containment is checked against the real path: dest itself may sit behind a link (/tmp on macOS).
  const root = await fs.promises.realpath(dest);
  if ((await fs.promises.readdir(root)).length > 0) throw new Error(`extractTarGz: ${dest} is not empty`);
  const extraction = new Extraction(root, lim);
  try {
    await pipeline(gzipOnly(input, lim.maxCompressedBytes), createGunzip({ chunkSize: INFLATE_CHUNK }), (tar: AsyncIterable<Buffer>) =>
      extraction.run(tar),
    );
  } catch (err) {
    throw archiveError(err);
  }
  return extraction.result();
}

/**
 * The hash extractTarGz returns, computed from a tree on disk. Links are read, never followed;
 * anything other than files, directories and links is an error.
 */
export async function hashTree(dir: string): Promise<string> {
  const entries: HashEntry[] = [];
  const walk = async (abs: string, rel: string): Promise<void> => {
    for (const name of await fs.promises.readdir(abs)) {
      const childAbs = path.join(abs, name);
      const childRel = rel === '' ? name : `${rel}/${name}`;
      const st = await fs.promises.lstat(childAbs);
      if (st.isDirectory()) {
        entries.push({ kind: 'dir', mode: 0o755, path: childRel, digest: EMPTY_SHA256 });
        await walk(childAbs, childRel);
      } else if (st.isFile()) {
        entries.push({ kind: 'file', mode: fileMode(st.mode), path: childRel, digest: await sha256File(childAbs) });
      } else if (st.isSymbolicLink()) {
        entries.push({ kind: 'link', mode: 0o777, path: childRel, digest: sha256(Buffer.from(await fs.promises.readlink(childAbs))) });
      } else {
        throw new Error(`hashTree: ${childAbs} is not a file, directory or link`);
      }
    }
  };
  await walk(dir, '');
  return treeHash(entries);
}

interface HashEntry {
  kind: Kind;
  mode: number;
  path: string;
  digest: string;
}

/**
 * Git-like: sha1 over one line per entry, in byte order of the path, so that archive order,
 * owners and mtimes never change it. Modes are already normalized (755/644, 755, 777).
 */
function treeHash(entries: HashEntry[]): string {
  const keyed = entries.map((e) => ({ e, key: Buffer.from(e.path) }));
  keyed.sort((a, b) => Buffer.compare(a.key, b.key));
  const h = crypto.createHash('sha1');
  for (const { e } of keyed) h.update(`${e.kind} ${e.mode.toString(8)} ${e.path}\0${e.digest}\n`);
  return h.digest('hex');
}

function fileMode(headerMode: number): number {
  return (headerMode & 0o111) !== 0 ? 0o755 : 0o644;
}

function sha256(data: Buffer): string {
  return crypto.createHash('sha256').update(data).digest('hex');
}

async function sha256File(file: string): Promise<string> {
  const h = crypto.createHash('sha256');
  for await (const chunk of fs.createReadStream(file, { highWaterMark: INFLATE_CHUNK })) h.update(chunk as Buffer);
  return h.digest('hex');
}

function invalid(message: string): AppError {
  return new AppError('invalid_archive', message);
}

function tooLarge(message: string): AppError {
  return new AppError('payload_too_large', message);
}

/** Names from the archive go into messages quoted and escaped, and not at any length. */
function show(name: string): string {
  return JSON.stringify(name.length > 200 ? `${name.slice(0, 200)}…` : name);
}

function archiveError(err: unknown): unknown {
  if (err instanceof AppError) return err;
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'Z_BUF_ERROR') return new AppError('invalid_archive', 'the archive is truncated (the gzip stream ends early)', undefined, err);
  if (typeof code === 'string' && code.startsWith('Z_')) {
    return new AppError('invalid_archive', `the body is not valid gzip data (${(err as Error).message})`, undefined, err);
  }
  return err;
}

/** Passes the body on, once it looks like gzip, until it grows past the compressed limit. */
async function* gzipOnly(input: AsyncIterable<Buffer> | NodeJS.ReadableStream, max: number): AsyncGenerator<Buffer> {
  let seen = 0;
  let head: Buffer | undefined = Buffer.alloc(0);
  for await (const chunk of input) {
    if (typeof chunk === 'string') throw new TypeError('extractTarGz: the input must yield bytes, not strings');
    seen += chunk.length;
    if (seen > max) throw tooLarge(`the archive is larger than the limit of ${max} bytes`);
    if (head === undefined) {
      yield chunk;
      continue;
    }
    head = Buffer.concat([head, chunk]);
    if (head.length < 2) continue;
    if (head[0] !== 0x1f || head[1] !== 0x8b) throw invalid('the body is not a gzip file');
    yield head;
    head = undefined;
  }
  if (head !== undefined) throw invalid('the body is not a gzip file');
}

/** Pulls exact byte counts out of the inflated stream without holding more than a chunk. */
class ByteReader {
  private pending: Buffer = Buffer.alloc(0);
  private readonly source: AsyncIterator<Buffer>;
  /** Offset in the tar stream of the next byte handed out, for messages. */
  offset = 0;

  constructor(source: AsyncIterable<Buffer>) {
    this.source = source[Symbol.asyncIterator]();
  }

  private async more(): Promise<boolean> {
    const next = await this.source.next();
    if (next.done) return false;
    this.pending = this.pending.length === 0 ? next.value : Buffer.concat([this.pending, next.value]);
    return true;
  }

  /** Exactly n bytes (n small), or undefined when the stream ends cleanly before them. */
  async exact(n: number, what: string): Promise<Buffer | undefined> {
    while (this.pending.length < n) {
      if (!(await this.more())) {
        if (this.pending.length === 0) return undefined;
        throw truncated(what);
      }
    }
    const out = this.pending.subarray(0, n);
    this.pending = this.pending.subarray(n);
    this.offset += n;
    return out;
  }

  /** The next n bytes in pieces, as they are inflated. */
  async *take(n: number, what: string): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      if (this.pending.length === 0 && !(await this.more())) throw truncated(what);
      const piece = this.pending.subarray(0, Math.min(left, this.pending.length));
      this.pending = this.pending.subarray(piece.length);
      this.offset += piece.length;
      left -= piece.length;
      yield piece;
    }
  }

  async skip(n: number, what: string): Promise<void> {
    for await (const _ of this.take(n, what));
  }

  /** Whatever is left, to the end of the stream. */
  async *rest(): AsyncGenerator<Buffer> {
    if (this.pending.length > 0) yield this.pending;
    this.pending = Buffer.alloc(0);
    for (;;) {
      const next = await this.source.next();
      if (next.done) return;
      yield next.value;
    }
  }
}

function truncated(what: string): AppError {
  return invalid(`the archive is truncated (it ends in the middle of ${what})`);
}

function padding(size: number): number {
  return (BLOCK - (size % BLOCK)) % BLOCK;
}

interface Header {
  offset: number;
  name: string;
  mode: number;
  size: number;
  type: string;
  linkname: string;
}

function isZeros(block: Buffer): boolean {
  for (const byte of block) if (byte !== 0) return false;
  return true;
}

// ignoreBOM: a leading U+FEFF is part of a name, not something to strip silently.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function decodeName(bytes: Buffer, offset: number): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw invalid(`the entry at byte ${offset} has a name that is not UTF-8`);
  }
}

/** A NUL-terminated text field. */
function textField(block: Buffer, start: number, length: number, offset: number): string {
  const field = block.subarray(start, start + length);
  const end = field.indexOf(0);
  return decodeName(end < 0 ? field : field.subarray(0, end), offset);
}

/** Octal, or GNU base-256 (high bit of the first byte set) for sizes of 8 GiB and more. */
function numberField(block: Buffer, start: number, length: number, what: string, offset: number): number {
  const field = block.subarray(start, start + length);
  const first = field[0] ?? 0;
  if ((first & 0x80) !== 0) {
    if (first === 0xff) throw invalid(`the header at byte ${offset} has a negative ${what}`);
    let value = first & 0x7f;
    for (const byte of field.subarray(1)) {
      value = value * 256 + byte;
      if (value > Number.MAX_SAFE_INTEGER) throw invalid(`the header at byte ${offset} has a ${what} that is too large`);
    }
    return value;
  }
  const nul = field.indexOf(0);
  const text = field.toString('latin1', 0, nul < 0 ? field.length : nul).trim();
  if (text === '') return 0;
  if (!/^[0-7]+$/.test(text)) throw invalid(`the header at byte ${offset} has a malformed ${what} field`);
  return parseInt(text, 8);
}

function parseHeader(block: Buffer, offset: number): Header {
  // Some old tars summed signed bytes; both sums are accepted, as GNU tar does.
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const byte = i >= 148 && i < 156 ? 0x20 : (block[i] ?? 0);
    unsigned += byte;
    signed += byte > 127 ? byte - 256 : byte;
  }
  let stored: number;
  try {
    stored = numberField(block, 148, 8, 'checksum', offset);
  } catch {
    stored = -1;
  }
  if (stored !== unsigned && stored !== signed) {
    throw invalid(`the header at byte ${offset} has a bad checksum (a corrupt archive, or not a tar archive)`);
  }
  let name = textField(block, 0, 100, offset);
  // GNU's own magic ("ustar  \0") puts other fields where POSIX has the prefix.
  if (block.toString('latin1', 257, 263) === 'ustar\0') {
    const prefix = textField(block, 345, 155, offset);
    if (prefix !== '') name = `${prefix}/${name}`;
  }
  const type = String.fromCharCode(block[156] ?? 0);
  return {
    offset,
    name,
    mode: numberField(block, 100, 8, 'mode', offset),
    size: numberField(block, 124, 12, 'size', offset),
    type: type === '\0' ? '0' : type,
    linkname: textField(block, 157, 100, offset),
  };
}

/** What extended headers say about the next entry. */
interface Overrides {
  path?: string;
  linkpath?: string;
  size?: number;
  longName?: string;
  longLink?: string;
}

function parsePax(body: Buffer, offset: number, into: Overrides): void {
  const bad = () => invalid(`the pax header at byte ${offset} is malformed`);
  let i = 0;
  while (i < body.length) {
    const space = body.indexOf(0x20, i);
    if (space < 0) {
      if (isZeros(body.subarray(i))) return;
      throw bad();
    }
    const lengthText = body.toString('latin1', i, space);
    if (!/^[1-9][0-9]{0,6}$/.test(lengthText)) throw bad();
    const end = i + Number(lengthText);
    if (end > body.length || end <= space + 1 || body[end - 1] !== 0x0a) throw bad();
    const record = body.subarray(space + 1, end - 1);
    const eq = record.indexOf(0x3d);
    if (eq <= 0) throw bad();
    const key = record.toString('latin1', 0, eq);
    const raw = record.subarray(eq + 1);
    // An empty value cancels the key: the header's own field applies again.
    if (key === 'path') into.path = raw.length > 0 ? decodeName(raw, offset) : undefined;
    else if (key === 'linkpath') into.linkpath = raw.length > 0 ? decodeName(raw, offset) : undefined;
    else if (key === 'size') {
      const text = raw.toString('latin1');
      if (text === '') into.size = undefined;
      else if (/^[0-9]{1,15}$/.test(text)) into.size = Number(text);
      else throw bad();
    }
    i = end;
  }
}

/** The name of a GNU 'L'/'K' record: its body up to the first NUL. */
function longName(body: Buffer, offset: number): string {
  const end = body.indexOf(0);
  return decodeName(end < 0 ? body : body.subarray(0, end), offset);
}

/**
 * An archive path made relative and checked: undefined for the root entry itself. A trailing
 * slash (directories) is dropped; anything that could leave dest or alias another entry is refused.
 */
function normalizePath(raw: string): string | undefined {
  let p = raw;
  while (p.startsWith('./')) p = p.slice(2);
  if (p.includes('\0')) throw invalid(`${show(raw)} contains a NUL byte`);
  if (p.startsWith('/')) throw invalid(`${show(raw)} is an absolute path`);
  if (p === '' || p === '.') return undefined;
  if (p.endsWith('/')) p = p.slice(0, -1);
  if (p.includes('\\')) throw invalid(`${show(raw)} contains a backslash`);
  if (Buffer.byteLength(p) > MAX_PATH_BYTES) throw invalid(`${show(raw)} is longer than ${MAX_PATH_BYTES} bytes`);
  const segments = p.split('/');
  if (segments.length > MAX_DEPTH) throw invalid(`${show(raw)} is deeper than ${MAX_DEPTH} levels`);
  for (const segment of segments) {
    if (segment === '') throw invalid(`${show(raw)} has an empty path segment`);
    if (segment === '..') throw invalid(`${show(raw)} contains a ".." segment`);
    if (segment === '.') throw invalid(`${show(raw)} contains a "." segment`);
  }
  return p;
}

const FORBIDDEN_TYPES: Record<string, string> = { '3': 'a character device', '4': 'a block device', '6': 'a FIFO' };

class Extraction {
  private readonly nodes = new Map<string, TreeNode>();
  private readonly links: { path: string; target: string }[] = [];
  private entries = 0;
  private unpacked = 0;
  private files = 0;
  private bytes = 0;

  constructor(
    private readonly root: string,
    private readonly limits: ExtractLimits,
  ) {}

  async run(source: AsyncIterable<Buffer>): Promise<void> {
    const reader = new ByteReader(source);
    let overrides: Overrides = {};
    let metaInARow = 0;
    for (;;) {
      const offset = reader.offset;
      const block = await reader.exact(BLOCK, `the header at byte ${offset}`);
      if (block === undefined) {
        if (metaInARow > 0) throw truncated(`the entry at byte ${offset}`);
        break;
      }
      if (isZeros(block)) {
        const next = await reader.exact(BLOCK, `the end marker at byte ${offset}`);
        if (next !== undefined && !isZeros(next)) throw invalid(`the archive has a lone zero block at byte ${offset}`);
        break;
      }
      const header = parseHeader(block, offset);
      if ('xgLK'.includes(header.type)) {
        if (++metaInARow > MAX_META_IN_A_ROW) throw invalid(`the archive has more than ${MAX_META_IN_A_ROW} extended headers in a row at byte ${offset}`);
        await this.readMeta(reader, header, overrides);
        continue;
      }
      metaInARow = 0;
      const resolved: Header = {
        ...header,
        name: overrides.path ?? overrides.longName ?? header.name,
        linkname: overrides.linkpath ?? overrides.longLink ?? header.linkname,
        size: overrides.size ?? header.size,
      };
      overrides = {};
      await this.entry(reader, resolved);
    }
    // Past the end marker: usually record padding, but a bomb could hide there too.
    for await (const piece of reader.rest()) this.addUnpacked(piece.length);
    await this.makeLinks();
  }

  result(): ExtractResult {
    const entries: HashEntry[] = [];
    for (const [p, node] of this.nodes) entries.push({ kind: node.kind, mode: node.mode, path: p, digest: node.digest });
    return { files: this.files, bytes: this.bytes, hash: treeHash(entries) };
  }

  private addUnpacked(n: number): void {
    this.unpacked += n;
    if (this.unpacked > this.limits.maxTotalBytes) throw tooLarge(`the archive unpacks to more than ${this.limits.maxTotalBytes} bytes`);
  }

  private addEntry(): void {
    if (++this.entries > this.limits.maxEntries) throw tooLarge(`the archive has more than ${this.limits.maxEntries} entries`);
  }

  private async readMeta(reader: ByteReader, header: Header, overrides: Overrides): Promise<void> {
    if (header.size > MAX_META_BYTES) throw tooLarge(`the extended header at byte ${header.offset} is larger than ${MAX_META_BYTES} bytes`);
    this.addUnpacked(header.size);
    const what = `the extended header at byte ${header.offset}`;
    const body = (await reader.exact(header.size, what)) ?? (header.size === 0 ? Buffer.alloc(0) : undefined);
    if (body === undefined) throw truncated(what);
    if (header.type === 'x') parsePax(body, header.offset, overrides);
    else if (header.type === 'L') overrides.longName = longName(body, header.offset);
    else if (header.type === 'K') overrides.longLink = longName(body, header.offset);
    await reader.skip(padding(header.size), what);
  }

  private async entry(reader: ByteReader, header: Header): Promise<void> {
    this.addEntry();
    const { type, name } = header;
    const forbidden = FORBIDDEN_TYPES[type];
    if (forbidden !== undefined) throw invalid(`${show(name)} is ${forbidden} (type '${type}'), which an archive may not contain`);
    const isFile = type === '0' || type === '7';
    // Old (v7) archives mark directories only with a trailing slash.
    const isDir = type === '5' || (isFile && name.endsWith('/'));
    if (!isFile && !isDir && type !== '1' && type !== '2') {
      throw invalid(`${show(name)} has the unsupported entry type ${JSON.stringify(type)}`);
    }
    const p = normalizePath(name);
    if (p === undefined) {
      if (!isDir) throw invalid(`${show(name)} names the archive's root but is not a directory`);
      return this.skipData(reader, header, 'the root entry');
    }
    if (isDir) return this.directory(reader, header, p);
    if (isFile) return this.file(reader, header, p);
    if (type === '2') return this.symlink(reader, header, p);
    return this.hardLink(reader, header, p);
  }

  private async skipData(reader: ByteReader, header: Header, what: string): Promise<void> {
    this.addUnpacked(header.size);
    await reader.skip(header.size + padding(header.size), what);
  }

  /** Refuses p when it collides with an entry or lies under a file or link; true when p is an implied directory. */
  private check(p: string, kind: Kind): boolean {
    let slash = p.indexOf('/');
    while (slash >= 0) {
      const ancestor = p.slice(0, slash);
      const node = this.nodes.get(ancestor);
      if (node?.kind === 'link') throw invalid(`${show(p)} is inside the symlink ${show(ancestor)}`);
      if (node?.kind === 'file') throw invalid(`${show(p)} is inside the file ${show(ancestor)}`);
      slash = p.indexOf('/', slash + 1);
    }
    const previous = this.nodes.get(p);
    if (previous === undefined) return false;
    if (previous.kind === 'dir' && !previous.explicit) {
      if (kind === 'dir') return true;
      throw invalid(`${show(p)} is both a directory and a ${kind === 'link' ? 'symlink' : 'file'}`);
    }
    throw invalid(`the archive contains ${show(p)} twice`);
  }

  /** Creates the directories above p that no entry has made yet. */
  private async makeParents(p: string): Promise<void> {
    let slash = p.indexOf('/');
    while (slash >= 0) {
      const ancestor = p.slice(0, slash);
      if (!this.nodes.has(ancestor)) {
        this.addEntry();
        await this.mkdir(ancestor);
        this.nodes.set(ancestor, { kind: 'dir', explicit: false, mode: 0o755, size: 0, digest: EMPTY_SHA256 });
      }
      slash = p.indexOf('/', slash + 1);
    }
  }

  private async mkdir(p: string): Promise<void> {
    const abs = path.join(this.root, p);
    await collisions(p, fs.promises.mkdir(abs, { mode: 0o755 }));
    await fs.promises.chmod(abs, 0o755);
  }

  private async directory(reader: ByteReader, header: Header, p: string): Promise<void> {
    if (this.check(p, 'dir')) {
      (this.nodes.get(p) as TreeNode).explicit = true;
    } else {
      await this.makeParents(p);
      await this.mkdir(p);
      this.nodes.set(p, { kind: 'dir', explicit: true, mode: 0o755, size: 0, digest: EMPTY_SHA256 });
    }
    await this.skipData(reader, header, show(p));
  }

  private async file(reader: ByteReader, header: Header, p: string): Promise<void> {
    const { size } = header;
    if (size > this.limits.maxFileBytes) throw tooLarge(`${show(p)} is larger than the limit of ${this.limits.maxFileBytes} bytes per file`);
    this.addUnpacked(size);
    this.check(p, 'file');
    await this.makeParents(p);
    const mode = fileMode(header.mode);
    // 'wx' is O_CREAT|O_EXCL: never through a link, never over anything already there.
    const handle = await collisions(p, fs.promises.open(path.join(this.root, p), 'wx', 0o600));
    const hash = crypto.createHash('sha256');
    try {
      for await (const piece of reader.take(size, show(p))) {
        hash.update(piece);
        let written = 0;
        while (written < piece.length) written += (await handle.write(piece, written, piece.length - written)).bytesWritten;
      }
      await handle.chmod(mode);
    } finally {
      await handle.close();
    }
    await reader.skip(padding(size), `the padding after ${show(p)}`);
    this.nodes.set(p, { kind: 'file', explicit: true, mode, size, digest: hash.digest('hex') });
    this.files++;
    this.bytes += size;
  }

  private async symlink(reader: ByteReader, header: Header, p: string): Promise<void> {
    const target = header.linkname;
    if (target === '') throw invalid(`link ${show(p)} has an empty target`);
    if (target.includes('\0')) throw invalid(`link ${show(p)} has a NUL byte in its target`);
    if (target.startsWith('/')) throw invalid(`link ${show(p)} points outside the archive (to the absolute path ${show(target)})`);
    if (Buffer.byteLength(target) > MAX_PATH_BYTES) throw invalid(`link ${show(p)} has a target longer than ${MAX_PATH_BYTES} bytes`);
    this.check(p, 'link');
    await this.makeParents(p);
    this.nodes.set(p, { kind: 'link', explicit: true, mode: 0o777, size: 0, digest: sha256(Buffer.from(target)) });
    this.links.push({ path: p, target });
    await this.skipData(reader, header, show(p));
  }

  /** A copy: a real hard link would let a later write through one name change the other. */
  private async hardLink(reader: ByteReader, header: Header, p: string): Promise<void> {
    const notEarlierFile = () => invalid(`hard link ${show(p)} points to ${show(header.linkname)}, which is not an earlier file in the archive`);
    let targetPath: string | undefined;
    try {
      targetPath = normalizePath(header.linkname);
    } catch {
      throw notEarlierFile();
    }
    const target = targetPath === undefined ? undefined : this.nodes.get(targetPath);
    if (targetPath === undefined || target?.kind !== 'file') throw notEarlierFile();
    if (target.size > this.limits.maxFileBytes) throw tooLarge(`${show(p)} is larger than the limit of ${this.limits.maxFileBytes} bytes per file`);
    this.addUnpacked(target.size);
    this.check(p, 'file');
    await this.makeParents(p);
    const abs = path.join(this.root, p);
    await collisions(p, fs.promises.copyFile(path.join(this.root, targetPath), abs, fs.constants.COPYFILE_EXCL));
    await fs.promises.chmod(abs, target.mode);
    this.nodes.set(p, { ...target });
    this.files++;
    this.bytes += target.size;
    await this.skipData(reader, header, show(p));
  }

  /** Last, so that no file is ever written through one; then each must land inside root. */
  private async makeLinks(): Promise<void> {
    for (const link of this.links) await collisions(link.path, fs.promises.symlink(link.target, path.join(this.root, link.path)));
    for (const link of this.links) {
      let resolved: string | undefined;
      try {
        resolved = await fs.promises.realpath(path.join(this.root, link.path));
      } catch {
        // Dangling, a loop, or through a file: nothing inside the archive to point at.
      }
      if (resolved === undefined || (resolved !== this.root && !resolved.startsWith(this.root + path.sep))) {
        throw invalid(`link ${show(link.path)} points outside the archive (to ${show(link.target)})`);
      }
    }
  }
}

/** Two names that the file system takes for one (case-insensitive ones) are a bad archive. */
async function collisions<T>(p: string, operation: Promise<T>): Promise<T> {
  try {
    return await operation;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ENOTDIR') throw invalid(`${show(p)} collides with another entry of the archive`);
    throw err;
  }
}
