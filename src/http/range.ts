import { AppError } from '../errors.ts';
import type { ByteRange } from '../data/blobStore.ts';

/**
 * One byte range from a Range header (RFC 9110 14.2), or undefined to send the whole file:
 * no header, a unit other than bytes, or several ranges (answering those whole is allowed).
 * An unsatisfiable range is refused with 416.
 */
export function parseRange(header: string | undefined, size: number): ByteRange | undefined {
  if (!header) return undefined;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m || (m[1] === '' && m[2] === '')) return undefined;
  let start: number;
  let end: number;
  if (m[1] === '') {
    const suffix = Number(m[2]);
    if (suffix === 0) throw unsatisfiable(size);
    start = Math.max(0, size - suffix);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
    if (m[2] !== '' && Number(m[2]) < start) return undefined;
  }
  if (start >= size || !Number.isSafeInteger(start)) throw unsatisfiable(size);
  return { start, end };
}

function unsatisfiable(size: number): AppError {
  return new AppError('range_not_satisfiable', `the requested range is outside the file (it has ${size} bytes)`, undefined);
}

/** Does an If-None-Match header match this ETag (weak comparison, RFC 9110 13.1.2)? */
export function noneMatch(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  if (header.trim() === '*') return true;
  const bare = etag.replace(/^W\//, '');
  return header.split(',').some((t) => t.trim().replace(/^W\//, '') === bare);
}
