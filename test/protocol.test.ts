import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { FrameDecoder, ProtocolError, encodeCall, encodeFrame, type Frame } from '../src/runtime/protocol.ts';

const RUNNER = fileURLToPath(new URL('../src/runtime/runners/node/runner.mjs', import.meta.url));

test('frames survive any chunking, with binary bodies byte for byte', () => {
  const bodies = [Buffer.alloc(0), crypto.randomBytes(1), crypto.randomBytes(70_000), Buffer.from([0, 255, 10, 13])];
  const wire = Buffer.concat(bodies.map((b, i) => encodeFrame({ type: 'call', id: i, note: 'é' }, b)));
  for (const size of [1, 3, 7, 64, 4096, wire.length]) {
    const dec = new FrameDecoder();
    const frames = [];
    for (let o = 0; o < wire.length; o += size) frames.push(...dec.push(wire.subarray(o, o + size)));
    assert.equal(frames.length, bodies.length, `chunk size ${size}`);
    frames.forEach((f, i) => {
      assert.deepEqual(f.header, { type: 'call', id: i, note: 'é' });
      assert.ok(f.body.equals(bodies[i]!));
    });
  }
  // The body is sent as it is: no base64 inflation.
  assert.equal(encodeFrame({ type: 'x' }, Buffer.alloc(1000)).length, 8 + '{"type":"x"}'.length + 1000);
});

test('a call frame written by hand is byte for byte the one encodeFrame writes (the Python runner reads its exact form)', () => {
  for (const [id, type] of [[1, 'text'], [4_294_967_296, 'json'], [Number.MAX_SAFE_INTEGER, 'binary']] as const) {
    for (const input of [Buffer.alloc(0), crypto.randomBytes(100), Buffer.from('héllo')]) {
      assert.ok(encodeCall(id, type, input).equals(encodeFrame({ type: 'call', id, content_type: type }, input)), `${id} ${type} ${input.length}`);
    }
  }
});

test('malformed frames are refused, not half-read', () => {
  const bad = Buffer.alloc(8);
  bad.writeUInt32LE(0xffffffff, 0);
  assert.throws(() => new FrameDecoder().push(bad), ProtocolError);
  const notJson = Buffer.concat([Buffer.from([3, 0, 0, 0, 0, 0, 0, 0]), Buffer.from('abc')]);
  assert.throws(() => new FrameDecoder().push(notJson), ProtocolError);
  const noType = encodeFrame({ type: 'x' }).toString().replace('"type"', '"tipe"');
  assert.throws(() => new FrameDecoder().push(Buffer.from(noType)), ProtocolError);
});

test('the Node runner reads frames however the channel cuts them: a prefix split, frames joined, a large body in pieces', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-frames-'));
  fs.writeFileSync(path.join(dir, 'echo.mjs'), [
    'export async function apply(input) {',
    "  if (input === 'slow') await new Promise((r) => setTimeout(r, 100));",
    '  return Buffer.isBuffer(input) ? Buffer.from(input).reverse() : input;',
    '}',
  ].join('\n'));
  // The runner by itself, unsandboxed: this is about its reading, not the sandbox.
  const child = spawn('/usr/bin/node', [RUNNER, path.join(dir, 'echo.mjs')], { stdio: ['ignore', 'ignore', 'inherit', 'pipe'], env: {} });
  const channel = child.stdio[3] as Duplex;
  const frames: Frame[] = [];
  const dec = new FrameDecoder();
  let arrived: () => void = () => undefined;
  channel.on('data', (chunk: Buffer) => {
    frames.push(...dec.push(chunk));
    arrived();
  });
  const until = (n: number) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${frames.length} of ${n} frames in 10 s`)), 10_000);
      arrived = () => frames.length >= n && (clearTimeout(timer), resolve());
      arrived();
    });
  try {
    await until(1);
    assert.equal(frames[0]!.header.type, 'ready');
    const big = crypto.randomBytes(300_001);
    const wire = Buffer.concat([encodeCall(1, 'text', Buffer.from('héllo')), encodeCall(2, 'binary', big), encodeCall(3, 'json', Buffer.from('{"a":[1,2]}'))]);
    const first = encodeCall(1, 'text', Buffer.from('héllo')).length;
    // 1 byte, then 6 (the length prefix spans three reads), the rest of call 1 with the start of
    // call 2, call 2's body in uneven pieces, and its end together with all of call 3.
    const cuts = [1, 7, first + 10, first + 70_000, first + 200_003, wire.length - 20, wire.length];
    let from = 0;
    for (const to of cuts) {
      channel.write(wire.subarray(from, to));
      from = to;
      await new Promise((r) => setTimeout(r, 15));
    }
    await until(4);
    assert.deepEqual(frames.slice(1).map((f) => [f.header.type, f.header.id, f.header.content_type]), [['result', 1, 'text'], ['result', 2, 'binary'], ['result', 3, 'json']]);
    assert.equal(frames[1]!.body.toString('utf8'), 'héllo');
    assert.ok(frames[2]!.body.equals(Buffer.from(big).reverse()), 'the large body comes back byte for byte (reversed)');
    assert.deepEqual(JSON.parse(frames[3]!.body.toString('utf8')), { a: [1, 2] });

    // Calls that come while one runs wait their turn, and what later reads bring does not
    // overwrite them: two in one read behind a slow call, then another read.
    channel.write(encodeCall(4, 'text', Buffer.from('slow')));
    await new Promise((r) => setTimeout(r, 15));
    channel.write(Buffer.concat([encodeCall(5, 'text', Buffer.from('five')), encodeCall(6, 'binary', Buffer.from([1, 2, 3]))]));
    await new Promise((r) => setTimeout(r, 15));
    channel.write(encodeCall(7, 'text', Buffer.from('SEVEN-SEVEN-SEVEN-SEVEN')));
    await until(8);
    assert.deepEqual(
      frames.slice(4).map((f) => [f.header.id, f.body.toString('latin1')]),
      [[4, 'slow'], [5, 'five'], [6, '\x03\x02\x01'], [7, 'SEVEN-SEVEN-SEVEN-SEVEN']],
    );
  } finally {
    child.kill();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
