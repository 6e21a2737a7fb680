// The Node.js runner: runs inside the sandbox as `node runner.mjs <entry file>`, loads the
// algorithm once, then answers calls one at a time over the control channel on fd 3
// (docs/runtime-protocol.md). Plain JavaScript with no dependencies: it runs on the system
// node with nothing of the server's installed.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import { pathToFileURL } from 'node:url';
import { createClient } from './sdk.mjs';

const CHANNEL_FD = 3;
/**
 * The channel's reads land in one buffer of ours, handed to onChannelRead (net's `onread`):
 * no stream machinery, no allocation per read. What is kept past the callback is copied.
 */
const READ_BUFFER = Buffer.allocUnsafe(64 * 1024);
const channel = new net.Socket({ fd: CHANNEL_FD, readable: true, writable: true, onread: { buffer: READ_BUFFER, callback: (n, buf) => onChannelRead(buf, n) } });

const NO_BODY = Buffer.alloc(0);

// Node loads `performance` on its first use, ~5 ms (measured here, Node 20): every call times
// itself with it, so it is loaded now, while the worker starts, not in the first call's time.
performance.now();

/**
 * fs.writeSync as it is before the algorithm loads: algorithms share the `fs` module, and some
 * packages replace its functions (memfs's patchFs) or its binding (mock-fs).
 */
const writeSync = fs.writeSync;

/**
 * Writes a frame to the channel: at once with one write(2) when nothing is queued before it (the
 * usual case: a small answer into an empty socket buffer), what does not fit then, or anything
 * while something is queued, through the socket stream, in order.
 */
function writeFrame(frame) {
  if (channel.writableLength === 0) {
    let n = 0;
    try {
      n = writeSync(CHANNEL_FD, frame);
    } catch {
      // Full (the socket is non-blocking), interrupted, or an fs the algorithm replaced (mock-fs
      // swaps the binding under fs.writeSync): the stream sends it. Should the server be gone,
      // the stream's 'error' or 'end' says so, and the runner stops there.
      n = 0;
    }
    if (n === frame.length) return;
    frame = frame.subarray(n);
  }
  channel.write(frame);
}

/** Writes one frame, built in one buffer. */
function send(header, body = NO_BODY) {
  sendText(JSON.stringify(header), body);
}

function sendText(text, body) {
  const hLen = Buffer.byteLength(text, 'utf8');
  const frame = Buffer.allocUnsafe(8 + hLen + body.length);
  frame.writeUInt32LE(hLen, 0);
  frame.writeUInt32LE(body.length, 4);
  frame.write(text, 8, hLen, 'utf8');
  body.copy(frame, 8 + hLen);
  if (!rehearsing) writeFrame(frame);
}

/** Set while a spare rehearses the call path (rehearseCalls): frames are made, none is sent. */
let rehearsing = false;

/** A `result` frame; its header, all numbers and known words, written by hand (it is sent for every call). */
function sendResult(id, contentType, durationMs, stdoutCount, body) {
  if (!Number.isSafeInteger(id)) return send({ type: 'result', id, content_type: contentType, duration_ms: durationMs, stdout_bytes: stdoutCount }, body);
  sendText(`{"type":"result","id":${id},"content_type":"${contentType}","duration_ms":${durationMs},"stdout_bytes":${stdoutCount}}`, body);
}

// Requests to the platform (the SDK), answered by `response` frames with the same rid.
const pending = new Map();
let nextRid = 1;
function request(method, url, headers, body) {
  return new Promise((resolve) => {
    const rid = nextRid++;
    pending.set(rid, resolve);
    // The call's trace (docs/traces.md): the server's span for the request is the run's child.
    if (traceparent !== undefined) headers = { ...headers, traceparent };
    send({ type: 'request', rid, method, url, headers }, body);
  });
}
/** The traceparent of the call in progress, as its `call` frame gave it. */
let traceparent;
const client = createClient(request);
globalThis.algohost = Object.freeze({ client: () => client });

function describe(err, fallbackType) {
  const e = err instanceof Error ? err : new Error(String(err));
  return {
    message: e.message || String(err),
    stacktrace: e.stack ?? '',
    error_type: typeof e.error_type === 'string' ? e.error_type : fallbackType,
  };
}

