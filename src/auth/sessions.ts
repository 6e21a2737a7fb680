/**
 * Console sessions (docs/console.md). A user signs in with name and password and gets a
 * random session id in an HttpOnly cookie; the store keeps only its SHA-256. A request the
 * cookie authenticates must also carry the session's CSRF token in `X-CSRF-Token`, which only
 * a page of our own origin can read (from the sign-in answer or `GET /v1/session`, which send
 * no CORS headers): a cookie alone, as a cross-site page can make the browser send it, opens
 * nothing. Sessions are read from the store on every request, never cached, so a sign-out or
 * an expiry holds on every node at once.
 *
 * One exception to the header, for downloads: a browser saves a file to disk as it arrives only
 * when it navigates to it, and a navigation cannot carry a header. So the page asks for a
 * download link (`POST /v1/session/downloads`, with the token) and the link carries a ticket in
 * its query instead: an HMAC, keyed by the session's CSRF token, of that one path and an expiry
 * a minute away. It reads that one file, for GET and HEAD only, and only with the session's
 * cookie besides: in a log or a history it opens nothing, and it needs no state on any node.
 */
import crypto from 'node:crypto';
import { ipv6Groups } from '../addresses.ts';
import net from 'node:net';
import type { MetadataStore } from '../store/db.ts';
import { AppError } from '../errors.ts';
import { FULL_PERMISSIONS } from './permissions.ts';
import type { Principal } from './principal.ts';
import { LIMIT_COLUMNS, ownLimits } from '../limits/limits.ts';
import type { SessionInfo } from '../../client/src/types.ts';
import { decoyHash, hashPassword, reserveHash, validatePassword, verifyPassword } from './passwords.ts';

/** `__Host-`: the browser keeps it only if Secure, for Path=/ and this exact host (no Domain). */
export const SESSION_COOKIE = '__Host-algohost_session';
export const CSRF_HEADER = 'x-csrf-token';
/** The key id a session's principal carries (keys it made, calls it queued, say where they came from). */
export const SESSION_KEY_PREFIX = 'session:';
/** The query parameter of a download link (docs/auth.md). */
export const DOWNLOAD_PARAM = 'download';
/** How long a download link stays good: long enough to start it, not to pass it around. */
export const DOWNLOAD_TICKET_TTL_S = 60;

/** Sign-in failures a user name may have from one client address per window. */
const MAX_FAILURES = 10;
/**
 * ... and from every address together: guesses spread over many addresses stop too, while
 * one address failing ten times no longer locks the name for everyone else.
 */
const MAX_NAME_FAILURES = 100;
const FAILURE_WINDOW_MS = 15 * 60_000;
/** The `address` of a name's row over every address. */
const ANY_ADDRESS = '';

/** A signin_failures row as an attempt's upsert returns it. */
interface FailureRow {
  address: string;
  since: number;
  count: number;
}

/**
 * The address sign-ins are counted by: an IPv4 address as it is (one written as IPv6, mapped
 * or compatible, as IPv4), an IPv6 address as its /64, which one subscriber usually holds
 * whole. Anything else (a proxy passing on whatever a client wrote) is one key, `invalid`.
 */
export function addressKey(ip: string | undefined): string {
  if (ip === undefined) return 'unknown';
  if (net.isIPv4(ip)) return ip;
  const bare = ip.replace(/%.*$/, ''); // a zone (fe80::1%eth0)
  if (!net.isIPv6(bare)) return 'invalid';
  const groups = ipv6Groups(bare);
  // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated) carry an IPv4 address.
  if (groups.slice(0, 5).every((g) => g === 0) && (groups[5] === 0xffff || (groups[5] === 0 && groups[6] !== 0))) {
    return [groups[6]! >> 8, groups[6]! & 0xff, groups[7]! >> 8, groups[7]! & 0xff].join('.');
  }
  return `${groups.slice(0, 4).map((g) => g.toString(16)).join(':')}::/64`;
}


