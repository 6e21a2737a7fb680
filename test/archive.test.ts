import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip, gunzipSync, gzipSync } from 'node:zlib';
import { AppError } from '../src/errors.ts';
import { extractTarGz, hashTree, type ExtractLimits, type ExtractResult } from '../src/algorithms/archive.ts';

const MiB = 1024 * 1024;
const temps: string[] = [];

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-archive-'));
  temps.push(dir);
  return dir;
}

after(() => {
  for (const dir of temps) fs.rmSync(dir, { recursive: true, force: true });
});

// --- A small tar writer: enough to build well-formed and deliberately broken archives. ---

interface Entry {
  name: string;
  type?: string;
  mode?: number;
  data?: string | Buffer;
  linkname?: string;
  prefix?: string;
  /** What the header claims, when it should differ from the data that follows. */
  size?: number;
  base256Size?: boolean;
  mtime?: number;
  uid?: number;
}

function octal(block: Buffer, offset: number, length: number, value: number): void {
  block.write(`${value.toString(8).padStart(length - 1, '0')}\0`, offset, length, 'latin1');
}

function header(e: Entry): Buffer {
  const block = Buffer.alloc(512);
  const name = Buffer.from(e.name);
  assert.ok(name.length <= 100, `test writer: ${e.name} does not fit the name field`);
  name.copy(block, 0);
  octal(block, 100, 8, e.mode ?? (e.type === '5' ? 0o755 : 0o644));
  octal(block, 108, 8, e.uid ?? 1000);
  octal(block, 116, 8, e.uid ?? 1000);
  const size = e.size ?? bytes(e.data).length;
  if (e.base256Size) {
    let v = size;
    for (let i = 135; i > 124; i--) {
      block[i] = v % 256;
      v = Math.floor(v / 256);
    }
    block[124] = 0x80;
  } else {
    octal(block, 124, 12, size);
  }
  octal(block, 136, 12, e.mtime ?? 1_700_000_000);
  block.write(e.type ?? '0', 156, 'latin1');
  if (e.linkname !== undefined) Buffer.from(e.linkname).copy(block, 157);
  block.write('ustar\0', 257, 'latin1');
  block.write('00', 263, 'latin1');
  if (e.prefix !== undefined) Buffer.from(e.prefix).copy(block, 345);
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
  return block;
}

function bytes(data: string | Buffer | undefined): Buffer {
  return typeof data === 'string' ? Buffer.from(data) : (data ?? Buffer.alloc(0));
}

function pad(n: number): Buffer {
  return Buffer.alloc((512 - (n % 512)) % 512);
}

function tar(entries: Entry[], { end = true } = {}): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    const data = bytes(e.data);
    parts.push(header(e), data, pad(data.length));
  }
  if (end) parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

const tgz = (entries: Entry[]): Buffer => gzipSync(tar(entries));

/** A pax extended header ('x', or 'g' for global) carrying `records`. */
function pax(records: Record<string, string>, type = 'x'): Entry {
  let body = '';
  for (const [key, value] of Object.entries(records)) {
    const rest = Buffer.byteLength(` ${key}=${value}\n`);
    let length = rest + String(rest).length;
    if (String(length).length !== String(rest).length) length = rest + String(length).length;
    body += `${length} ${key}=${value}\n`;
  }
  return { name: 'PaxHeaders/x', type, data: body };
}

/** A GNU long name ('L') or long link ('K') record. */
const gnuLong = (name: string, type: 'L' | 'K'): Entry => ({ name: '././@LongLink', type, data: `${name}\0` });

/** The body in uneven pieces, as a network would deliver it. */
async function* body(buf: Buffer, piece = 7919): AsyncGenerator<Buffer> {
  for (let i = 0; i < buf.length; i += piece) yield buf.subarray(i, i + piece);
}

async function extract(archive: Buffer, limits?: Partial<ExtractLimits>): Promise<{ dest: string; result: ExtractResult }> {
  const dest = tempDir();
  const result = await extractTarGz(body(archive), dest, limits);
  return { dest, result };
}