function decodeInput(contentType, body) {
  if (contentType === 'json') return JSON.parse(body.toString('utf8'));
  if (contentType === 'text') return body.toString('utf8');
  return Buffer.from(body);
}

/** A returned Buffer is binary, a string text, undefined void, anything else JSON. */
function encodeResult(result) {
  if (result === undefined) return ['void', Buffer.alloc(0)];
  if (Buffer.isBuffer(result) || result instanceof Uint8Array) return ['binary', Buffer.from(result)];
  if (typeof result === 'string') return ['text', Buffer.from(result, 'utf8')];
  const text = JSON.stringify(result);
  if (text === undefined) throw Object.assign(new Error('the result cannot be turned into JSON'), { error_type: 'AlgorithmError' });
  return ['json', Buffer.from(text, 'utf8')];
}

// Counts what the algorithm writes to stdout during a call: the server waits for that much
// before it cuts the call's output off (stdout is a separate pipe from the channel).
let stdoutBytes = 0;
const stdoutWrite = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk, encoding, cb) => {
  stdoutBytes += typeof chunk === 'string' ? Buffer.byteLength(chunk, typeof encoding === 'string' ? encoding : 'utf8') : chunk.length;
  return stdoutWrite(chunk, encoding, cb);
};
/** Resolves once everything written to stdout so far has been handed to the pipe. */
const stdoutFlushed = () => new Promise((resolve) => stdoutWrite('', resolve));

let apply;
let loadError;
/** Input types the algorithm accepts (`export const input_types = ['text']`); all when unset. */
let inputTypes;
const INPUT_MISMATCH = 'apply() functions do not match input data';
const TYPE_NAMES = { text: 'text (Content-Type: text/plain)', json: 'JSON (Content-Type: application/json)', binary: 'binary (Content-Type: application/octet-stream)' };
const JSON_KINDS = { '[': 'a JSON array', '{': 'a JSON object', '"': 'a JSON string', t: 'a JSON boolean', f: 'a JSON boolean', n: 'JSON null' };

/** The original's InputError message, then what was sent (from its first bytes) and what the algorithm accepts. */
function mismatch(contentType, body) {
  let got = contentType === 'text' ? 'text' : 'binary data';
  if (contentType === 'json') {
    const first = body.subarray(0, 64).toString('latin1').trimStart()[0];
    got = first === undefined ? 'empty JSON' : (JSON_KINDS[first] ?? 'a JSON number');
  }
  const accepts = ['text', 'json', 'binary'].filter((t) => inputTypes.has(t)).map((t) => TYPE_NAMES[t]).join(', ');
  return `${INPUT_MISMATCH}: the input is ${got}; this algorithm accepts ${accepts} (its input_types)`;
}

/**
 * The build's entry module. Taken with require() first: Node 20.19+ requires an ES module
 * synchronously (require(esm)), ~0.5 ms here where import()'s asynchronous loader takes ~1 ms, in
 * the cold call's load. A module graph with top-level await cannot be required (Node says so
 * before running any of it): import() takes it. A CommonJS entry is imported once required (from
 * the require cache, not run again), so its exports are seen as import() has always seen them.
 */
const requireFile = createRequire(import.meta.url);

async function entryModule(entry) {
  try {
    const mod = requireFile(entry);
    if (mod !== null && typeof mod === 'object' && mod[Symbol.toStringTag] === 'Module') return mod;
  } catch (err) {
    if (err?.code !== 'ERR_REQUIRE_ASYNC_MODULE') throw err;
  }
  return import(pathToFileURL(entry).href);
}

async function importEntry(entry) {
  const mod = await entryModule(entry);
  const def = mod.default;
  // The default export's own members (or its class's), never what every function or object
  // inherits: `export default function apply() {}` has Function.prototype.apply, not an apply of its own.
  const member = (name) => {
    for (let o = def; o !== null && (typeof o === 'object' || typeof o === 'function'); o = Object.getPrototypeOf(o)) {
      if (o === Object.prototype || o === Function.prototype) return undefined;
      if (Object.hasOwn(o, name)) return typeof o[name] === 'function' ? o[name].bind(def) : undefined;
    }
    return undefined;
  };
  const pick = (name) => (typeof mod[name] === 'function' ? mod[name] : member(name));
  apply = pick('apply') ?? (typeof def === 'function' ? def : undefined);
  if (!apply) throw new Error(`${entry.split('/').pop()} exports no apply function`);
  const declared = mod.input_types ?? mod.inputTypes ?? def?.input_types ?? def?.inputTypes;
  if (declared !== undefined) {
    const known = ['text', 'json', 'binary'];
    if (!Array.isArray(declared) || declared.some((t) => !known.includes(t))) {
      throw new Error(`input_types must be an array of ${known.map((t) => `"${t}"`).join(', ')}`);
    }
    inputTypes = new Set(declared);
  }
  return pick('load');
}

