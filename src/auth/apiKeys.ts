import crypto from 'node:crypto';
import { AppError } from '../errors.ts';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** `length` uniformly random base62 characters (rejection sampling: no modulo bias). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const byte of crypto.randomBytes(length * 2)) {
      if (byte < 248) out += BASE62[byte % 62];
      if (out.length === length) break;
    }
  }
  return out;
}

/** Keys are `sim` + 25 base62 characters (28 in all), as the original clients check. */
export const API_KEY_PATTERN = /^sim[0-9A-Za-z]{25}$/;

export function generateApiKey(): string {
  return 'sim' + randomBase62(25);
}

/**
 * Keys carry ~149 bits of randomness, so a fast hash is the right tool (a slow password hash
 * would add latency to every call and protects nothing more). Lookup is by this hash: an
 * attacker controls the key, not its hash, so index timing says nothing about stored keys.
 */
export function hashApiKey(key: string): string {
  return sha256Hex(key);
}

/** crypto.hash (Node >= 20.12) is the one-shot form, without a Hash object per call. */
const sha256Hex: (text: string) => string =
  typeof crypto.hash === 'function' ? (text) => crypto.hash('sha256', text, 'hex') : (text) => crypto.createHash('sha256').update(text).digest('hex');

export function newKeyId(): string {
  return 'key_' + randomBase62(16);
}

/**
 * The key in an Authorization header: `Simple <key>` (most clients), `Bearer <key>`, or the
 * bare key (the Python client). Returns undefined when there is no header at all.
 */
export function keyFromAuthorization(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const value = header.trim();
  if (value === '') return undefined;
  const parts = value.split(/\s+/);
  if (parts.length === 1) return parts[0];
  if (parts.length === 2) {
    const scheme = parts[0]!.toLowerCase();
    if (scheme === 'simple' || scheme === 'bearer') return parts[1];
  }
  throw new AppError(
    'invalid_authorization',
    'Authorization header not understood; send "Authorization: Simple <API key>"',
  );
}
