/**
 * packDirectory(): a directory as a gzipped tar stream, the form `uploadSource()` takes. A
 * minimal ustar writer (with PAX records for names too long for ustar), so the client needs
 * no tar package and never holds the archive in memory.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Readable, pipeline } from 'node:stream';
import { createGzip } from 'node:zlib';
import { AlgohostError } from './errors.ts';

export interface PackOptions {
  /**
   * Whether to include an entry, by its path relative to the directory (`/`-separated);
   * a directory left out is left out with everything in it. Default: everything.
   */
  filter?: (relativePath: string, isDirectory: boolean) => boolean;
}

const BLOCK = 512;

function octal(value: number, width: number): string {
  return value.toString(8).padStart(width - 1, '0') + '\0';
}

/** ustar's own long names: a prefix up to 155 bytes and a name up to 100, split at a slash. */
function split(name: string): { prefix: string; name: string } | undefined {
  if (Buffer.byteLength(name) <= 100) return { prefix: '', name };
  const cut = name.lastIndexOf('/', name.length - 2);
  if (cut <= 0 || Buffer.byteLength(name.slice(0, cut)) > 155 || Buffer.byteLength(name.slice(cut + 1)) > 100) return undefined;
  return { prefix: name.slice(0, cut), name: name.slice(cut + 1) };
}

function header(fullName: string, type: '0' | '2' | '5' | 'x', size: number, mode: number, mtime: number, linkname = ''): Buffer {
  const h = Buffer.alloc(BLOCK);
  // A name that does not fit comes after a PAX record with the whole of it; this is its stand-in.
  const { prefix, name } = split(fullName) ?? { prefix: '', name: fullName };
  h.write(name, 0, 100, 'utf8');
  h.write(octal(mode & 0o7777, 8), 100, 'ascii');
  h.write(octal(0, 8), 108, 'ascii');
  h.write(octal(0, 8), 116, 'ascii');
  h.write(octal(size, 12), 124, 'ascii');
  h.write(octal(Math.floor(mtime), 12), 136, 'ascii');
  h.write('        ', 148, 'ascii');
  h.write(type, 156, 'ascii');
  h.write(linkname, 157, 100, 'utf8');
  h.write('ustar\0' + '00', 257, 'ascii');
  h.write(prefix, 345, 155, 'utf8');
  let sum = 0;
  for (const byte of h) sum += byte;
  h.write(octal(sum, 7) + ' ', 148, 'ascii');
  return h;
}

/** A PAX extended header carrying what ustar cannot hold (long paths and link targets). */
function pax(records: Record<string, string>, mtime: number): Buffer[] {
  let body = '';
  for (const [key, value] of Object.entries(records)) {
    // Each record starts with its own length in bytes, that number's digits included.
    const base = Buffer.byteLength(` ${key}=${value}\n`);
    let len = base + 1;
    while (len !== base + String(len).length) len = base + String(len).length;
    body += `${len} ${key}=${value}\n`;
  }
  const data = Buffer.from(body, 'utf8');
  return [header('PaxHeader', 'x', data.length, 0o644, mtime), data, padding(data.length)];
}

const padding = (size: number) => Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK);

function entryHeader(name: string, type: '0' | '2' | '5', size: number, stat: fs.Stats, linkname = ''): Buffer[] {
  const records: Record<string, string> = {};
  if (!split(name)) records.path = name;
  if (Buffer.byteLength(linkname) > 100) records.linkpath = linkname;
  const mtime = stat.mtimeMs / 1000;
  const ext = Object.keys(records).length ? pax(records, mtime) : [];
  return [...ext, header(name, type, size, stat.mode, mtime, linkname)];
}

async function* walk(root: string, rel: string, options: PackOptions): AsyncGenerator<Buffer> {
  const names = (await fs.promises.readdir(path.join(root, rel))).sort();
  for (const name of names) {
    const relPath = rel ? `${rel}/${name}` : name;
    const full = path.join(root, relPath);
    const stat = await fs.promises.lstat(full);
    if (options.filter && !options.filter(relPath, stat.isDirectory())) continue;
    if (stat.isDirectory()) {
      yield* entryHeader(`${relPath}/`, '5', 0, stat);
      yield* walk(root, relPath, options);
    } else if (stat.isSymbolicLink()) {
      yield* entryHeader(relPath, '2', 0, stat, await fs.promises.readlink(full));
    } else if (stat.isFile()) {
      yield* entryHeader(relPath, '0', stat.size, stat);
      let sent = 0;
      // Exactly the size the header declared, even if the file changes meanwhile.
      if (stat.size > 0) {
        for await (const chunk of fs.createReadStream(full, { start: 0, end: stat.size - 1 })) {
          sent += (chunk as Buffer).length;
          yield chunk as Buffer;
        }
      }
      if (sent !== stat.size) throw new AlgohostError(`${relPath} shrank while it was being packed`, 'invalid_archive');
      yield padding(stat.size);
    }
    // Sockets, FIFOs and devices have no place in a source tree (the server refuses them): skipped.
  }
}

async function* tar(root: string, options: PackOptions): AsyncGenerator<Buffer> {
  const stat = await fs.promises.stat(root);
  if (!stat.isDirectory()) throw new AlgohostError(`${root} is not a directory`, 'invalid_path');
  yield* walk(root, '', options);
  yield Buffer.alloc(BLOCK * 2);
}

/** The directory as a tar.gz stream (regular files, directories and symlinks; paths relative to it). */
export function packDirectory(dir: string, options: PackOptions = {}): Readable {
  const gzip = createGzip();
  // pipeline destroys the gzip stream with any error, so whoever reads the archive sees it.
  pipeline(Readable.from(tar(path.resolve(dir), options)), gzip, () => {});
  return gzip;
}
