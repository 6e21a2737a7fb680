import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { FrameDecoder, ProtocolError, encodeCall, encodeFrame, resultHeader, type Frame } from '../src/runtime/protocol.ts';

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

test('a result header in the runners\' form is read by hand exactly as JSON.parse reads it, and anything else is left to JSON.parse', () => {
  // A seeded generator: the same cases every run.
  let seed = 42;
  const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
  const pick = <T>(xs: readonly T[]): T => xs[rand(xs.length)]!;
  const durations = [
    '0', '0.0', '1.5', '12', '0.012345678901234567', '1e-7', '1.2e-07', '5E+2', '3.25e2', '-0.0', '123456.789',
    String(Math.random() * 1000), String(Math.random() / 1e6), String(2 ** 60), String(Number.MIN_VALUE),
  ];
  const canonical = (id: string, type: string, duration: string, stdout: string) =>
    `{"type":"result","id":${id},"content_type":"${type}","duration_ms":${duration},"stdout_bytes":${stdout}}`;
  const cases: string[] = [];
  for (let i = 0; i < 300; i++) {
    cases.push(canonical(pick(['0', '1', '7', '42', String(rand(1e9)), '999999999999999']), pick(['json', 'text', 'binary', 'void']), pick(durations), pick(['0', '15', String(rand(1e6))])));
  }
  // Every canonical one takes the fast path, with JSON.parse's answer.
  for (const text of cases) {
    const buf = Buffer.from(`xx${text}yy`, 'latin1');
    assert.deepEqual(resultHeader(buf, 2, buf.length - 2), JSON.parse(text), text);
  }
  // Near misses: not JSON, other forms, numbers JSON refuses. None may be read differently
  // from JSON.parse: either the fast path declines, or JSON.parse reads the same.
  const near = [
    canonical('01', 'text', '1', '0'), canonical('-1', 'text', '1', '0'), canonical('1', 'text', '1.', '0'), canonical('1', 'text', '.5', '0'),
    canonical('1', 'text', '+1', '0'), canonical('1', 'text', '1e', '0'), canonical('1', 'text', '1e+', '0'), canonical('1', 'text', '--1', '0'),
    canonical('1', 'text', '00', '0'), canonical('1', 'text', 'NaN', '0'), canonical('1', 'text', 'Infinity', '0'), canonical('1', 'text', '1', '00'),
    canonical('1', 'texts', '1', '0'), canonical('1', 'TEXT', '1', '0'), canonical('1', 'error', '1', '0'), canonical('1234567890123456', 'text', '1', '0'),
    canonical('1', 'text', '1', '1234567890123456'), canonical('1', 'text', '1', '0') + ' ', ' ' + canonical('1', 'text', '1', '0'),
    '{"type":"result","content_type":"text","id":1,"duration_ms":1,"stdout_bytes":0}', '{"type":"result","id":1,"content_type":"text","duration_ms":1}',
    '{"type": "result","id":1,"content_type":"text","duration_ms":1,"stdout_bytes":0}', '{"type":"error","id":1,"duration_ms":1,"stdout_bytes":0}',
  ];
  for (const text of near) assert.equal(resultHeader(Buffer.from(text, 'latin1'), 0, text.length), undefined, text);
  const mutants: string[] = [];
  const chars = '0123456789-+.eE",:{} aé\\';
  for (let i = 0; i < 3000; i++) {
    const t = pick(cases);
    const at = rand(t.length);
    const c = pick([...chars]);
    mutants.push(pick([t.slice(0, at) + c + t.slice(at + 1), t.slice(0, at) + t.slice(at + 1), t.slice(0, at) + c + t.slice(at)]));
  }
  let read = 0;
  for (const text of mutants) {
    const buf = Buffer.from(text, 'utf8');
    const fast = resultHeader(buf, 0, buf.length);
    if (fast === undefined) continue;
    read++;
    let parsed: unknown;
    assert.doesNotThrow(() => (parsed = JSON.parse(text)), `read by hand but not JSON: ${text}`);
    assert.deepEqual(fast, parsed, text);
  }
  // Mutants that are still in the form (a digit for a digit) were read by hand and compared.
  assert.ok(read > 100 && read < mutants.length, `${read} of ${mutants.length} mutants read by hand`);
});