async function refused(archive: Buffer, code: string, message: RegExp, options: { limits?: Partial<ExtractLimits>; dest?: string } = {}): Promise<void> {
  await assert.rejects(extractTarGz(body(archive), options.dest ?? tempDir(), options.limits), (err: unknown) => {
    assert.ok(err instanceof AppError, `expected an AppError, got ${String(err)}`);
    assert.equal(err.code, code);
    assert.match(err.message, message);
    return true;
  });
}

const modeOf = (file: string): number => fs.lstatSync(file).mode & 0o7777;
const read = (dest: string, rel: string): string => fs.readFileSync(path.join(dest, rel), 'utf8');

describe('extractTarGz: good archives', () => {
  test('a nested tree: directories, implied directories, contents, counts, modes, hash', async () => {
    const { dest, result } = await extract(
      tgz([
        { name: 'src/', type: '5' },
        { name: 'src/main.py', data: 'print(1)\n' },
        { name: 'src/lib/util.py', data: 'X = 2\n' },
        { name: 'deep/a/b/c.txt', data: 'deep' },
        { name: 'empty', data: '' },
      ]),
    );
    assert.equal(read(dest, 'src/main.py'), 'print(1)\n');
    assert.equal(read(dest, 'src/lib/util.py'), 'X = 2\n');
    assert.equal(read(dest, 'deep/a/b/c.txt'), 'deep');
    assert.equal(read(dest, 'empty'), '');
    assert.deepEqual(fs.readdirSync(dest).sort(), ['deep', 'empty', 'src']);
    for (const dir of ['src', 'src/lib', 'deep', 'deep/a', 'deep/a/b']) assert.equal(modeOf(path.join(dest, dir)), 0o755, dir);
    assert.equal(modeOf(path.join(dest, 'src/main.py')), 0o644);
    assert.deepEqual({ files: result.files, bytes: result.bytes }, { files: 4, bytes: 9 + 6 + 4 });
    assert.match(result.hash, /^[0-9a-f]{40}$/);
    assert.equal(await hashTree(dest), result.hash);
  });

  test('any execute bit makes a file 755, none makes it 644; setuid and friends are dropped', async () => {
    const modes: [number, number][] = [[0o700, 0o755], [0o100, 0o755], [0o001, 0o755], [0o4755, 0o755], [0o600, 0o644], [0o666, 0o644], [0o7666, 0o644]];
    const { dest } = await extract(tgz(modes.map(([mode], i) => ({ name: `f${i}`, mode, data: 'x' }))));
    modes.forEach(([mode, want], i) => assert.equal(modeOf(path.join(dest, `f${i}`)), want, `header mode ${mode.toString(8)}`));
  });

  test('leading ./ is stripped and the root entry skipped', async () => {
    const { dest } = await extract(tgz([{ name: './', type: '5' }, { name: './a.txt', data: 'a' }, { name: '././b/c', data: 'c' }]));
    assert.deepEqual(fs.readdirSync(dest).sort(), ['a.txt', 'b']);
    assert.equal(read(dest, 'b/c'), 'c');
  });

  test('the ustar prefix joins with the name', async () => {
    const prefix = `${'p'.repeat(90)}/q`;
    const { dest } = await extract(tgz([{ name: 'file.txt', prefix, data: 'joined' }]));
    assert.equal(read(dest, `${prefix}/file.txt`), 'joined');
  });

  test('GNU long names and long link targets', async () => {
    const long = `${'d'.repeat(80)}/${'n'.repeat(120)}.txt`;
    const { dest, result } = await extract(
      tgz([gnuLong(long, 'L'), { name: long.slice(0, 100), data: 'long' }, gnuLong(long, 'K'), { name: 'shortcut', type: '2', linkname: long.slice(0, 100) }]),
    );
    assert.equal(read(dest, long), 'long');
    assert.equal(fs.readlinkSync(path.join(dest, 'shortcut')), long);
    assert.equal(await hashTree(dest), result.hash);
  });

  test('pax path, linkpath and size override the header; global headers are ignored', async () => {
    const long = `${'x'.repeat(150)}/é-${'y'.repeat(150)}`;
    const { dest } = await extract(
      tgz([
        pax({ path: 'global-should-not-apply' }, 'g'),
        pax({ path: long, size: '5', mtime: '1700000000.5', 'SCHILY.xattr.user.x': 'v' }),
        { name: 'truncated-name', size: 0, data: 'sized' },
        pax({ linkpath: long }),
        { name: 'to-long', type: '2', linkname: 'wrong' },
        { name: 'plain', data: 'p' },
      ]),
    );
    assert.equal(read(dest, long), 'sized');
    assert.equal(fs.readlinkSync(path.join(dest, 'to-long')), long);
    assert.equal(read(dest, 'plain'), 'p');
    assert.deepEqual(fs.readdirSync(dest).sort(), ['plain', 'to-long', 'x'.repeat(150)]);
  });

  test('GNU base-256 sizes', async () => {
    const { dest } = await extract(tgz([{ name: 'b256', data: 'base-256 sized', base256Size: true }]));
    assert.equal(read(dest, 'b256'), 'base-256 sized');
  });

  test('an archive without an end marker ends at EOF after data', async () => {
    const { dest, result } = await extract(gzipSync(tar([{ name: 'a', data: 'a' }, { name: 'b', data: 'bb' }], { end: false })));
    assert.equal(read(dest, 'b'), 'bb');
    assert.equal(result.files, 2);
  });

  test('v7 directories (a regular entry whose name ends in a slash)', async () => {
    const { dest } = await extract(tgz([{ name: 'old/', type: '\0' }, { name: 'old/f', data: 'f' }]));
    assert.ok(fs.statSync(path.join(dest, 'old')).isDirectory());
  });

  test('a directory entry may come after the files it holds', async () => {
    const { dest, result } = await extract(tgz([{ name: 'a/x', data: 'x' }, { name: 'a/', type: '5' }]));
    assert.equal(read(dest, 'a/x'), 'x');
    assert.equal(await hashTree(dest), result.hash);
  });

  test('links inside the archive work, whatever the order, up to the archive root', async () => {
    const { dest, result } = await extract(
      tgz([
        { name: 'current', type: '2', linkname: 'sub/file.txt' },
        { name: 'sub/up', type: '2', linkname: '..' },
        { name: 'sub/file.txt', data: 'through the link' },
      ]),
    );
    assert.equal(fs.readlinkSync(path.join(dest, 'current')), 'sub/file.txt');
    assert.equal(read(dest, 'current'), 'through the link');
    assert.equal(read(dest, 'sub/up/sub/file.txt'), 'through the link');
    assert.equal(await hashTree(dest), result.hash);
  });

  test('a hard link is an independent copy of an earlier file, with its mode', async () => {
    const { dest, result } = await extract(tgz([{ name: 'run.sh', mode: 0o755, data: '#!/bin/sh\n' }, { name: 'bin/again', type: '1', linkname: './run.sh', mode: 0o644 }]));
    const a = fs.statSync(path.join(dest, 'run.sh'));
    const b = fs.statSync(path.join(dest, 'bin/again'));
    assert.equal(read(dest, 'bin/again'), '#!/bin/sh\n');
    assert.notEqual(a.ino, b.ino);
    assert.equal(b.nlink, 1);
    assert.equal(b.mode & 0o777, 0o755);
    assert.deepEqual({ files: result.files, bytes: result.bytes }, { files: 2, bytes: 20 });
    assert.equal(await hashTree(dest), result.hash);
  });

  test('a large file arrives intact through many small input pieces', async () => {
    const data = crypto.randomBytes(3 * MiB + 123);
    const dest = tempDir();
    const result = await extractTarGz(body(tgz([{ name: 'blob.bin', data }]), 1000), dest);
    assert.ok(fs.readFileSync(path.join(dest, 'blob.bin')).equals(data));
    assert.equal(result.bytes, data.length);
  });

  test('a readable stream is accepted as input', async () => {
    const dest = tempDir();
    const result = await extractTarGz(Readable.from([tgz([{ name: 'a', data: 'stream' }])]), dest);
    assert.equal(read(dest, 'a'), 'stream');
    assert.equal(result.files, 1);
  });

  test('32 levels deep is allowed', async () => {
    const deep = Array.from({ length: 32 }, (_, i) => `d${i}`).join('/');
    const { dest } = await extract(tgz([pax({ path: deep }), { name: 'x', data: 'bottom' }]));
    assert.equal(read(dest, deep), 'bottom');
  });

  test('dest must be empty', async () => {
    const dest = tempDir();
    fs.writeFileSync(path.join(dest, 'already'), '');
    await assert.rejects(extractTarGz(body(tgz([{ name: 'a', data: 'a' }])), dest), /is not empty/);
  });
});

