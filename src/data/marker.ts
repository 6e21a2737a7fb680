import crypto from 'node:crypto';
import { AppError } from '../errors.ts';

/** Where a listing stopped: in the folder phase or the file phase, after a given name. */
export interface Position {
  phase: 'folders' | 'files';
  after: string;
}

/**
 * Opaque, tamper-proof page markers. A marker is bound to the listing it was issued for (its
 * scope: a directory, a catalogue, a connected account's folder) and signed, so a marker that
 * was never issued, or was issued for another listing, is refused instead of silently listing
 * from somewhere else.
 *
 * Hosted listings keep the last name returned (keyset paging), so entries added or removed
 * between pages never cause duplicates or skip a survivor; connected accounts keep their
 * provider's continuation token (`encodeValue`).
 */
export class MarkerCodec {
  constructor(private readonly key: Buffer) {}

  encode(scope: string, pos: Position): string {
    return this.encodeValue(scope, [pos.phase === 'folders' ? 'd' : 'f', pos.after]);
  }

  decode(scope: string, marker: string): Position {
    const parsed = this.decodeValue(scope, marker);
    if (!Array.isArray(parsed) || (parsed[0] !== 'd' && parsed[0] !== 'f') || typeof parsed[1] !== 'string') {
      throw invalidMarker();
    }
    return { phase: parsed[0] === 'd' ? 'folders' : 'files', after: parsed[1] };
  }

  /** Signs any JSON value into a marker for `scope`. */
  encodeValue(scope: string, value: unknown): string {
    const body = Buffer.from(JSON.stringify(value)).toString('base64url');
    return `${body}.${this.sign(scope, body)}`;
  }

  /** The JSON value of a marker issued for `scope`; throws invalid_marker for anything else. */
  decodeValue(scope: string, marker: string): unknown {
    const dot = marker.indexOf('.');
    if (dot < 0) throw invalidMarker();
    const body = marker.slice(0, dot);
    // Compared as bytes of equal length: a signature of other characters is simply wrong.
    const sig = Buffer.from(marker.slice(dot + 1), 'utf8');
    const expected = Buffer.from(this.sign(scope, body), 'utf8');
    if (sig.length !== expected.length || !crypto.timingSafeEqual(sig, expected)) throw invalidMarker();
    try {
      return JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
    } catch {
      throw invalidMarker();
    }
  }

  private sign(scope: string, body: string): string {
    return crypto.createHmac('sha256', this.key).update(scope).update('\0').update(body).digest().subarray(0, 16).toString('base64url');
  }
}

export function invalidMarker(): AppError {
  return new AppError('invalid_marker', 'this marker was not issued for this listing; list again without a marker');
}