export type { SessionInfo } from '../../client/src/types.ts';

const sha256 = (value: string) => crypto.createHash('sha256').update(value).digest('hex');

export class SessionService {
  constructor(
    private readonly store: MetadataStore,
    private readonly ttlMs: number,
    /** Sessions one user may have (ALGOHOST_MAX_SESSIONS_PER_USER; 0: no cap): a sign-in past it ends their oldest. */
    private readonly maxPerUser = 0,
  ) {}

  /** Sets (or replaces) a user's console password; their sessions end, and failed sign-ins counted for the name are forgotten. */
  async setPassword(username: string, password: unknown): Promise<void> {
    const hash = await hashPassword(validatePassword(password));
    await this.store.write(async (trx) => {
      const user = await trx.selectFrom('users').select('id').where('username_lc', '=', username.toLowerCase()).executeTakeFirst();
      if (!user) throw new AppError('unknown_user', `no user named "${username}"`);
      await trx.updateTable('users').set({ password_hash: hash }).where('id', '=', user.id).execute();
      await trx.deleteFrom('sessions').where('user_id', '=', user.id).execute();
      // A new password lifts any lock on the name (an operator's remedy for a user locked out).
      await trx.deleteFrom('signin_failures').where('username_lc', '=', username.toLowerCase()).execute();
    });
  }

  /**
   * Changes a password from the console or the API: the current one is asked for again, so
   * that a session or key left open cannot lock its owner out. The session that asked stays.
   */
  async changePassword(principal: Principal, current: unknown, next: unknown, address: string | undefined, keepSession?: string): Promise<void> {
    if (typeof current !== 'string') throw new AppError('invalid_body', 'send {"current_password": "...", "password": "..."}');
    const hash = await hashPassword(validatePassword(next));
    const row = await this.store.db.selectFrom('users').select(['id', 'password_hash']).where('id', '=', principal.userId).executeTakeFirst();
    if (!row) throw new AppError('unknown_user', `no user named "${principal.username}"`);
    await this.checkPassword(principal.username, current, row.password_hash, address);
    await this.store.write(async (trx) => {
      await trx.updateTable('users').set({ password_hash: hash }).where('id', '=', row.id).execute();
      let others = trx.deleteFrom('sessions').where('user_id', '=', row.id);
      if (keepSession !== undefined) others = others.where('id_hash', '<>', sha256(keepSession));
      await others.execute();
    });
  }

  /**
   * Signs in: the new session's cookie value (secret) and what the page may know of it.
   * `address` is the client's (req.ip), which failures are counted by.
   */
  async signIn(username: unknown, password: unknown, address: string | undefined): Promise<{ cookie: string; info: SessionInfo; maxAgeS: number }> {
    if (typeof username !== 'string' || typeof password !== 'string' || username.length > 100 || password.length > 4096) {
      throw new AppError('invalid_body', 'send {"username": "...", "password": "..."} as JSON');
    }
    const row = await this.store.db
      .selectFrom('users')
      .select(['id', 'username', 'password_hash'])
      .where('username_lc', '=', username.toLowerCase())
      .executeTakeFirst();
    await this.checkPassword(username, password, row?.password_hash ?? null, address);
    const user = row!;
    const cookie = crypto.randomBytes(32).toString('base64url');
    const csrf = crypto.randomBytes(24).toString('base64url');
    const now = Date.now();
    const expires = now + this.ttlMs;
    await this.store.write(async (trx) => {
      // Expired sessions go as new ones come (an index range): no sweeper of its own needed.
      await trx.deleteFrom('sessions').where('expires_at', '<=', now).execute();
      await trx.insertInto('sessions').values({ id_hash: sha256(cookie), user_id: user.id, csrf_token: csrf, created_at: now, expires_at: expires }).execute();
      // At the cap, the oldest sessions end rather than the sign-in be refused: a user who
      // signed in on many browsers and forgot them is not locked out of a new one.
      if (this.maxPerUser > 0) {
        const mine = sha256(cookie);
        const others = await trx.selectFrom('sessions').select('id_hash').where('user_id', '=', user.id).where('id_hash', '!=', mine).orderBy('created_at', 'desc').orderBy('id_hash').limit(this.maxPerUser - 1).execute();
        const keep = [mine, ...others.map((k) => k.id_hash)];
        await trx.deleteFrom('sessions').where('user_id', '=', user.id).where('id_hash', 'not in', keep).execute();
      }
    });
    return { cookie, info: { username: user.username, csrf_token: csrf, expires_at: new Date(expires).toISOString() }, maxAgeS: Math.floor(this.ttlMs / 1000) };
  }