/** The type of every header in an uncompressed tar: proof of what a real tar wrote. */
function entryTypes(raw: Buffer): string[] {
  const types: string[] = [];
  for (let at = 0; at + 512 <= raw.length && raw[at] !== 0; ) {
    const size = parseInt(raw.toString('latin1', at + 124, at + 136).replace(/\0.*$/, ''), 8);
    types.push(String.fromCharCode(raw[at + 156] ?? 0));
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return types;
}

describe('extractTarGz: archives made by the real tar', () => {
  const TAR = '/usr/bin/tar';
  const longName = `${'long-directory-name-'.repeat(4)}/${'a-file-name-that-is-long-'.repeat(5)}.py`;

  function sourceTree(): string {
    const src = tempDir();
    fs.mkdirSync(path.join(src, 'pkg/sub'), { recursive: true });
    fs.mkdirSync(path.join(src, 'empty-dir'));
    fs.mkdirSync(path.join(src, path.dirname(longName)), { recursive: true });
    fs.writeFileSync(path.join(src, longName), 'long\n');
    fs.writeFileSync(path.join(src, 'pkg/__init__.py'), '');
    fs.writeFileSync(path.join(src, 'pkg/sub/data.bin'), crypto.randomBytes(100_000));
    fs.writeFileSync(path.join(src, 'run.sh'), '#!/bin/sh\necho hi\n', { mode: 0o750 });
    fs.linkSync(path.join(src, 'run.sh'), path.join(src, 'pkg/run-again.sh'));
    fs.symlinkSync('pkg/sub/data.bin', path.join(src, 'data-link'));
    fs.symlinkSync(`../${longName}`, path.join(src, 'pkg/long-link'));
    return src;
  }

  for (const format of ['pax', 'gnu'] as const) {
    test(`${format} format: long names, links, modes and the tree hash all survive`, async () => {
      const src = sourceTree();
      const archive = path.join(tempDir(), 'a.tgz');
      execFileSync(TAR, ['-czf', archive, `--format=${format}`, '-C', src, '.']);
      const raw = gunzipSync(fs.readFileSync(archive));
      // The case under test really is in the archive: pax records, or GNU long-name records.
      const types = entryTypes(raw);
      assert.ok(types.includes(format === 'pax' ? 'x' : 'L'), `entry types: ${types.join('')}`);
      if (format === 'pax') assert.ok(raw.includes(`path=./${longName}`));
      assert.ok(types.includes('1') && types.includes('2'), `entry types: ${types.join('')}`);

      const { dest, result } = await extract(fs.readFileSync(archive));
      assert.equal(read(dest, longName), 'long\n');
      assert.ok(fs.readFileSync(path.join(dest, 'pkg/sub/data.bin')).equals(fs.readFileSync(path.join(src, 'pkg/sub/data.bin'))));
      assert.equal(modeOf(path.join(dest, 'run.sh')), 0o755);
      assert.equal(read(dest, 'pkg/run-again.sh'), '#!/bin/sh\necho hi\n');
      assert.equal(fs.readlinkSync(path.join(dest, 'pkg/long-link')), `../${longName}`);
      assert.ok(fs.statSync(path.join(dest, 'empty-dir')).isDirectory());
      assert.equal(result.files, 5);
      assert.equal(result.hash, await hashTree(src));
      assert.equal(result.hash, await hashTree(dest));
    });
  }

  test('an archive of named paths (no ./ root) from the real tar', async () => {
    const src = sourceTree();
    const archive = path.join(tempDir(), 'b.tgz');
    execFileSync(TAR, ['-czf', archive, '-C', src, 'pkg/sub', 'run.sh', 'data-link']);
    const { dest } = await extract(fs.readFileSync(archive));
    assert.deepEqual(fs.readdirSync(dest).sort(), ['data-link', 'pkg', 'run.sh']);
    assert.deepEqual(fs.readdirSync(path.join(dest, 'pkg')), ['sub']);
    assert.ok(fs.readFileSync(path.join(dest, 'data-link')).equals(fs.readFileSync(path.join(src, 'pkg/sub/data.bin'))));
  });
});

describe('extractTarGz: refused archives', () => {
  const invalid = (entries: Entry[], message: RegExp) => refused(tgz(entries), 'invalid_archive', message);

  test('an absolute path', () => invalid([{ name: '/etc/cron.d/evil', data: 'x' }], /^"\/etc\/cron.d\/evil" is an absolute path$/));
  test('a .. segment', () => invalid([{ name: 'a/../../evil', data: 'x' }], /^"a\/..\/..\/evil" contains a "\.\." segment$/));
  test('a .. segment that would stay inside', () => invalid([{ name: 'a/../b', data: 'x' }], /contains a "\.\." segment/));
  test('a . segment in the middle', () => invalid([{ name: 'a/./b', data: 'x' }], /^"a\/.\/b" contains a "\." segment$/));
  test('an empty segment', () => invalid([{ name: 'a//b', data: 'x' }], /^"a\/\/b" has an empty path segment$/));
  test('a backslash', () => invalid([{ name: 'a\\..\\b', data: 'x' }], /contains a backslash$/));
  test('a NUL byte (through pax)', () => invalid([pax({ path: 'a\0b' }), { name: 'x', data: 'x' }], /^"a\\u0000b" contains a NUL byte$/));
  test('a path longer than 1024 bytes', () => invalid([pax({ path: `${'a'.repeat(200)}/`.repeat(6) }), { name: 'x', type: '5' }], /is longer than 1024 bytes$/));
  test('more than 32 levels', () => invalid([pax({ path: Array(33).fill('d').join('/') }), { name: 'x', data: 'x' }], /is deeper than 32 levels$/));
  test('a name that is not UTF-8', () => refused(gzipSync(Buffer.concat([patchName(header({ name: 'aXb', data: '' }), 1, 0xff), Buffer.alloc(1024)])), 'invalid_archive', /name that is not UTF-8/));
  test('a root entry that is not a directory', () => invalid([{ name: '.', data: 'x' }], /names the archive's root but is not a directory/));

  test('a link to ../x', () => invalid([{ name: 'l', type: '2', linkname: '../x' }], /^link "l" points outside the archive \(to "\.\.\/x"\)$/));
  test('a link to /etc/passwd', () => invalid([{ name: 'l', type: '2', linkname: '/etc/passwd' }], /^link "l" points outside the archive \(to the absolute path "\/etc\/passwd"\)$/));
  test('a link that escapes through another link', () =>
    invalid([{ name: 'a/', type: '5' }, { name: 'a/b', type: '2', linkname: '..' }, { name: 'c', type: '2', linkname: 'a/b/..' }], /^link "c" points outside the archive/));
  test('a link to an existing place outside', async () => {
    const parent = tempDir();
    const dest = path.join(parent, 'dest');
    fs.mkdirSync(dest);
    fs.writeFileSync(path.join(parent, 'secret'), 'secret');
    await refused(tgz([{ name: 'up', type: '2', linkname: '..' }]), 'invalid_archive', /^link "up" points outside the archive \(to "\.\."\)$/, { dest });
    const dest2 = path.join(parent, 'dest2');
    fs.mkdirSync(dest2);
    await refused(tgz([{ name: 'sub/s', type: '2', linkname: '../../secret' }]), 'invalid_archive', /^link "sub\/s" points outside/, { dest: dest2 });
  });
  test('a dangling link', () => invalid([{ name: 'l', type: '2', linkname: 'nothing-here' }], /^link "l" points outside the archive/));
  test('a loop of links', () => invalid([{ name: 'x', type: '2', linkname: 'y' }, { name: 'y', type: '2', linkname: 'x' }], /^link "x" points outside the archive/));

  test('a file written under a symlinked directory', async () => {
    const dest = tempDir();
    await refused(
      tgz([{ name: 'sub/', type: '5' }, { name: 'd', type: '2', linkname: 'sub' }, { name: 'd/evil', data: 'x' }]),
      'invalid_archive',
      /^"d\/evil" is inside the symlink "d"$/,
      { dest },
    );
    assert.equal(fs.existsSync(path.join(dest, 'sub/evil')), false);
  });

  test('a file written under a link to outside never lands outside', async () => {
    const parent = tempDir();
    const dest = path.join(parent, 'dest');
    const outside = path.join(parent, 'outside');
    fs.mkdirSync(dest);
    fs.mkdirSync(outside);
    await refused(tgz([{ name: 'd', type: '2', linkname: '../outside' }, { name: 'd/evil', data: 'x' }]), 'invalid_archive', /inside the symlink "d"/, { dest });
    assert.deepEqual(fs.readdirSync(outside), []);
  });

  test('a link placed over a directory that already holds files', () =>
    invalid([{ name: 'd/x', data: 'x' }, { name: 'd', type: '2', linkname: '../elsewhere' }], /^"d" is both a directory and a symlink$/));
  test('a path inside a file', () => invalid([{ name: 'f', data: 'x' }, { name: 'f/x', data: 'y' }], /^"f\/x" is inside the file "f"$/));

  test('a hard link to a later entry', () =>
    invalid([{ name: 'h', type: '1', linkname: 'later' }, { name: 'later', data: 'x' }], /^hard link "h" points to "later", which is not an earlier file in the archive$/));
  test('a hard link to an unknown entry', () => invalid([{ name: 'h', type: '1', linkname: '/etc/shadow' }], /^hard link "h" points to "\/etc\/shadow", which is not an earlier file/));
  test('a hard link to a directory', () => invalid([{ name: 'd/', type: '5' }, { name: 'h', type: '1', linkname: 'd' }], /hard link "h" points to "d", which is not an earlier file/));

  test('a character device', () => invalid([{ name: 'dev/tty', type: '3' }], /^"dev\/tty" is a character device \(type '3'\), which an archive may not contain$/));
  test('a block device', () => invalid([{ name: 'sda', type: '4' }], /^"sda" is a block device \(type '4'\)/));
  test('a FIFO', () => invalid([{ name: 'pipe', type: '6' }], /^"pipe" is a FIFO \(type '6'\)/));
  test('an unknown entry type', () => invalid([{ name: 'sparse', type: 'S', data: 'x' }], /^"sparse" has the unsupported entry type "S"$/));

  test('the same path twice', () => invalid([{ name: 'a.txt', data: '1' }, { name: './a.txt', data: '2' }], /^the archive contains "a.txt" twice$/));
  test('the same directory twice', () => invalid([{ name: 'd/', type: '5' }, { name: 'd', type: '5' }], /^the archive contains "d" twice$/));

  test('a bad header checksum', () => {
    const archive = tar([{ name: 'a', data: 'a' }]);
    archive[0] = 'b'.charCodeAt(0);
    return refused(gzipSync(archive), 'invalid_archive', /^the header at byte 0 has a bad checksum/);
  });

  test('a lone zero block followed by more entries', () =>
    refused(gzipSync(Buffer.concat([Buffer.alloc(512), tar([{ name: 'a', data: 'a' }])])), 'invalid_archive', /lone zero block at byte 0/));

  test('a malformed pax header', () => invalid([{ name: 'p', type: 'x', data: '99 path=x\n' }, { name: 'a', data: 'a' }], /pax header at byte 0 is malformed/));

  test('endless extended headers', () => invalid(Array.from({ length: 9 }, () => pax({ comment: 'c' }, 'g')), /more than 8 extended headers in a row/));

  test('a truncated gzip stream (trailer cut)', () => {
    const archive = tgz([{ name: 'a', data: 'a' }]);
    return refused(archive.subarray(0, archive.length - 6), 'invalid_archive', /^the archive is truncated \(the gzip stream ends early\)$/);
  });

  test('a truncated gzip stream (cut in the middle)', () => {
    const archive = tgz([{ name: 'r', data: crypto.randomBytes(200_000) }]);
    return refused(archive.subarray(0, archive.length >> 1), 'invalid_archive', /^the archive is truncated/);
  });

  test('a tar cut in the middle of a file, inside a complete gzip stream', () => {
    const archive = tar([{ name: 'big.bin', data: Buffer.alloc(5000, 1) }], { end: false });
    return refused(gzipSync(archive.subarray(0, 3000)), 'invalid_archive', /^the archive is truncated \(it ends in the middle of "big.bin"\)$/);
  });

  test('a tar cut in the middle of a header', () =>
    refused(gzipSync(tar([{ name: 'a', data: 'a' }]).subarray(0, 1024 + 100)), 'invalid_archive', /^the archive is truncated \(it ends in the middle of the header at byte 1024\)$/));

  for (const [label, archive] of [
    ['plain text', Buffer.from('hello, world')],
    ['an uncompressed tar', tar([{ name: 'a', data: 'a' }])],
    ['an empty body', Buffer.alloc(0)],
    ['a single byte', Buffer.from([0x1f])],
  ] as const) {
    test(`not gzip: ${label}`, () => refused(archive, 'invalid_archive', /^the body is not a gzip file$/));
  }

  test('gzip magic followed by garbage', () => refused(Buffer.concat([Buffer.from([0x1f, 0x8b]), crypto.randomBytes(64)]), 'invalid_archive', /^the body is not valid gzip data/));
});

function patchName(block: Buffer, at: number, byte: number): Buffer {
  block[at] = byte;
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of block) sum += b;
  block.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
  return block;
}

describe('extractTarGz: limits', () => {
  const files = (n: number): Entry[] => Array.from({ length: n }, (_, i) => ({ name: `f${i}`, data: 'x' }));

  test('exactly maxEntries entries pass, one more fails', async () => {
    const { result } = await extract(tgz(files(5)), { maxEntries: 5 });
    assert.equal(result.files, 5);
    await refused(tgz(files(6)), 'payload_too_large', /^the archive has more than 5 entries$/, { limits: { maxEntries: 5 } });
  });

  test('implied directories count as entries', () =>
    refused(tgz([{ name: 'a/b/c', data: 'x' }]), 'payload_too_large', /more than 2 entries/, { limits: { maxEntries: 2 } }));

  test('a file over maxFileBytes', () =>
    refused(tgz([{ name: 'big', data: 'x'.repeat(11) }]), 'payload_too_large', /^"big" is larger than the limit of 10 bytes per file$/, { limits: { maxFileBytes: 10 } }));

  test('files adding up past maxTotalBytes', () =>
    refused(tgz(files(3).map((e) => ({ ...e, data: '1234' }))), 'payload_too_large', /^the archive unpacks to more than 10 bytes$/, { limits: { maxTotalBytes: 10 } }));

  test('hard link copies count toward maxTotalBytes', async () => {
    const entries: Entry[] = [{ name: 'f', data: '123456' }, { name: 'h', type: '1', linkname: 'f' }];
    await extract(tgz(entries), { maxTotalBytes: 12 });
    await refused(tgz(entries), 'payload_too_large', /unpacks to more than 11 bytes/, { limits: { maxTotalBytes: 11 } });
  });

  test('a body over maxCompressedBytes', () =>
    refused(tgz([{ name: 'r', data: crypto.randomBytes(10_000) }]), 'payload_too_large', /^the archive is larger than the limit of 5000 bytes$/, { limits: { maxCompressedBytes: 5000 } }));

  /** 1 GiB of zeros and more, compressed as it is read, so the test can see how much was pulled. */
  function bomb(parts: () => Generator<Buffer>): { input: Readable; produced: () => number } {
    let produced = 0;
    function* counted(): Generator<Buffer> {
      for (const part of parts()) {
        produced += part.length;
        yield part;
      }
    }
    const input = createGzip();
    pipeline(Readable.from(counted()), input).catch(() => undefined);
    return { input, produced: () => produced };
  }

  const zeros = Buffer.alloc(MiB);
  function* gib(): Generator<Buffer> {
    for (let i = 0; i < 1024; i++) yield zeros;
  }

  const bombs: [string, () => Generator<Buffer>][] = [
    [
      'one file of 1 GiB of zeros',
      function* () {
        yield header({ name: 'zeros', size: 1024 * MiB });
        yield* gib();
      },
    ],
    [
      '1024 files of 1 MiB of zeros',
      function* () {
        for (let i = 0; i < 1024; i++) yield Buffer.concat([header({ name: `z${i}`, size: MiB }), zeros]);
      },
    ],
    ['1 GiB of zeros after the end marker', gib],
  ];

  for (const [label, parts] of bombs) {
    test(`gzip bomb: ${label} stops early with bounded memory`, async () => {
      const { input, produced } = bomb(parts);
      const before = process.memoryUsage().rss;
      let peak = before;
      const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 2);
      const started = Date.now();
      try {
        const dest = tempDir();
        await assert.rejects(
          extractTarGz(input, dest, { maxTotalBytes: 10 * MiB, maxFileBytes: 2048 * MiB }),
          (err: unknown) => err instanceof AppError && err.code === 'payload_too_large' && /unpacks to more than 10485760 bytes/.test(err.message),
        );
      } finally {
        clearInterval(sampler);
      }
      const elapsed = Date.now() - started;
      assert.ok(produced() < 200 * MiB, `inflated ${produced() / MiB} MiB of the 1 GiB before stopping`);
      assert.ok(elapsed < 5000, `took ${elapsed} ms`);
      assert.ok(peak - before < 150 * MiB, `memory grew by ${(peak - before) / MiB} MiB`);
    });
  }
});

describe('tree hash', () => {
  const tree: Entry[] = [
    { name: 'src/', type: '5' },
    { name: 'src/a.py', data: 'a = 1\n' },
    { name: 'src/b.sh', data: 'echo\n', mode: 0o755 },
    { name: 'src/z/deep.txt', data: 'deep' },
    { name: 'README', data: 'read me' },
    { name: 'latest', type: '2', linkname: 'src/a.py' },
  ];
  const hashOf = async (entries: Entry[]) => (await extract(tgz(entries))).result.hash;

  test('is the sha1 of the sorted entry lines', async () => {
    const sha256 = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
    const lines = [
      `file 644 README\0${sha256('read me')}\n`,
      `link 777 latest\0${sha256('src/a.py')}\n`,
      `dir 755 src\0${sha256('')}\n`,
      `file 644 src/a.py\0${sha256('a = 1\n')}\n`,
      `file 755 src/b.sh\0${sha256('echo\n')}\n`,
      `dir 755 src/z\0${sha256('')}\n`,
      `file 644 src/z/deep.txt\0${sha256('deep')}\n`,
    ];
    assert.equal(await hashOf(tree), crypto.createHash('sha1').update(lines.join('')).digest('hex'));
  });

  test('does not depend on entry order, owners, mtimes, or explicit vs implied directories', async () => {
    const shuffled = [...tree].reverse().filter((e) => e.type !== '5').map((e) => ({ ...e, mtime: 1, uid: 0 }));
    assert.equal(await hashOf(shuffled), await hashOf(tree));
  });

  test('changes when one byte of content changes', async () => {
    const changed = tree.map((e) => (e.name === 'src/z/deep.txt' ? { ...e, data: 'deeq' } : e));
    assert.notEqual(await hashOf(changed), await hashOf(tree));
  });

  test('changes when an execute bit or a link target changes', async () => {
    const exec = tree.map((e) => (e.name === 'README' ? { ...e, mode: 0o744 } : e));
    const link = tree.map((e) => (e.name === 'latest' ? { ...e, linkname: 'src/b.sh' } : e));
    const base = await hashOf(tree);
    assert.notEqual(await hashOf(exec), base);
    assert.notEqual(await hashOf(link), base);
  });

  test('hashTree of the extracted tree equals the extraction hash', async () => {
    const { dest, result } = await extract(tgz(tree));
    assert.equal(await hashTree(dest), result.hash);
    fs.appendFileSync(path.join(dest, 'README'), '!');
    assert.notEqual(await hashTree(dest), result.hash);
  });

  test('hashTree refuses what an archive could not hold', async () => {
    const dir = tempDir();
    execFileSync('mkfifo', [path.join(dir, 'pipe')]);
    await assert.rejects(hashTree(dir), /is not a file, directory or link/);
  });
});
