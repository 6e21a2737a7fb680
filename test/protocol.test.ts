import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { FrameDecoder, ProtocolError, encodeCall, encodeFrame } from '../src/runtime/protocol.ts';

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
