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

export function encodeFrame(header: Frame['header'], body: Buffer = Buffer.alloc(0)): Buffer {
  const h = Buffer.from(JSON.stringify(header), 'utf8');
  const prefix = Buffer.allocUnsafe(8);
  prefix.writeUInt32LE(h.length, 0);
  prefix.writeUInt32LE(body.length, 4);
  return Buffer.concat([prefix, h, body]);
}

export class ProtocolError extends Error {}

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
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const frames: Frame[] = [];
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
      const hLen = frame.readUInt32LE(0);
      let header: unknown;
      try {
        header = JSON.parse(frame.subarray(8, 8 + hLen).toString('utf8'));
      } catch {
        throw new ProtocolError('frame header is not JSON');
      }
      if (typeof header !== 'object' || header === null || typeof (header as { type?: unknown }).type !== 'string') {
        throw new ProtocolError('frame header has no type');
      }
      frames.push({ header: header as Frame['header'], body: frame.subarray(8 + hLen) });
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
