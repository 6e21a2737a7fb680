import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../errors.ts';
import { CSRF_HEADER, DOWNLOAD_PARAM, DOWNLOAD_TICKET_TTL_S, SESSION_COOKIE, downloadTicket, readCookie, type SessionService } from '../auth/sessions.ts';
import { isOwner } from '../data/acl.ts';
import { checkObject } from './body.ts';
import type { DownloadLink } from '../../client/src/types.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The session cookie's value, when the session (not an API key) authenticated the request. */
    sessionCookie?: string;
    /** The session's cookie with a download link's ticket (not its CSRF token) authenticated it. */
    byDownloadLink?: boolean;
  }
}

/**
 * `Sec-Fetch-Site`, which browsers set on every request and pages cannot forge: a request a
 * page of another site made is refused before its cookie is even looked at. (The CSRF token
 * refuses it anyway; this is the second lock, and it costs nothing.)
 */
export function refuseCrossSite(req: FastifyRequest): void {
  const site = req.headers['sec-fetch-site'];
  if (site === 'cross-site' || site === 'same-site') {
    throw new AppError('cross_site_request', 'a console session can only be used by pages of this server; other sites must call the API with a key');
  }
}

/**
 * The download ticket a GET or HEAD brings in its query (`?download=...`), with the raw path it
 * must be good for; undefined for every other request (sessions.ts).
 */
export function downloadOf(req: FastifyRequest): { path: string; ticket: string } | undefined {
  if (req.method !== 'GET' && req.method !== 'HEAD') return undefined;
  const url = req.raw.url ?? '';
  const q = url.indexOf('?');
  if (q < 0) return undefined;
  const ticket = new URLSearchParams(url.slice(q + 1)).get(DOWNLOAD_PARAM);
  return ticket === null ? undefined : { path: url.slice(0, q), ticket };
}

function setCookie(reply: FastifyReply, value: string, maxAgeS: number): void {
  // Secure: browsers keep it over HTTPS, and on http://localhost or 127.0.0.1 (docs/console.md).
  reply.header('set-cookie', `${SESSION_COOKIE}=${value}; Path=/; Max-Age=${maxAgeS}; HttpOnly; Secure; SameSite=Strict`);
}

/**
 * Sign-in for the web console, as part of the public API (docs/console.md). None of these
 * answers carries CORS headers: only pages of this origin can read the CSRF token.
 */
export async function sessionRoutes(app: FastifyInstance, opts: { sessions: SessionService }): Promise<void> {
  const { sessions } = opts;

  app.post('/v1/session', async (req, reply) => {
    refuseCrossSite(req);
    const body = checkObject(req.body, ['username', 'password']);
    const { cookie, info, maxAgeS } = await sessions.signIn(body.username, body.password, req.ip);
    setCookie(reply, cookie, maxAgeS);
    reply.header('cache-control', 'no-store');
    return info;
  });

  app.get('/v1/session', async (req, reply) => {
    refuseCrossSite(req);
    const cookie = readCookie(req.headers.cookie, SESSION_COOKIE);
    const found = cookie === undefined ? undefined : await sessions.lookup(cookie);
    if (!found) throw new AppError('no_session', 'not signed in: sign in with your user name and password');
    reply.header('cache-control', 'no-store');
    return found.info;
  });

  // A link that downloads one file with this session (sessions.ts): the browser saves it to disk
  // as it arrives, however large, where a fetch would hold it whole in the page.
  app.post('/v1/session/downloads', async (req, reply) => {
    refuseCrossSite(req);
    const cookie = readCookie(req.headers.cookie, SESSION_COOKIE);
    if (cookie === undefined) throw new AppError('no_session', 'not signed in: sign in with your user name and password');
    const csrf = req.headers[CSRF_HEADER];
    await sessions.authenticate(cookie, typeof csrf === 'string' ? csrf : undefined);
    const body = checkObject(req.body, ['path']);
    const expiresS = Math.floor(Date.now() / 1000) + DOWNLOAD_TICKET_TTL_S;
    // The token the request carried is the session's: authenticate compared them.
    const ticket = downloadTicket(csrf as string, body.path as string, expiresS);
    reply.header('cache-control', 'no-store');
    return { url: `${body.path as string}?${DOWNLOAD_PARAM}=${ticket}`, expires_at: new Date(expiresS * 1000).toISOString() } satisfies DownloadLink;
  });

  app.delete('/v1/session', async (req, reply) => {
    refuseCrossSite(req);
    const cookie = readCookie(req.headers.cookie, SESSION_COOKIE);
    // Signing out takes the token too: a page of another site cannot end someone's session.
    if (cookie !== undefined) {
      const header = req.headers[CSRF_HEADER];
      await sessions.authenticate(cookie, typeof header === 'string' ? header : undefined);
      await sessions.signOut(cookie);
    }
    setCookie(reply, '', 0);
    return reply.code(204).send();
  });
}

/** Changing a password (authenticated: by the session, or by a key), the current one asked again. */
export async function passwordRoutes(app: FastifyInstance, opts: { sessions: SessionService }): Promise<void> {
  app.put<{ Params: { username: string } }>('/v1/users/:username/password', async (req, reply) => {
    const principal = req.principal!;
    if (!isOwner(principal, req.params.username)) throw new AppError('forbidden', `you can only change your own password (you are ${principal.username})`);
    // A narrowed key (one embedded in a web page, say) must not be a way to guess the password.
    if (req.sessionCookie === undefined && !principal.permissions.allow_algo_management) {
      throw new AppError('key_permission_denied', 'this API key may not change the password (allow_algo_management is off)');
    }
    const body = checkObject(req.body, ['current_password', 'password']);
    await opts.sessions.changePassword(principal, body.current_password, body.password, req.ip, req.sessionCookie);
    return reply.code(204).send();
  });
}