async function load(entry) {
  try {
    const init = await importEntry(entry);
    if (init) await init();
  } catch (err) {
    loadError = describe(err, 'LoadingError');
    loadError.error_type = 'LoadingError';
  }
}

const isThenable = (v) => v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function';

/**
 * One call, answered once. apply has two styles: `apply(input, cb)` calling back (the original
 * convention) or `apply(input, ctx)` returning a value or a promise; the second argument serves
 * both (a callback with the context's fields on it). Whichever comes first decides: the callback
 * called while apply runs, or apply's return (unless it returns nothing and takes a callback);
 * a returned promise or thenable then decides when it settles.
 *
 * The answer goes out once the turn that decided it is over (a setImmediate): what the
 * algorithm still does in that turn, its synchronous rest and every microtask, and prints,
 * belongs to this call and is counted in it, not left to arrive after the answer (where it
 * would be dropped, or taken for the next call's output).
 */
class Call {
  constructor(id) {
    this.id = id;
    this.decided = false;
    this.started = performance.now();
  }

  run(input) {
    const cb = (err, result) => {
      if (this.decided) return;
      this.decided = true;
      // The original convention: a falsy first argument is success.
      if (err) this.fail(err);
      else this.succeed(result);
    };
    cb.client = client;
    let returned;
    try {
      returned = apply(input, cb);
    } catch (err) {
      if (!this.decided) {
        this.decided = true;
        this.fail(err);
      }
      return;
    }
    if ((returned === undefined && apply.length >= 2) || this.decided) return; // it calls back, or did
    this.decided = true;
    let thenable;
    try {
      thenable = isThenable(returned);
    } catch (err) {
      return this.fail(err); // a `then` getter that throws
    }
    if (thenable) Promise.resolve(returned).then((r) => this.succeed(r), (e) => this.fail(e));
    else this.succeed(returned);
  }

  succeed(result) {
    const duration = performance.now() - this.started;
    setImmediate(() => {
      let encoded;
      try {
        encoded = encodeResult(result);
      } catch (err) {
        return this.answer(this.errorHeader(err, duration));
      }
      this.answer(undefined, encoded, duration);
    });
  }

  fail(err) {
    const duration = performance.now() - this.started;
    setImmediate(() => this.answer(this.errorHeader(err, duration)));
  }

  errorHeader(err, duration) {
    return { type: 'error', id: this.id, duration_ms: duration, error: describe(err, 'AlgorithmError'), stdout_bytes: 0 };
  }

  /** Sends an error header, or the encoded result, once what the call printed has gone to stdout. */
  answer(error, encoded, duration) {
    const write = () => {
      if (error) {
        error.stdout_bytes = stdoutBytes;
        send(error);
      } else {
        sendResult(this.id, encoded[0], duration, stdoutBytes, encoded[1]);
      }
      callDone();
    };
    // Nothing printed: nothing to wait for (and no empty write to stdout).
    if (stdoutBytes === 0) write();
    else stdoutFlushed().then(write);
  }
}

function handleCall(header, body) {
  const id = header.id;
  if (loadError) return answered({ type: 'error', id, duration_ms: 0, error: loadError });
  if (inputTypes && !inputTypes.has(header.content_type)) {
    return answered({ type: 'error', id, duration_ms: 0, error: { message: mismatch(header.content_type, body), stacktrace: '', error_type: 'InputError' } });
  }
  let input;
  try {
    input = decodeInput(header.content_type, body);
  } catch (err) {
    return answered({ type: 'error', id, duration_ms: 0, error: { ...describe(err, 'InputError'), error_type: 'InputError' } });
  }
  stdoutBytes = 0;
  traceparent = typeof header.traceparent === 'string' ? header.traceparent : undefined;
  new Call(id).run(input);
}

