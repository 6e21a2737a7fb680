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

/** Reassembles frames from a byte stream, whatever the chunking. */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;

  /** Feeds bytes; returns every frame completed by them. */
  push(chunk: Buffer): Frame[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const frames: Frame[] = [];
    for (;;) {
      if (this.buffered < 8) return frames;
      const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
      this.chunks = [all];
      const hLen = all.readUInt32LE(0);
      const bLen = all.readUInt32LE(4);
      if (hLen > MAX_HEADER_BYTES || bLen > MAX_BODY_BYTES) throw new ProtocolError(`frame too large (header ${hLen}, body ${bLen})`);
      if (this.buffered < 8 + hLen + bLen) return frames;
      let header: unknown;
      try {
        header = JSON.parse(all.subarray(8, 8 + hLen).toString('utf8'));
      } catch {
        throw new ProtocolError('frame header is not JSON');
      }
      if (typeof header !== 'object' || header === null || typeof (header as { type?: unknown }).type !== 'string') {
        throw new ProtocolError('frame header has no type');
      }
      frames.push({ header: header as Frame['header'], body: Buffer.from(all.subarray(8 + hLen, 8 + hLen + bLen)) });
      const rest = all.subarray(8 + hLen + bLen);
      this.chunks = rest.length ? [rest] : [];
      this.buffered = rest.length;
    }
  }
}
