/**
 * The control channel between the server and a worker (docs/runtime-protocol.md): frames on
 * file descriptor 3, separate from the algorithm's stdout and stderr.
 *
 *   frame = u32 LE header length | u32 LE body length | header (UTF-8 JSON) | body (raw bytes)
 *
 * The header says what a frame is; the body carries payload bytes as they are (inputs,
 * results, file contents), so binary data crosses without base64 inflation.
 */
export interface Frame {
  header: Record<string, unknown> & { type: string };
  body: Buffer;
}

export const MAX_HEADER_BYTES = 1024 * 1024;
/** Bodies above this are refused (calls are capped at 10 MiB; results may be larger). */
export const MAX_BODY_BYTES = 64 * 1024 * 1024;

const NO_BODY = Buffer.alloc(0);

/** One frame in one buffer (a single allocation: calls encode one per call). */
export function encodeFrame(header: Frame['header'], body: Buffer = NO_BODY): Buffer {
  return frameOf(JSON.stringify(header), body);
}

/** A frame from its header's JSON text and its body; `ascii`: the text is, so latin1 writes it as UTF-8 would. */
function frameOf(text: string, body: Buffer, ascii = false): Buffer {
  const hLen = ascii ? text.length : Buffer.byteLength(text, 'utf8');
  const frame = Buffer.allocUnsafe(8 + hLen + body.length);
  frame.writeUInt32LE(hLen, 0);
  frame.writeUInt32LE(body.length, 4);
  frame.write(text, 8, hLen, ascii ? 'latin1' : 'utf8');
  body.copy(frame, 8 + hLen);
  return frame;
}

/**
 * A `call` frame, the same bytes as `encodeFrame({ type: 'call', id, content_type, traceparent }, input)`
 * with its header written by hand: one is sent for every call. `id` is an integer, `contentType`
 * one of the input types (plain ASCII words) and `traceparent` a W3C traceparent (lowercase hex
 * and dashes: the caller checked it), so the text is JSON as it stands. Without a traceparent the
 * field is left out.
 */
export function encodeCall(id: number, contentType: 'json' | 'text' | 'binary', input: Buffer, traceparent?: string): Buffer {
  const trace = traceparent === undefined ? '' : `,"traceparent":"${traceparent}"`;
  return frameOf(`{"type":"call","id":${id},"content_type":"${contentType}"${trace}}`, input, true);
}

export class ProtocolError extends Error {}

// ---- the result header, read by hand ----------------------------------------------------------

const RESULT_START = Buffer.from('{"type":"result","id":', 'latin1');
const RESULT_TYPE = Buffer.from(',"content_type":"', 'latin1');
const RESULT_DURATION = Buffer.from('","duration_ms":', 'latin1');
const RESULT_STDOUT = Buffer.from(',"stdout_bytes":', 'latin1');
const RESULT_TYPES = (['json', 'text', 'binary', 'void'] as const).map((t) => [t, Buffer.from(t, 'latin1')] as const);
const ZERO = 0x30;
const NINE = 0x39;

/** Whether the bytes of `lit` are at `buf[pos]`, before `end`. */
function bytesAt(buf: Buffer, pos: number, end: number, lit: Buffer): boolean {
  if (pos + lit.length > end) return false;
  for (let i = 0; i < lit.length; i++) if (buf[pos + i] !== lit[i]) return false;
  return true;
}

/** Where a run of digits from `pos` ends (`pos` if there is none). */
function digitsEnd(buf: Buffer, pos: number, end: number): number {
  let p = pos;
  while (p < end && buf[p]! >= ZERO && buf[p]! <= NINE) p++;
  return p;
}

/** Where a JSON integer without sign from `pos` ends (no leading zeros), or -1. */
function uintEnd(buf: Buffer, pos: number, end: number): number {
  if (pos < end && buf[pos] === ZERO) return pos + 1;
  const p = digitsEnd(buf, pos, end);
  return p === pos ? -1 : p;
}

/** Where a JSON number from `pos` ends (RFC 8259's grammar), or -1. */
function numberEnd(buf: Buffer, pos: number, end: number): number {
  let p = buf[pos] === 0x2d ? pos + 1 : pos; // -
  p = uintEnd(buf, p, end);
  if (p < 0) return -1;
  if (buf[p] === 0x2e) {
    // .
    const f = digitsEnd(buf, p + 1, end);
    if (f === p + 1) return -1;
    p = f;
  }
  if (buf[p] === 0x65 || buf[p] === 0x45) {
    // e E, then + or -
    p++;
    if (buf[p] === 0x2b || buf[p] === 0x2d) p++;
    const e = digitsEnd(buf, p, end);
    if (e === p) return -1;
    p = e;
  }
  return p;
}

/** The integer written in digits `buf[from, to)`, exact for up to 15 of them. */
function intOf(buf: Buffer, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i++) n = n * 10 + (buf[i]! - ZERO);
  return n;
}