function answered(header) {
  send(header);
  callDone();
}

// The server sends a call only once the previous one is answered; calls that come early anyway
// wait here, so that calls never overlap.
let calling = false;
const early = [];
function takeCall(header, body) {
  if (calling) return void early.push([header, Buffer.from(body)]);
  calling = true;
  handleCall(header, body);
}
function callDone() {
  calling = false;
  const next = early.shift();
  if (next) takeCall(next[0], next[1]);
}

/**
 * Frames from the server. A read usually holds whole frames, which are taken from the read
 * buffer as they are; a frame split over reads is gathered (copied: the buffer is reused) and
 * joined once it is complete, so that large inputs stay linear. Everything a frame's handler
 * keeps past its return is copied by it (decodeInput, a response's body, an early call).
 */
let held = [];
let heldBytes = 0;
/** Bytes the held frame needs in all: its 8-byte lengths first, then the whole frame. */
let heldNeeds = 0;

function onChannelRead(buf, n) {
  // Whether `data` is the shared read buffer, which the next read overwrites.
  const shared = heldBytes === 0;
  let data;
  if (shared) data = buf.subarray(0, n);
  else {
    held.push(Buffer.from(buf.subarray(0, n)));
    heldBytes += n;
    if (heldBytes < heldNeeds) return;
    data = Buffer.concat(held, heldBytes);
    held = [];
    heldBytes = 0;
  }
  let off = 0;
  while (data.length - off >= 8) {
    const hLen = data.readUInt32LE(off);
    const size = 8 + hLen + data.readUInt32LE(off + 4);
    if (data.length - off < size) break;
    const header = callHeader(data, off + 8, off + 8 + hLen) ?? parseHeader(data.toString('utf8', off + 8, off + 8 + hLen));
    dispatch(header, data.subarray(off + 8 + hLen, off + size));
    off += size;
  }
  if (off === data.length) return;
  const rest = data.subarray(off);
  // A copy when the next read overwrites it, or when keeping a view would keep a much larger
  // joined buffer (a 10 MiB input's) alive until this frame is complete.
  held = [shared || rest.length < data.length / 2 ? Buffer.from(rest) : rest];
  heldBytes = rest.length;
  heldNeeds = rest.length < 8 ? 8 : 8 + rest.readUInt32LE(0) + rest.readUInt32LE(4);
}

const CALL_START = Buffer.from('{"type":"call","id":', 'latin1');
const CALL_TYPE = Buffer.from(',"content_type":"', 'latin1');
const INPUT_TYPES = ['json', 'text', 'binary'].map((t) => [t, Buffer.from(`${t}"`, 'latin1')]);
const CALL_TRACE = Buffer.from(',"traceparent":"', 'latin1');
/** A version-00 traceparent: 55 characters. */
const TRACEPARENT_LENGTH = 55;

function bytesAt(buf, pos, end, lit) {
  if (pos + lit.length > end) return false;
  for (let i = 0; i < lit.length; i++) if (buf[pos + i] !== lit[i]) return false;
  return true;
}

/**
 * The header `buf[start, end)` when it is a `call` header in the exact form the server writes
 * for every call (protocol.ts `encodeCall`): `{"type":"call","id":<int>,"content_type":"<type>"}`,
 * with `,"traceparent":"<traceparent>"` before the closing brace when the call has one,
 * read without a string and JSON.parse (which take several µs with the caches cold, as they are
 * when a call wakes the worker); undefined for anything else, which JSON.parse reads.
 */
