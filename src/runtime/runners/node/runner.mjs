// The Node.js runner: runs inside the sandbox as `node runner.mjs <entry file>`, loads the
// algorithm once, then answers calls one at a time over the control channel on fd 3
// (docs/runtime-protocol.md). Plain JavaScript with no dependencies: it runs on the system
// node with nothing of the server's installed.
import net from 'node:net';
import { pathToFileURL } from 'node:url';
import { createClient } from './sdk.mjs';

const channel = new net.Socket({ fd: 3, readable: true, writable: true });

const NO_BODY = Buffer.alloc(0);

/** Writes one frame, built in one buffer. */
function send(header, body = NO_BODY) {
  const text = JSON.stringify(header);
  const hLen = Buffer.byteLength(text, 'utf8');
  const frame = Buffer.allocUnsafe(8 + hLen + body.length);
  frame.writeUInt32LE(hLen, 0);
  frame.writeUInt32LE(body.length, 4);
  frame.write(text, 8, hLen, 'utf8');
  body.copy(frame, 8 + hLen);
  channel.write(frame);
}

// Requests to the platform (the SDK), answered by `response` frames with the same rid.
const pending = new Map();
let nextRid = 1;
function request(method, url, headers, body) {
  return new Promise((resolve) => {
    const rid = nextRid++;
    pending.set(rid, resolve);
    send({ type: 'request', rid, method, url, headers }, body);
  });
}
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

async function importEntry(entry) {
  const mod = await import(pathToFileURL(entry).href);
  const def = mod.default;
  const pick = (name) => (typeof mod[name] === 'function' ? mod[name] : typeof def?.[name] === 'function' ? def[name] : undefined);
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

/**
 * Calls apply in either of its styles: `apply(input, cb)` calling back (the original
 * convention) or `apply(input, ctx)` returning a value or a promise. The second argument
 * serves both: it is a callback with the context's fields on it.
 */
function invoke(input) {
  return new Promise((resolve, reject) => {
    let settled = false;
    const cb = (err, result) => {
      if (settled) return;
      settled = true;
      if (err) reject(err);
      else resolve(result);
    };
    cb.client = client;
    const returned = apply(input, cb);
    if (returned !== undefined || apply.length < 2) {
      settled = true;
      Promise.resolve(returned).then(resolve, reject);
    }
  });
}

async function handleCall(header, body) {
  const id = header.id;
  if (loadError) return send({ type: 'error', id, duration_ms: 0, error: loadError });
  if (inputTypes && !inputTypes.has(header.content_type)) {
    return send({ type: 'error', id, duration_ms: 0, error: { message: INPUT_MISMATCH, stacktrace: '', error_type: 'InputError' } });
  }
  let input;
  try {
    input = decodeInput(header.content_type, body);
  } catch (err) {
    return send({ type: 'error', id, duration_ms: 0, error: { ...describe(err, 'InputError'), error_type: 'InputError' } });
  }
  stdoutBytes = 0;
  const started = performance.now();
  let answer;
  let out;
  try {
    const result = await invoke(input);
    const duration_ms = performance.now() - started;
    const [content_type, body] = encodeResult(result);
    answer = { type: 'result', id, content_type, duration_ms, stdout_bytes: 0 };
    out = body;
  } catch (err) {
    const duration_ms = performance.now() - started;
    answer = { type: 'error', id, duration_ms, error: describe(err, 'AlgorithmError'), stdout_bytes: 0 };
  }
  // Nothing written this call: nothing to wait for (and no empty write to stdout).
  if (stdoutBytes > 0) await stdoutFlushed();
  answer.stdout_bytes = stdoutBytes;
  send(answer, out);
}

// Calls arrive one at a time; frames are reassembled from the socket's chunks, which are
// joined once per frame (not once per chunk: large inputs stay linear).
let chunks = [];
let buffered = 0;
let queue = Promise.resolve();
channel.on('data', (chunk) => {
  chunks.push(chunk);
  buffered += chunk.length;
  for (;;) {
    if (buffered < 8) return;
    if (chunks[0].length < 8) chunks = [Buffer.concat(chunks)];
    const hLen = chunks[0].readUInt32LE(0);
    const bLen = chunks[0].readUInt32LE(4);
    const size = 8 + hLen + bLen;
    if (buffered < size) return;
    const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
    const header = JSON.parse(all.subarray(8, 8 + hLen).toString('utf8'));
    const body = all.subarray(8 + hLen, size);
    chunks = all.length > size ? [all.subarray(size)] : [];
    buffered -= size;
    if (header.type === 'call') queue = queue.then(() => handleCall(header, body));
    else if (header.type === 'response' && pending.has(header.rid)) {
      const resolve = pending.get(header.rid);
      pending.delete(header.rid);
      resolve({ status: header.status, headers: header.headers ?? {}, error: header.error, body: Buffer.from(body) });
    }
  }
});
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

await load(process.argv[2]);
send({ type: 'ready', pid: process.pid, ...(loadError ? { load_error: loadError } : {}) });