/**
 * The Node runner by itself, unsandboxed (these tests are about its channel, not the sandbox),
 * running `source` as its algorithm; every frame it writes is collected in `frames`.
 */
function runnerOf(source: string) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-frames-'));
  fs.writeFileSync(path.join(dir, 'algo.mjs'), source);
  const child = spawn('/usr/bin/node', [RUNNER, path.join(dir, 'algo.mjs')], { stdio: ['ignore', 'ignore', 'ignore', 'pipe'], env: {} });
  const channel = child.stdio[3] as Duplex;
  const frames: Frame[] = [];
  const dec = new FrameDecoder();
  let arrived: () => void = () => undefined;
  channel.on('data', (chunk: Buffer) => {
    frames.push(...dec.push(chunk));
    arrived();
  });
  /** Until `n` frames in all have come (the first is `ready`). */
  const until = (n: number) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${frames.length} of ${n} frames in 10 s`)), 10_000);
      arrived = () => frames.length >= n && (clearTimeout(timer), resolve());
      arrived();
    });
  const stop = () => {
    child.kill();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  return { child, channel, frames, until, stop };
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('the Node runner reads frames however the channel cuts them: a prefix split, frames joined, a large body in pieces', async () => {
  const { channel, frames, until, stop } = runnerOf(
    [
      'export async function apply(input) {',
      "  if (input === 'slow') await new Promise((r) => setTimeout(r, 100));",
      '  return Buffer.isBuffer(input) ? Buffer.from(input).reverse() : input;',
      '}',
    ].join('\n'),
  );
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
      await pause(15);
    }
    await until(4);
    assert.deepEqual(frames.slice(1).map((f) => [f.header.type, f.header.id, f.header.content_type]), [['result', 1, 'text'], ['result', 2, 'binary'], ['result', 3, 'json']]);
    assert.equal(frames[1]!.body.toString('utf8'), 'héllo');
    assert.ok(frames[2]!.body.equals(Buffer.from(big).reverse()), 'the large body comes back byte for byte (reversed)');
    assert.deepEqual(JSON.parse(frames[3]!.body.toString('utf8')), { a: [1, 2] });

    // Calls that come while one runs wait their turn, and what later reads bring does not
    // overwrite them: two in one read behind a slow call, then another read.
    channel.write(encodeCall(4, 'text', Buffer.from('slow')));
    await pause(15);
    channel.write(Buffer.concat([encodeCall(5, 'text', Buffer.from('five')), encodeCall(6, 'binary', Buffer.from([1, 2, 3]))]));
    await pause(15);
    channel.write(encodeCall(7, 'text', Buffer.from('SEVEN-SEVEN-SEVEN-SEVEN')));
    await until(8);
    assert.deepEqual(
      frames.slice(4).map((f) => [f.header.id, f.body.toString('latin1')]),
      [[4, 'slow'], [5, 'five'], [6, '\x03\x02\x01'], [7, 'SEVEN-SEVEN-SEVEN-SEVEN']],
    );

    // The runner reads the server's call header by hand; other forms of it are read as JSON.
    channel.write(encodeFrame({ content_type: 'text', id: 8, type: 'call' }, Buffer.from('keys in another order')));
    channel.write(encodeCall(Number.MAX_SAFE_INTEGER, 'json', Buffer.from('{"digits":16}')));
    channel.write(encodeCall(0, 'text', Buffer.from('zero')));
    // 19 digits in the server's exact form: read as JSON.parse reads them (rounded to a double),
    // which digit-by-digit arithmetic would not match (it gives 4311850283767585000).
    channel.write(Buffer.from('\x3e\x00\x00\x00\x02\x00\x00\x00{"type":"call","id":4311850283767585388,"content_type":"text"}19', 'latin1'));
    await until(12);
    assert.deepEqual(
      frames.slice(8).map((f) => [f.header.id, f.header.content_type, f.body.toString('latin1')]),
      [[8, 'text', 'keys in another order'], [Number.MAX_SAFE_INTEGER, 'json', '{"digits":16}'], [0, 'text', 'zero'], [JSON.parse('4311850283767585388'), 'text', '19']],
    );
  } finally {
    stop();
  }
});

test('the bodies of SDK responses stay whole while later reads reuse the runner\'s buffer', async () => {
  // Both files are held as Buffers until both have come: the first came in an earlier read.
  const { channel, frames, until, stop } = runnerOf(
    [
      'export async function apply() {',
      '  const client = globalThis.algohost.client();',
      "  const [a, b] = await Promise.all([client.file('data://.my/c/a').get(), client.file('data://.my/c/b').get()]);",
      "  return `${a.toString('latin1')}|${b.toString('latin1')}`;",
      '}',
    ].join('\n'),
  );
  try {
    await until(1);
    channel.write(encodeCall(1, 'text', Buffer.from('go')));
    await until(3);
    const [ra, rb] = frames.slice(1, 3).map((f) => f.header);
    assert.deepEqual([ra!.type, ra!.url, rb!.type, rb!.url], ['request', '/v1/connector/data/.my/c/a', 'request', '/v1/connector/data/.my/c/b']);
    channel.write(encodeFrame({ type: 'response', rid: ra!.rid as number, status: 200, headers: {} }, Buffer.from('A'.repeat(500))));
    await pause(20);
    channel.write(encodeFrame({ type: 'response', rid: rb!.rid as number, status: 200, headers: {} }, Buffer.from('B'.repeat(500))));
    await until(4);
    assert.equal(frames[3]!.header.type, 'result');
    assert.equal(frames[3]!.body.toString('latin1'), `${'A'.repeat(500)}|${'B'.repeat(500)}`);
  } finally {
    stop();
  }
});

test('an algorithm that replaces fs (as memfs and mock-fs do) does not stop its runner answering', async () => {
  const { child, channel, frames, until, stop } = runnerOf(
    [
      "import fs from 'node:fs';",
      "const ebadf = () => { throw Object.assign(new Error('EBADF: bad file descriptor'), { code: 'EBADF' }); };",
      'let calls = 0;',
      'export function apply(input) {',
      '  calls++;',
      "  if (input === 'patch fs') fs.writeSync = ebadf; // memfs's patchFs",
      "  if (input === 'patch the binding') process.binding('fs').writeBuffer = ebadf; // mock-fs",
      '  return `${input} ${calls}`;',
      '}',
    ].join('\n'),
  );
  try {
    await until(1);
    const inputs = ['before', 'patch fs', 'after it', 'patch the binding', 'after both'];
    for (const [i, input] of inputs.entries()) {
      channel.write(encodeCall(i + 1, 'text', Buffer.from(input)));
      await until(i + 2);
    }
    assert.deepEqual(frames.slice(1).map((f) => f.body.toString('utf8')), inputs.map((input, i) => `${input} ${i + 1}`));
    assert.equal(child.exitCode, null, 'the runner lives on');
  } finally {
    stop();
  }
});

test('a frame header that is not JSON stops the runner, even with an algorithm catching uncaught exceptions', async () => {
  const { child, channel, until, stop } = runnerOf("process.on('uncaughtException', () => {});\nexport function apply(input) { return input; }\n");
  try {
    await until(1);
    const exited = new Promise<number | string | null>((resolve) => {
      child.once('exit', (code) => resolve(code));
      setTimeout(() => resolve('still running after 5 s'), 5000).unref();
    });
    const text = '{"type":"call",';
    const frame = Buffer.alloc(8 + text.length);
    frame.writeUInt32LE(text.length, 0);
    frame.write(text, 8, 'latin1');
    channel.write(frame);
    assert.equal(await exited, 1);
  } finally {
    stop();
  }
});