/**
 * The header `buf[start, end)` when it is a `result` header in the exact form both runners
 * write by hand for every answer (runner.mjs `sendResult`, runner.py `answer`):
 *
 *   {"type":"result","id":<int>,"content_type":"<json|text|binary|void>","duration_ms":<number>,"stdout_bytes":<int>}
 *
 * read without building a string for JSON.parse; undefined for anything else (other frames,
 * other spellings, keys or order, integers of more than 15 digits), which JSON.parse reads.
 * What it returns is what JSON.parse returns for the same bytes. Read once per call, right after
 * the server wakes up, with cold caches: JSON.parse and its string took ~6 µs there.
 */
export function resultHeader(buf: Buffer, start: number, end: number): Frame['header'] | undefined {
  if (!bytesAt(buf, start, end, RESULT_START)) return undefined;
  let p = start + RESULT_START.length;
  const idEnd = uintEnd(buf, p, end);
  if (idEnd < 0 || idEnd - p > 15 || !bytesAt(buf, idEnd, end, RESULT_TYPE)) return undefined;
  const id = intOf(buf, p, idEnd);
  p = idEnd + RESULT_TYPE.length;
  let contentType: string | undefined;
  for (const [name, bytes] of RESULT_TYPES) {
    if (bytesAt(buf, p, end, bytes)) {
      contentType = name;
      p += bytes.length;
      break;
    }
  }
  if (contentType === undefined || !bytesAt(buf, p, end, RESULT_DURATION)) return undefined;
  p += RESULT_DURATION.length;
  const durationEnd = numberEnd(buf, p, end);
  if (durationEnd < 0 || !bytesAt(buf, durationEnd, end, RESULT_STDOUT)) return undefined;
  let duration = '';
  for (let i = p; i < durationEnd; i++) duration += String.fromCharCode(buf[i]!);
  p = durationEnd + RESULT_STDOUT.length;
  const stdoutEnd = uintEnd(buf, p, end);
  if (stdoutEnd < 0 || stdoutEnd - p > 15 || stdoutEnd !== end - 1 || buf[stdoutEnd] !== 0x7d) return undefined; // }
  return { type: 'result', id, content_type: contentType, duration_ms: Number(duration), stdout_bytes: intOf(buf, p, stdoutEnd) };
}

/** The frame whose header is `buf[start, start + hLen)` and whose body runs from there to `end`. */
function parseFrame(buf: Buffer, start: number, hLen: number, end: number): Frame {
  const result = resultHeader(buf, start, start + hLen);
  if (result !== undefined) return { header: result, body: buf.subarray(start + hLen, end) };
  let header: unknown;
  try {
    header = JSON.parse(buf.toString('utf8', start, start + hLen));
  } catch {
    throw new ProtocolError('frame header is not JSON');
  }
  if (typeof header !== 'object' || header === null || typeof (header as { type?: unknown }).type !== 'string') {
    throw new ProtocolError('frame header has no type');
  }
  return { header: header as Frame['header'], body: buf.subarray(start + hLen, end) };
}

/**
 * Reassembles frames from a byte stream, whatever the chunking. Chunks are kept as they come
 * and joined once per frame, so a large body costs linear time, not a copy per chunk.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** Total size of the frame being received, once its prefix has arrived. */
  private need: number | undefined;

  /** Feeds bytes; returns every frame completed by them. */
  push(chunk: Buffer): Frame[] {
    const frames: Frame[] = [];
    // The usual case, a chunk holding whole frames and nothing before it: read in place.
    let off = 0;
    if (this.buffered === 0) {
      while (chunk.length - off >= 8) {
        const hLen = chunk.readUInt32LE(off);
        const bLen = chunk.readUInt32LE(off + 4);
        if (hLen > MAX_HEADER_BYTES || bLen > MAX_BODY_BYTES) throw new ProtocolError(`frame too large (header ${hLen}, body ${bLen})`);
        const end = off + 8 + hLen + bLen;
        if (end > chunk.length) break;
        frames.push(parseFrame(chunk, off + 8, hLen, end));
        off = end;
      }
      if (off === chunk.length) return frames;
      chunk = chunk.subarray(off);
    }
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    for (;;) {
      if (this.need === undefined) {
        if (this.buffered < 8) return frames;
        const prefix = this.peek(8);
        const hLen = prefix.readUInt32LE(0);
        const bLen = prefix.readUInt32LE(4);
        if (hLen > MAX_HEADER_BYTES || bLen > MAX_BODY_BYTES) throw new ProtocolError(`frame too large (header ${hLen}, body ${bLen})`);
        this.need = 8 + hLen + bLen;
      }
      if (this.buffered < this.need) return frames;
      const frame = this.take(this.need);
      this.need = undefined;
      frames.push(parseFrame(frame, 8, frame.readUInt32LE(0), frame.length));
    }
  }

  /** The first `n` buffered bytes, without consuming them. */
  private peek(n: number): Buffer {
    if (this.chunks[0]!.length >= n) return this.chunks[0]!;
    const joined = Buffer.concat(this.chunks);
    this.chunks = [joined];
    return joined;
  }

  /** Removes and returns the first `n` buffered bytes as one buffer. */
  private take(n: number): Buffer {
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const c = this.chunks[0]!;
      const use = Math.min(c.length, n - filled);
      c.copy(out, filled, 0, use);
      filled += use;
      if (use === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(use);
    }
    this.buffered -= n;
    return out;
  }
}