  /**
   * Throws invalid_credentials (same message, about the same time, whatever was wrong). The
   * attempt is counted before the hash is computed, so that guesses sent all at once are
   * counted all the same; a right password takes its own attempt back. It is counted twice:
   * for the name from this address (at most MAX_FAILURES), then, if that allows it, for the
   * name from every address (at most MAX_NAME_FAILURES). The counts are in the store (two
   * upserts in one transaction per attempt), so every API node of a cluster counts the same
   * tries.
   */
  private async checkPassword(username: string, password: string, stored: string | null, ip: string | undefined): Promise<void> {
    const key = username.toLowerCase();
    const address = addressKey(ip);
    const now = Date.now();
    // A place among the hashes first: a flood is turned away before it writes anything.
    const place = reserveHash();
    let ok: boolean;
    let here: FailureRow;
    let all: FailureRow | undefined;
    try {
      ({ here, all } = await this.store.write(async (trx) => {
        // Windows that have passed go first (an index range), this name's included: rows never
        // outlive their window, however many names are tried.
        await trx.deleteFrom('signin_failures').where('since', '<=', now - FAILURE_WINDOW_MS).execute();
        const count = (a: string) =>
          trx
            .insertInto('signin_failures')
            .values({ username_lc: key, address: a, since: now, count: 1 })
            .onConflict((oc) => oc.columns(['username_lc', 'address']).doUpdateSet((eb) => ({ count: eb('signin_failures.count', '+', 1) })))
            .returning(['address', 'since', 'count'])
            .executeTakeFirstOrThrow();
        const fromHere = await count(address);
        // Tries this address may no longer make do not count for the name: one address alone
        // adds at most MAX_FAILURES to it, and cannot lock the name for everyone.
        return { here: fromHere, all: fromHere.count > MAX_FAILURES ? undefined : await count(ANY_ADDRESS) };
      }));
      const over = here.count > MAX_FAILURES ? here : all && all.count > MAX_NAME_FAILURES ? all : undefined;
      if (over) {
        const waitMin = Math.max(1, Math.ceil((over.since + FAILURE_WINDOW_MS - now) / 60_000));
        const where = over === here ? ' from your address' : '';
        throw new AppError('too_many_attempts', `too many failed sign-ins for "${username.slice(0, 40)}"${where}; try again in ${waitMin} minute${waitMin === 1 ? '' : 's'}`);
      }
      // A user without a password (or none at all) costs the same hash as a wrong password.
      ok = await verifyPassword(password, stored ?? (await decoyHash()), place);
    } finally {
      place.release();
    }
    if (ok && stored !== null) {
      await this.store.write(async (trx) => {
        for (const row of all ? [here, all] : [here]) {
          const mine = { username_lc: key, address: row.address, since: row.since };
          await trx.updateTable('signin_failures').set((eb) => ({ count: eb('count', '-', 1) })).where((eb) => eb.and(mine)).execute();
          await trx.deleteFrom('signin_failures').where((eb) => eb.and(mine)).where('count', '<=', 0).execute();
        }
      });
      return;
    }
    throw new AppError('invalid_credentials', 'wrong user name or password');
  }