function callHeader(buf, start, end) {
  if (!bytesAt(buf, start, end, CALL_START)) return undefined;
  let p = start + CALL_START.length;
  let id = 0;
  const first = p;
  while (p < end && buf[p] >= 0x30 && buf[p] <= 0x39) id = id * 10 + (buf[p++] - 0x30);
  // 1 to 15 digits, no leading zero: an integer JSON.parse reads exactly the same.
  if (p === first || p - first > 15 || (buf[first] === 0x30 && p - first > 1) || !bytesAt(buf, p, end, CALL_TYPE)) return undefined;
  p += CALL_TYPE.length;
  for (const [type, bytes] of INPUT_TYPES) {
    if (!bytesAt(buf, p, end, bytes)) continue;
    p += bytes.length;
    if (p + 1 === end && buf[p] === 0x7d) return { type: 'call', id, content_type: type };
    // `,"traceparent":"<55 characters>"}`: lowercase hex and dashes, as the server writes it.
    if (end - p !== CALL_TRACE.length + TRACEPARENT_LENGTH + 2 || !bytesAt(buf, p, end, CALL_TRACE) || buf[end - 2] !== 0x22 || buf[end - 1] !== 0x7d) return undefined;
    const trace = buf.toString('latin1', p + CALL_TRACE.length, end - 2);
    return /^[0-9a-f-]+$/.test(trace) ? { type: 'call', id, content_type: type, traceparent: trace } : undefined;
  }
  return undefined;
}

/**
 * A header that is not JSON means the channel is broken (the server writes only JSON): the runner
 * stops, whatever handlers for uncaught exceptions the algorithm has installed.
 */
function parseHeader(text) {
  try {
    return JSON.parse(text);
  } catch {
    process.stderr.write('runner: a frame header from the server is not JSON; stopping\n');
    process.exit(1);
  }
}

/**
 * A pre-started runner (`--spare <root>`, docs/runtime-protocol.md, "Pre-started workers"): its
 * build is not known when it starts. The server puts the build's files in <root> (its /algo,
 * read-only in here as for any worker), then sends one `load` frame naming the entry file; the
 * runner loads it as a runner started for the build would. A second `load` is ignored: a runner
 * that has loaded one build never loads another.
 */
let spareRoot;
let loaded = false;

async function loadBuild(entry) {
  await load(`${spareRoot}/${entry}`);
  // With what the build printed while loading (stdoutBytes counts from the start until a call's): not the first call's.
  send({ type: 'ready', pid: process.pid, stdout_bytes: stdoutBytes, ...(loadError ? { load_error: loadError } : {}) });
}

function dispatch(header, body) {
  if (header.type === 'call') takeCall(header, body);
  else if (header.type === 'load' && spareRoot !== undefined && !loaded && typeof header.entry === 'string') {
    loaded = true;
    // The server writes the first call right behind the load (Worker.loadAhead): it waits with
    // the early calls until the build is loaded and `ready` sent.
    calling = true;
    void loadBuild(header.entry).then(callDone);
  }
  else if (header.type === 'response' && pending.has(header.rid)) {
    const resolve = pending.get(header.rid);
    pending.delete(header.rid);
    resolve({ status: header.status, headers: header.headers ?? {}, error: header.error, body: Buffer.from(body) });
  }
}

// The server closing the channel is the signal to stop.
channel.on('end', () => process.exit(0));
channel.on('error', () => process.exit(0));

// `--check <entry>` (builds): the entry file imports and exports apply; load() is not run.
if (process.argv[2] === '--check') {
  try {
    await importEntry(process.argv[3]);
    process.exit(0);
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
    process.exit(1);
  }
}

/**
 * A spare runs its own call path once per input kind, with an echo of its own as apply and
 * nothing sent, before it says `spare`: V8 compiles a function the first time it runs, and the
 * call path's first run (decoding, the Call, the answer's encoding) cost a build's first call
 * ~1 ms more than its second. Nothing of it is left: apply is unset again, and the counters are
 * reset by every call.
 */
async function rehearseCalls() {
  rehearsing = true;
  apply = (input) => input;
  try {
    for (const [contentType, body] of [['text', 'x'], ['json', '{"a":[1]}'], ['binary', 'x']]) {
      takeCall({ type: 'call', id: 0, content_type: contentType }, Buffer.from(body));
      // The answer goes out in a setImmediate (Call.succeed), then the call is done.
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));
    }
  } finally {
    apply = undefined;
    traceparent = undefined;
    rehearsing = false;
  }
}

if (process.argv[2] === '--spare') {
  spareRoot = process.argv[3];
  // The loader's first module of a file, paid now rather than in the cold call's load (warm.js).
  await entryModule(new URL('./warm.js', import.meta.url).pathname);
  await rehearseCalls();
  send({ type: 'spare', pid: process.pid });
} else {
  await load(process.argv[2]);
  send({ type: 'ready', pid: process.pid, ...(loadError ? { load_error: loadError } : {}) });
}
