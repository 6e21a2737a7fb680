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

/** A frame from its header's JSON text and its body. */
function frameOf(text: string, body: Buffer): Buffer {
  const hLen = Buffer.byteLength(text, 'utf8');
  const frame = Buffer.allocUnsafe(8 + hLen + body.length);
  frame.writeUInt32LE(hLen, 0);
  frame.writeUInt32LE(body.length, 4);
  frame.write(text, 8, hLen, 'utf8');
  body.copy(frame, 8 + hLen);
  return frame;
}

/**
 * A `call` frame, the same bytes as `encodeFrame({ type: 'call', id, content_type }, input)`
 * with its header written by hand: one is sent for every call. `id` is an integer and
 * `contentType` one of the input types (plain ASCII words), so the text is JSON as it stands.
 */
export function encodeCall(id: number, contentType: 'json' | 'text' | 'binary', input: Buffer): Buffer {
  return frameOf(`{"type":"call","id":${id},"content_type":"${contentType}"}`, input);
}

export class ProtocolError extends Error {}

/** The frame whose header is `buf[start, start + hLen)` and whose body runs from there to `end`. */
function parseFrame(buf: Buffer, start: number, hLen: number, end: number): Frame {
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
