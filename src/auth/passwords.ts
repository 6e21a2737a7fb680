/**
 * Console passwords, hashed with scrypt (RFC 7914), the memory-hard KDF in Node's own crypto:
 * N = 2^15, r = 8, p = 1 takes 32 MiB and some 50-100 ms per hash here, which is what makes a
 * stolen database slow to guess through. The stored form carries its parameters, so that
 * they can be raised later without invalidating the passwords already set:
 *
 *   scrypt$<log2 N>$<r>$<p>$<salt, base64url>$<hash, base64url>
 */
import crypto from 'node:crypto';
import { promisify } from 'node:util';
import { AppError } from '../errors.ts';
import { isWellFormed, NOT_WELL_FORMED } from '../wellFormed.ts';

const scrypt = promisify(crypto.scrypt) as (password: string, salt: Buffer, keylen: number, options: crypto.ScryptOptions) => Promise<Buffer>;

const LOG_N = 15;
const R = 8;
const P = 1;
const KEY_BYTES = 32;
const SALT_BYTES = 16;

export const MIN_PASSWORD_LENGTH = 8;
/** Long enough for any passphrase; bounded so that a hash request cannot be made arbitrarily costly. */
export const MAX_PASSWORD_LENGTH = 1024;

/** scrypt needs 128·N·r bytes; Node refuses above `maxmem` (32 MiB by default, just too little). */
function maxmem(logN: number, r: number): number {
  return 128 * 2 ** logN * r + 1024 * 1024;
}

/**
 * Hashes run at most this many at once, with at most QUEUE waiting: anyone may ask for a
 * sign-in, and each costs 32 MiB and tens of milliseconds of CPU. Past that, a sign-in is
 * turned away at once (429) rather than let a flood take the server's CPU.
 */
const CONCURRENT = 2;
const QUEUE = 32;
let running = 0;
const waiting: (() => void)[] = [];

/** Places taken by sign-ins that will hash soon (HashPlace), counted with those waiting. */
let reserved = 0;
const BUSY = () => new AppError('too_many_attempts', 'too many sign-ins at once on this server; try again in a few seconds');

/** A place among the hashes, taken before a sign-in writes its attempt to the store. */
export interface HashPlace {
  /** Gives the place back unused (the sign-in ended before its hash); once only. */
  release(): void;
}

/**
 * Takes a place for one hash, or turns the sign-in away at once (429) when every place is taken:
 * a sign-in takes it before it writes its attempt to the store, and hands it to
 * verifyPassword, so that a flood of sign-ins costs the store no more writes than the hashes
 * can follow.
 */
export function reserveHash(): HashPlace {
  if (running + waiting.length + reserved >= CONCURRENT + QUEUE) throw BUSY();
  reserved++;
  let held = true;
  return {
    release: () => {
      if (held) {
        held = false;
        reserved--;
      }
    },
  };
}

async function limited<T>(fn: () => Promise<T>, place?: HashPlace): Promise<T> {
  if (running >= CONCURRENT) {
    // A reserved place was counted when it was taken: it is not turned away now.
    if (!place && waiting.length + reserved >= QUEUE) throw BUSY();
    place?.release();
    await new Promise<void>((resolve) => waiting.push(resolve));
  } else {
    place?.release();
    running++;
  }
  try {
    return await fn();
  } finally {
    const next = waiting.shift();
    if (next) next(); // the slot passes straight to the next in line
    else running--;
  }
}

export function validatePassword(password: unknown): string {
  if (typeof password !== 'string') throw new AppError('invalid_password', 'the password must be a string');
  if ([...password].length < MIN_PASSWORD_LENGTH) throw new AppError('invalid_password', `the password is too short: use at least ${MIN_PASSWORD_LENGTH} characters`);
  if (password.length > MAX_PASSWORD_LENGTH) throw new AppError('invalid_password', `the password is too long: at most ${MAX_PASSWORD_LENGTH} characters`);
  // Hashed as UTF-8, a lone surrogate would be U+FFFD: another password would match.
  if (!isWellFormed(password)) throw new AppError('invalid_password', `the password ${NOT_WELL_FORMED}`);
  return password;
}

export async function hashPassword(password: string): Promise<string> {
  const salt = crypto.randomBytes(SALT_BYTES);
  const hash = await limited(() => scrypt(password.normalize('NFC'), salt, KEY_BYTES, { N: 2 ** LOG_N, r: R, p: P, maxmem: maxmem(LOG_N, R) }));
  return ['scrypt', LOG_N, R, P, salt.toString('base64url'), hash.toString('base64url')].join('$');
}

/**
 * Whether `password` matches `stored` (a hash from hashPassword); compares in constant time.
 * `place`: one taken with reserveHash, used by the hash (its taker releases it either way).
 */
export async function verifyPassword(password: string, stored: string, place?: HashPlace): Promise<boolean> {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [logN, r, p] = [Number(parts[1]), Number(parts[2]), Number(parts[3])];
  // Bounds on what a stored value may ask for: a corrupt row must not cost more than 256 MiB or long.
  if (!(Number.isInteger(logN) && Number.isInteger(r) && Number.isInteger(p) && logN >= 10 && r >= 1 && p >= 1 && p <= 4 && 128 * 2 ** logN * r <= 256 * 1024 * 1024)) return false;
  const salt = Buffer.from(parts[4]!, 'base64url');
  const expected = Buffer.from(parts[5]!, 'base64url');
  if (expected.length < 16) return false;
  const actual = await limited(() => scrypt(password.normalize('NFC'), salt, expected.length, { N: 2 ** logN, r, p, maxmem: maxmem(logN, r) }), place);
  return crypto.timingSafeEqual(actual, expected);
}

/**
 * A hash of no one's password, verified against when a sign-in names an unknown user (or
 * one without a password), so that the answer takes as long as for a wrong password.
 */
let decoy: Promise<string> | undefined;
export function decoyHash(): Promise<string> {
  decoy ??= hashPassword(crypto.randomBytes(18).toString('base64url'));
  return decoy;
}