  /** The session a cookie value names, if it is live. */
  async lookup(cookie: string): Promise<{ principal: Principal; info: SessionInfo } | undefined> {
    if (cookie.length !== 43) return undefined;
    const row = await this.store.db
      .selectFrom('sessions')
      .innerJoin('users', 'users.id', 'sessions.user_id')
      .leftJoin('user_limits', 'user_limits.user_id', 'users.id')
      .select(['sessions.id_hash', 'sessions.csrf_token', 'sessions.expires_at', 'users.id as userId', 'users.username', ...LIMIT_COLUMNS])
      .where('sessions.id_hash', '=', sha256(cookie))
      .executeTakeFirst();
    if (!row || row.expires_at <= Date.now()) return undefined;
    return {
      principal: { userId: row.userId, username: row.username, keyId: SESSION_KEY_PREFIX + row.id_hash.slice(0, 16), permissions: { ...FULL_PERMISSIONS }, limits: ownLimits(row) },
      info: { username: row.username, csrf_token: row.csrf_token, expires_at: new Date(row.expires_at).toISOString() },
    };
  }

  /**
   * The principal of a request the cookie authenticates. `csrf` is the X-CSRF-Token header;
   * it must equal the session's token (compared in constant time). A GET or HEAD without the
   * header may bring a download ticket instead (`download`: the raw path and the ticket).
   */
  async authenticate(cookie: string, csrf: string | undefined, download?: { path: string; ticket: string }): Promise<Principal> {
    const found = await this.lookup(cookie);
    if (!found) throw new AppError('no_session', 'your console session has expired or ended; sign in again');
    if (csrf === undefined && download !== undefined) {
      if (!checkTicket(found.info.csrf_token, download.path, download.ticket, Date.now())) {
        throw new AppError('download_link_invalid', 'this download link has expired or is for another file; download the file again from the console');
      }
      return found.principal;
    }
    const expected = Buffer.from(found.info.csrf_token);
    const given = Buffer.from(csrf ?? '');
    if (given.length !== expected.length || !crypto.timingSafeEqual(given, expected)) {
      throw new AppError('csrf_token_invalid', `a request the session cookie authenticates must carry the session's token in X-CSRF-Token`);
    }
    return found.principal;
  }

  async signOut(cookie: string): Promise<void> {
    await this.store.write((trx) => trx.deleteFrom('sessions').where('id_hash', '=', sha256(cookie)).execute());
  }
}

/** Paths a download ticket may be made for: files in hosted data and connected storage. */
const DOWNLOADABLE = /^\/v1\/(data|connector)\/[^?#]+$/;

/** A download ticket for `path` (the raw request path, still percent-encoded), good until `expiresS`. */
export function downloadTicket(csrf: string, path: string, expiresS: number): string {
  if (typeof path !== 'string' || path.length > 8192 || !DOWNLOADABLE.test(path)) {
    throw new AppError('invalid_body', 'send {"path": "/v1/data/..."}: the path of a file in hosted data or connected storage, as the API addresses it');
  }
  return `${expiresS}.${ticketMac(csrf, path, expiresS)}`;
}

function ticketMac(csrf: string, path: string, expiresS: number): string {
  return crypto.createHmac('sha256', csrf).update(`algohost download\n${expiresS}\n${path}`).digest('base64url');
}

/** Whether `ticket` is good, at `nowMs`, for `path`. */
export function checkTicket(csrf: string, path: string, ticket: string, nowMs: number): boolean {
  const m = /^(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(ticket);
  if (!m) return false;
  const expiresS = Number(m[1]);
  // Not past its expiry, and not made for further ahead than a ticket lives (clock skew aside).
  if (expiresS * 1000 < nowMs || expiresS * 1000 > nowMs + (DOWNLOAD_TICKET_TTL_S + 60) * 1000) return false;
  const expected = Buffer.from(ticketMac(csrf, path, expiresS));
  const given = Buffer.from(m[2]!);
  return given.length === expected.length && crypto.timingSafeEqual(given, expected);
}

/** The value of one cookie in a Cookie header (undefined when absent). */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}
