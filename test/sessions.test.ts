/**
 * Console sign-in (docs/console.md): passwords (scrypt), the session cookie and its CSRF
 * token, sign-out, expiry, password changes, the admin CLI's --password-stdin, and what a
 * cookie without the token (as another site's page can make a browser send it) can do: nothing.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { hashPassword, verifyPassword } from '../src/auth/passwords.ts';
import { SESSION_COOKIE, addressKey, downloadTicket } from '../src/auth/sessions.ts';
import { ConfigError, loadConfig } from '../src/config.ts';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { release } from './helpers/algorithms.ts';
import { runCli } from './helpers/process.ts';

test('passwords: scrypt with its parameters and a salt, checked in constant time', async () => {
  const a = await hashPassword('correct horse battery');
  const b = await hashPassword('correct horse battery');
  assert.match(a, /^scrypt\$15\$8\$1\$[A-Za-z0-9_-]{22}\$[A-Za-z0-9_-]{43}$/);
  assert.notEqual(a, b, 'each hash has its own salt');
  assert.equal(await verifyPassword('correct horse battery', a), true);
  assert.equal(await verifyPassword('correct horse batterY', a), false);
  assert.equal(await verifyPassword('correct horse battery', a.replace(/\$15\$/, '$30$')), false, 'a stored cost out of bounds is refused, not run');
  assert.equal(await verifyPassword('x', 'plain'), false);
});

interface Session {
  cookie: string;
  csrf: string;
  setCookie: string;
}

describe('console sessions over HTTP', () => {
  let s: TestServer;
  let aliceKey: string;

  before(async () => {
    s = await startServer();
    aliceKey = await s.user('alice');
    await s.services.sessions.setPassword('alice', 'alice password 1');
    await s.user('bob');
    await s.services.sessions.setPassword('bob', 'bob password 12');
  });
  after(() => s.close());

  async function signIn(username: string, password: string): Promise<Session> {
    const r = await fetch(`${s.url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }) });
    const body = await json(r);
    assert.equal(r.status, 200, JSON.stringify(body));
    const setCookie = r.headers.get('set-cookie')!;
    const cookie = new RegExp(`^${SESSION_COOKIE}=([A-Za-z0-9_-]{43});`).exec(setCookie)![1]!;
    return { cookie, csrf: body.csrf_token as string, setCookie };
  }

  /** The cookie, and the token unless `csrf` is null (another value: that one instead). */
  const withSession = (x: Session, init: RequestInit = {}, csrf: string | null = x.csrf): RequestInit => {
    const headers = new Headers(init.headers);
    headers.set('cookie', `other=1; ${SESSION_COOKIE}=${x.cookie}`);
    if (csrf !== null) headers.set('x-csrf-token', csrf);
    return { ...init, headers };
  };

  test('signing in sets a __Host- cookie that is HttpOnly, Secure and SameSite=Strict, and answers the CSRF token', async () => {
    const x = await signIn('Alice', 'alice password 1');
    assert.match(x.setCookie, /; Path=\/;/);
    assert.match(x.setCookie, /; HttpOnly/);
    assert.match(x.setCookie, /; Secure/);
    assert.match(x.setCookie, /; SameSite=Strict/);
    assert.doesNotMatch(x.setCookie, /Domain=/i);
    assert.match(x.csrf, /^[A-Za-z0-9_-]{32}$/);
    const who = await fetch(`${s.url}/v1/session`, withSession(x, {}, null));
    const info = await json(who);
    assert.equal(who.status, 200);
    assert.equal(info.username, 'alice');
    assert.equal(info.csrf_token, x.csrf);
    assert.equal(who.headers.get('access-control-allow-origin'), null, 'no page of another origin may read the token');
    assert.equal(who.headers.get('cache-control'), 'no-store');
  });

  test('a wrong password and an unknown user get the same 401, and the store keeps no session', async () => {
    const before = await s.services.store.db.selectFrom('sessions').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
    for (const [username, password] of [['alice', 'alice password 2'], ['nobody', 'alice password 1'], ['bob', '']] as const) {
      const r = await fetch(`${s.url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }) });
      const body = await json(r);
      assert.equal(r.status, 401);
      assert.equal(body.error.code, 'invalid_credentials');
      assert.equal(body.error.message, 'wrong user name or password');
      assert.equal(r.headers.get('set-cookie'), null);
    }
    const afterCount = await s.services.store.db.selectFrom('sessions').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
    assert.equal(Number(afterCount.n), Number(before.n));
    const bad = await fetch(`${s.url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'alice', password: 'x', remember: true }) });
    assert.equal(bad.status, 400);
    assert.equal((await json(bad)).error.code, 'invalid_body');
  });

  test('the cookie with its token works the API as the user; without the token, or with another session\'s, it opens nothing', async () => {
    const x = await signIn('alice', 'alice password 1');
    const y = await signIn('bob', 'bob password 12');
    const ok = await fetch(`${s.url}/v1/users/alice/keys`, withSession(x));
    assert.equal(ok.status, 200);
    assert.ok(((await json(ok)).results as unknown[]).length >= 1);
    for (const csrf of [null, '', y.csrf, x.csrf.slice(0, -1) + (x.csrf.endsWith('A') ? 'B' : 'A')]) {
      const r = await fetch(`${s.url}/v1/users/alice/keys`, withSession(x, {}, csrf));
      assert.equal(r.status, 403, `token ${String(csrf)}`);
      assert.equal((await json(r)).error.code, 'csrf_token_invalid');
    }
    // A write without the token changes nothing.
    const put = await fetch(`${s.url}/v1/data/.my/secret`, withSession(x, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'made' }) }, null));
    assert.equal(put.status, 403);
    const list = await fetch(`${s.url}/v1/data/.my`, { headers: { authorization: `Simple ${aliceKey}` } });
    assert.doesNotMatch(await list.text(), /made/);
    // A page of another site: refused whatever it sends (browsers set Sec-Fetch-Site themselves).
    const cross = await fetch(`${s.url}/v1/users/alice/keys`, withSession(x, { headers: { 'sec-fetch-site': 'cross-site' } }));
    assert.equal(cross.status, 403);
    assert.equal((await json(cross)).error.code, 'cross_site_request');
    const crossSignIn = await fetch(`${s.url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json', 'sec-fetch-site': 'cross-site' }, body: JSON.stringify({ username: 'alice', password: 'alice password 1' }) });
    assert.equal(crossSignIn.status, 403);
    // Bob's session is Bob: Alice's keys stay hers.
    const other = await fetch(`${s.url}/v1/users/alice/keys`, withSession(y));
    assert.equal(other.status, 403);
    assert.equal((await json(other)).error.code, 'forbidden');
  });

  test('a session calls algorithms (sync and output=void) and creates keys that act as the user', async () => {
    const key = await s.user('carol');
    await s.services.sessions.setPassword('carol', 'carol password');
    const call = (p: string, init: RequestInit = {}) => {
      const headers = new Headers(init.headers);
      headers.set('authorization', `Simple ${key}`);
      return fetch(s.url + p, { ...init, headers });
    };
    await release(call, 'carol', 'Echo', { 'src/index.js': "export const input_types = ['text'];\nexport function apply(input) { return `echo ${input}`; }\n", 'package.json': '{"name":"echo","version":"1.0.0"}' }, { settings: { language: 'javascript' } });
    const x = await signIn('carol', 'carol password');
    const r = await fetch(`${s.url}/v1/algo/carol/Echo`, withSession(x, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'hi' }));
    const body = await json(r);
    assert.equal(r.status, 200, JSON.stringify(body));
    assert.equal(body.result, 'echo hi');
    const denied = await fetch(`${s.url}/v1/algo/carol/Echo`, withSession(x, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'hi' }, null));
    assert.equal(denied.status, 403);

    const queued = await fetch(`${s.url}/v1/algo/carol/Echo?output=void`, withSession(x, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'later' }));
    const q = await json(queued);
    assert.equal(queued.status, 200, JSON.stringify(q));
    const id = q.request_id as string;
    let done: { status?: string; response?: { result?: unknown } } | undefined;
    for (let i = 0; i < 200 && done?.status !== 'done'; i++) {
      const g = await fetch(`${s.url}/v1/requests/${id}`, withSession(x));
      assert.equal(g.status, 200);
      done = await json(g);
      if (done?.status !== 'done') await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(done?.response?.result, 'echo later', JSON.stringify(done));

    const made = await fetch(`${s.url}/v1/users/carol/keys`, withSession(x, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'from-console' }) }));
    const rec = await json(made);
    assert.equal(made.status, 201, JSON.stringify(rec));
    const me = await fetch(`${s.url}/v1/user`, { headers: { authorization: `Simple ${rec.api_key as string}` } });
    assert.equal((await json(me)).username, 'carol');
  });

  test('from a session, someone else\'s algorithm may read the user\'s data but not change it; the user\'s own may', async () => {
    const bobKey = await s.services.keys.create((await s.services.users.require('bob')).id, { name: 'for-test' }).then((k) => k.apiKey);
    const hal = await s.user('hal');
    await s.services.sessions.setPassword('hal', 'hal password');
    const as = (key: string) => (p: string, init: RequestInit = {}) => fetch(s.url + p, { ...init, headers: { ...(init.headers as Record<string, string>), authorization: `Simple ${key}` } });
    const src = {
      'src/index.js': `export async function apply(input, ctx) {
  const c = ctx.client;
  const read = await c.file('data://.my/notes/a.txt').getString();
  let wrote = 'yes';
  try { await c.file('data://.my/notes/b.txt').put('overwritten'); } catch (e) { wrote = String(e.message || e); }
  return { read, wrote };
}
`,
      'package.json': '{"name":"t","version":"1.0.0"}',
    };
    await release(as(bobKey), 'bob', 'Toucher', src, { settings: { language: 'javascript' } });
    await release(as(hal), 'hal', 'Mine', src, { settings: { language: 'javascript' } });
    await as(hal)('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"notes"}' });
    await as(hal)('/v1/data/.my/notes/a.txt', { method: 'PUT', body: 'private note' });
    const x = await signIn('hal', 'hal password');
    const call = async (ref: string) => json(await fetch(`${s.url}/v1/algo/${ref}`, withSession(x, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '1' })));
    const foreign = await call('bob/Toucher');
    assert.equal(foreign.result?.read, 'private note', JSON.stringify(foreign));
    assert.match(String(foreign.result?.wrote), /allow_data_write|denied|403/i);
    assert.equal((await as(hal)('/v1/data/.my/notes/b.txt', { method: 'HEAD' })).status, 404, 'nothing was written');
    const own = await call('hal/Mine');
    assert.equal(own.result?.wrote, 'yes', JSON.stringify(own));
    // With a full key, the contract's rule holds as before: the algorithm acts as its caller.
    const keyed = await json(await as(hal)('/v1/algo/bob/Toucher', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '1' }));
    assert.equal(keyed.result?.wrote, 'yes');
  });

  test('a download link reads one file, with the cookie, by GET, for a minute; nothing else', async () => {
    const key = { authorization: `Simple ${aliceKey}` };
    assert.equal((await fetch(`${s.url}/v1/data/.my`, { method: 'POST', headers: { ...key, 'content-type': 'application/json' }, body: '{"name":"dl"}' })).status, 200);
    const bytes = Buffer.from('a file to save, not to show: <script>alert(1)</script>');
    const name = 'ré port "1".html';
    const filePath = `/v1/data/.my/dl/${encodeURIComponent(name)}`;
    assert.equal((await fetch(`${s.url}${filePath}`, { method: 'PUT', headers: key, body: bytes })).status, 200);
    assert.equal((await fetch(`${s.url}/v1/data/.my/dl/other.txt`, { method: 'PUT', headers: key, body: 'other' })).status, 200);
    const x = await signIn('alice', 'alice password 1');
    const y = await signIn('bob', 'bob password 12');
    const ask = (who: Session, body: unknown, csrf: string | null = who.csrf) =>
      fetch(`${s.url}/v1/session/downloads`, withSession(who, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }, csrf));

    // Asking takes the session's token, and a file path of the data API.
    const noToken = await ask(x, { path: filePath }, null);
    assert.equal(noToken.status, 403);
    assert.equal((await json(noToken)).error.code, 'csrf_token_invalid');
    for (const path of ['/v1/algo/demo/Hello', '/v1/users/alice/keys', `${filePath}?acl=true`, 'v1/data/.my/dl/x', 42]) {
      const r = await ask(x, { path });
      assert.equal(r.status, 400, `path ${String(path)}`);
      assert.equal((await json(r)).error.code, 'invalid_body');
    }
    const asked = await ask(x, { path: filePath });
    assert.equal(asked.status, 200);
    assert.equal(asked.headers.get('cache-control'), 'no-store');
    const link = await json(asked);
    assert.ok(link.url.startsWith(`${filePath}?download=`), link.url);
    assert.ok(Math.abs(Date.parse(link.expires_at) - Date.now() - 60_000) < 5_000, link.expires_at);
    assert.doesNotMatch(link.url, new RegExp(x.csrf), 'the token itself is not in the link');

    // With the cookie and no token header: the file, as an attachment under its own name.
    const got = await fetch(`${s.url}${link.url}`, withSession(x, {}, null));
    assert.equal(got.status, 200);
    assert.ok(Buffer.from(await got.arrayBuffer()).equals(bytes));
    assert.equal(got.headers.get('content-disposition'), `attachment; filename="r_ port _1_.html"; filename*=UTF-8''r%C3%A9%20port%20%221%22.html`);
    assert.equal((await fetch(`${s.url}${link.url}`, withSession(x, { method: 'HEAD' }, null))).status, 200);
    const ranged = await fetch(`${s.url}${link.url}`, withSession(x, { headers: { range: 'bytes=0-5' } }, null));
    assert.equal(ranged.status, 206, 'a resumed download');

    const refused = async (what: string, r: Response, status: number, code: string) => {
      assert.equal(r.status, status, what);
      assert.equal((await json(r)).error.code, code, what);
    };
    const ticket = link.url.slice(link.url.indexOf('=') + 1);
    // The link alone, without the cookie, is nothing.
    await refused('no cookie', await fetch(`${s.url}${link.url}`), 401, 'auth_required');
    // Another session's cookie: the ticket is keyed by this session's token.
    await refused('bob\'s cookie', await fetch(`${s.url}${link.url}`, withSession(y, {}, null)), 403, 'download_link_invalid');
    // Another file, the folder's listing, a write, the same ticket on another path.
    await refused('another file', await fetch(`${s.url}/v1/data/.my/dl/other.txt?download=${ticket}`, withSession(x, {}, null)), 403, 'download_link_invalid');
    await refused('the listing', await fetch(`${s.url}/v1/data/.my/dl?download=${ticket}`, withSession(x, {}, null)), 403, 'download_link_invalid');
    await refused('a delete', await fetch(`${s.url}${link.url}`, withSession(x, { method: 'DELETE' }, null)), 403, 'csrf_token_invalid');
    await refused('a keys listing', await fetch(`${s.url}/v1/users/alice/keys?download=${ticket}`, withSession(x, {}, null)), 403, 'download_link_invalid');
    assert.equal((await fetch(`${s.url}${filePath}`, { method: 'HEAD', headers: key })).status, 200, 'the delete did nothing');
    // A link asked for a folder lists nothing: a link is for reading one file.
    const folderLink = await json(await ask(x, { path: '/v1/data/.my/dl' }));
    await refused('a folder\'s link', await fetch(`${s.url}${folderLink.url}`, withSession(x, {}, null)), 403, 'download_link_invalid');
    await refused('a folder\'s link, paged', await fetch(`${s.url}${folderLink.url}&marker=x&acl=true`, withSession(x, {}, null)), 403, 'download_link_invalid');
    // A ticket changed, expired, or made to last longer than a minute.
    const [exp, mac] = ticket.split('.') as [string, string];
    await refused('a changed expiry', await fetch(`${s.url}${filePath}?download=${Number(exp) + 1}.${mac}`, withSession(x, {}, null)), 403, 'download_link_invalid');
    await refused('a changed mac', await fetch(`${s.url}${filePath}?download=${exp}.${mac.slice(0, -1)}${mac.endsWith('A') ? 'B' : 'A'}`, withSession(x, {}, null)), 403, 'download_link_invalid');
    const nowS = Math.floor(Date.now() / 1000);
    for (const [what, at] of [['expired', nowS - 1], ['an hour long', nowS + 3600]] as const) {
      const forged = downloadTicket(x.csrf, filePath, at);
      await refused(what, await fetch(`${s.url}${filePath}?download=${forged}`, withSession(x, {}, null)), 403, 'download_link_invalid');
    }
    // After signing out, the link is dead too.
    assert.equal((await fetch(`${s.url}/v1/session`, withSession(x, { method: 'DELETE' }))).status, 204);
    await refused('signed out', await fetch(`${s.url}${link.url}`, withSession(x, {}, null)), 401, 'no_session');
    // A key's `?download` just asks for an attachment.
    const byKey = await fetch(`${s.url}/v1/data/.my/dl/other.txt?download=1`, { headers: key });
    assert.equal(byKey.status, 200);
    assert.equal(byKey.headers.get('content-disposition'), `attachment; filename="other.txt"; filename*=UTF-8''other.txt`);
  });

  test('signing out ends the session everywhere; it takes the token, so another site cannot sign anyone out', async () => {
    const x = await signIn('alice', 'alice password 1');
    const noToken = await fetch(`${s.url}/v1/session`, withSession(x, { method: 'DELETE' }, null));
    assert.equal(noToken.status, 403);
    assert.equal((await fetch(`${s.url}/v1/users/alice/keys`, withSession(x))).status, 200, 'still signed in');
    const out = await fetch(`${s.url}/v1/session`, withSession(x, { method: 'DELETE' }));
    assert.equal(out.status, 204);
    assert.match(out.headers.get('set-cookie')!, new RegExp(`^${SESSION_COOKIE}=; Path=/; Max-Age=0;`));
    const after = await fetch(`${s.url}/v1/users/alice/keys`, withSession(x));
    assert.equal(after.status, 401);
    assert.equal((await json(after)).error.code, 'no_session');
    assert.equal((await fetch(`${s.url}/v1/session`, withSession(x))).status, 401);
  });

  test('an expired session opens nothing, and is removed when others sign in', async () => {
    const x = await signIn('alice', 'alice password 1');
    await s.services.store.write((trx) => trx.updateTable('sessions').set({ expires_at: Date.now() - 1 }).where('csrf_token', '=', x.csrf).execute());
    const r = await fetch(`${s.url}/v1/users/alice/keys`, withSession(x));
    assert.equal(r.status, 401);
    assert.equal((await json(r)).error.code, 'no_session');
    await signIn('bob', 'bob password 12');
    const left = await s.services.store.db.selectFrom('sessions').select('csrf_token').where('csrf_token', '=', x.csrf).execute();
    assert.equal(left.length, 0);
  });

  test('changing a password takes the current one, ends the other sessions and keeps this one', async () => {
    await s.user('dave');
    await s.services.sessions.setPassword('dave', 'dave password 1');
    const x = await signIn('dave', 'dave password 1');
    const other = await signIn('dave', 'dave password 1');
    const put = (body: unknown, session = x) =>
      fetch(`${s.url}/v1/users/dave/password`, withSession(session, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }));
    const wrong = await put({ current_password: 'nope nope', password: 'dave password 2' });
    assert.equal(wrong.status, 401);
    assert.equal((await json(wrong)).error.code, 'invalid_credentials');
    const short = await put({ current_password: 'dave password 1', password: 'short' });
    assert.equal(short.status, 400);
    assert.equal((await json(short)).error.code, 'invalid_password');
    assert.equal((await put({ current_password: 'dave password 1', password: 'dave password 2' })).status, 204);
    assert.equal((await fetch(`${s.url}/v1/users/dave/keys`, withSession(x))).status, 200, 'the session that changed it stays');
    assert.equal((await fetch(`${s.url}/v1/users/dave/keys`, withSession(other))).status, 401, 'the others end');
    const old = await fetch(`${s.url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'dave', password: 'dave password 1' }) });
    assert.equal(old.status, 401);
    await signIn('dave', 'dave password 2');
    // Someone else's password: refused, whoever asks.
    const bobs = await fetch(`${s.url}/v1/users/bob/password`, withSession(x, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ current_password: 'bob password 12', password: 'taken over!' }) }));
    assert.equal(bobs.status, 403);
  });

  test('deleting a user ends their sessions and removes their usage rows', async () => {
    await s.user('gone');
    await s.services.sessions.setPassword('gone', 'gone password');
    const x = await signIn('gone', 'gone password');
    const user = await s.services.users.require('gone');
    await s.services.store.write((trx) =>
      trx.insertInto('usage').values({ day: '2026-11-01', caller_id: user.id, owner_id: 999_999, owner: 'x', name: 'y', version: '1.0.0', outcome: 'ok', calls: 1, duration_ms: 5, bytes_in: 1, bytes_out: 1 }).execute(),
    );
    await s.services.users.delete('gone');
    assert.equal((await fetch(`${s.url}/v1/session`, withSession(x, {}, null))).status, 401);
    const sessions = await s.services.store.db.selectFrom('sessions').select('id_hash').where('user_id', '=', user.id).execute();
    const usage = await s.services.store.db.selectFrom('usage').select('day').where('caller_id', '=', user.id).execute();
    assert.deepEqual([sessions.length, usage.length], [0, 0]);
  });

  test('guesses sent all at once are counted all the same; a narrowed key cannot try passwords', async () => {
    // Failures are counted in the store: under test:cluster the balancer spreads these over
    // both API nodes, and they count the same tries.
    const node = s.url;
    await s.user('ivy');
    await s.services.sessions.setPassword('ivy', 'ivy password');
    const guesses = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        fetch(`${node}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'ivy', password: `guess ${i}` }) }).then((r) => r.status),
      ),
    );
    assert.equal(guesses.filter((c) => c === 401).length, 10, `ten counted failures, the rest refused: ${guesses.join(',')}`);
    assert.equal(guesses.filter((c) => c === 429).length, 14);
    const right = await fetch(`${node}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'ivy', password: 'ivy password' }) });
    assert.equal(right.status, 429, 'locked for the window, right password or not');

    const jay = await s.user('jay');
    await s.services.sessions.setPassword('jay', 'jay password');
    const made = await fetch(`${s.url}/v1/users/jay/keys`, { method: 'POST', headers: { authorization: `Simple ${jay}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'web', permissions: { allow_algo_management: false, allow_data: false, allow_data_write: false } }) });
    const narrow = (await json(made)).api_key as string;
    const put = await fetch(`${s.url}/v1/users/jay/password`, { method: 'PUT', headers: { authorization: `Simple ${narrow}`, 'content-type': 'application/json' }, body: JSON.stringify({ current_password: 'jay password', password: 'taken over' }) });
    assert.equal(put.status, 403);
    assert.equal((await json(put)).error.code, 'key_permission_denied');
  });

  test('a flood of sign-ins is turned away at once past what the hashes can follow, and costs the store no write', async () => {
    const names = Array.from({ length: 200 }, (_, i) => `flood${String(i).padStart(3, '0')}`);
    const answers = await Promise.all(
      names.map(async (username) => {
        const r = await fetch(`${s.url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password: 'not this one' }) });
        return { username, status: r.status, body: await json(r) };
      }),
    );
    const busy = answers.filter((a) => a.status === 429);
    const tried = answers.filter((a) => a.status === 401);
    assert.equal(busy.length + tried.length, names.length, answers.map((a) => a.status).join(','));
    assert.ok(busy.length > 0, 'two hashes at a time with 32 waiting cannot take 200 at once');
    for (const a of busy) assert.match(a.body.error.message, /too many sign-ins at once/);
    // Only the tries that were hashed were counted: one row each, none for those turned away.
    const rows = await s.services.store.db.selectFrom('signin_failures').select(['username_lc', 'count']).where('username_lc', 'like', 'flood%').where('address', '=', '').execute();
    assert.deepEqual(rows.map((r) => r.username_lc).sort(), tried.map((a) => a.username).sort());
    assert.ok(rows.every((r) => Number(r.count) === 1));
  });

  test('after ten failed sign-ins from an address a name is refused there for a while, with a 429 saying so; when the window has passed, it may sign in', async () => {
    const node = s.url; // every API node, as above
    await s.user('erin');
    await s.services.sessions.setPassword('erin', 'erin password');
    // Without ALGOHOST_TRUST_PROXY, X-Forwarded-For is not believed: these are all one address.
    for (let i = 0; i < 10; i++) {
      const r = await fetch(`${node}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': `198.51.100.${i}` }, body: JSON.stringify({ username: 'erin', password: `guess ${i}` }) });
      assert.equal(r.status, 401);
    }
    const r = await fetch(`${node}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': '198.51.100.99' }, body: JSON.stringify({ username: 'erin', password: 'erin password' }) });
    assert.equal(r.status, 429);
    const body = await json(r);
    assert.equal(body.error.code, 'too_many_attempts');
    assert.match(body.error.message, /from your address; try again in (15|14) minutes/);
    // Fifteen minutes on (the window's start moved back): the name may try again, and a right
    // password leaves no count behind. The refused try counted for the address, not the name.
    const failures = () => s.services.store.db.selectFrom('signin_failures').select(['address', 'count']).where('username_lc', '=', 'erin').orderBy('address').execute();
    assert.deepEqual((await failures()).map((r) => [r.address, Number(r.count)]), [['', 10], ['127.0.0.1', 11]]);
    await s.services.store.write((trx) => trx.updateTable('signin_failures').set({ since: Date.now() - 15 * 60_000 - 1 }).where('username_lc', '=', 'erin').execute());
    const again = await fetch(`${node}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'erin', password: 'erin password' }) });
    assert.equal(again.status, 200);
    assert.deepEqual(await failures(), []);
  });
});

test('sign-ins are counted by address: IPv4 as it is, IPv6 by its /64, anything else as one', () => {
  const cases: [string | undefined, string][] = [
    ['203.0.113.7', '203.0.113.7'],
    // IPv4 written as IPv6, however spelt.
    ['::ffff:203.0.113.7', '203.0.113.7'],
    ['::FFFF:cb00:7107', '203.0.113.7'],
    ['0:0:0:0:0:ffff:203.0.113.7', '203.0.113.7'],
    ['::203.0.113.7', '203.0.113.7'],
    // IPv6 by its first 64 bits, however spelt.
    ['2001:db8:1:2::a', '2001:db8:1:2::/64'],
    ['2001:DB8:1:2::B', '2001:db8:1:2::/64'],
    ['2001:0db8:0001:0002:0000:0000:0000:000b', '2001:db8:1:2::/64'],
    ['2001:db8:1:3::a', '2001:db8:1:3::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['::a:b:c:d:1.2.3.4', '0:0:a:b::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['::', '0:0:0:0::/64'],
    // Not an address (a proxy passing on what a client wrote): one key for all of them.
    ['1.2.3.4:5678', 'invalid'],
    ['[2001:db8::1]', 'invalid'],
    ['x'.repeat(5000), 'invalid'],
    ['', 'invalid'],
    [undefined, 'unknown'],
  ];
  for (const [ip, key] of cases) assert.equal(addressKey(ip), key, String(ip).slice(0, 40));
});

test('ALGOHOST_TRUST_PROXY takes proxy addresses and ranges; true, a hop count and anything else stop the start, naming the setting', () => {
  const trust = (v: string) => loadConfig({}, { ALGOHOST_TRUST_PROXY: v }).trustProxy;
  assert.equal(loadConfig({}, {}).trustProxy, false);
  assert.equal(trust(''), false);
  assert.deepEqual(trust('10.0.0.5, 10.0.0.0/8,fd00::/8, loopback'), ['10.0.0.5', '10.0.0.0/8', 'fd00::/8', 'loopback']);
  assert.deepEqual(trust('::ffff:10.0.0.5,::ffff:10.0.0.0/104'), ['::ffff:10.0.0.5', '::ffff:10.0.0.0/104']);
  for (const bad of ['true', '1', 'proxy.internal', '10.0.0.0/33', '10.0.0.0/8/1', 'fd00::/129', '10.0.0.5,,10.0.0.6', '10.0.0.5,', '0.0.0.0/0', '::/0', '::ffff:0.0.0.0/96']) {
    assert.throws(() => trust(bad), (e) => e instanceof ConfigError && e.message.startsWith('ALGOHOST_TRUST_PROXY'), bad);
  }
});

test('with ALGOHOST_TRUST_PROXY, failures count per client address: ten from one lock that one out, not the name; a hundred from all lock the name', async () => {
  // The test's own connections come from loopback: they play the trusted proxy.
  const s = await startServer({ env: { ALGOHOST_TRUST_PROXY: 'loopback' } });
  try {
    await s.user('gail');
    await s.services.sessions.setPassword('gail', 'gail password');
    const signIn = (password: string, forwardedFor: string) =>
      fetch(`${s.url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': forwardedFor }, body: JSON.stringify({ username: 'gail', password }) });
    const rows = async () =>
      (await s.services.store.db.selectFrom('signin_failures').select(['address', 'count']).where('username_lc', '=', 'gail').orderBy('address').execute()).map((r) => [r.address, Number(r.count)]);

    for (let i = 0; i < 10; i++) assert.equal((await signIn(`guess ${i}`, '203.0.113.7')).status, 401);
    // An address the client put before the proxy's own entry is not believed.
    for (const from of ['203.0.113.7', '192.0.2.1, 203.0.113.7']) {
      const r = await signIn('gail password', from);
      assert.equal(r.status, 429, from);
      assert.match((await json(r)).error.message, /too many failed sign-ins for "gail" from your address; try again in (15|14) minutes/);
    }
    // Another address signs in; the name counts only the tries the first address was allowed.
    assert.equal((await signIn('gail password', '198.51.100.9')).status, 200);
    assert.deepEqual(await rows(), [['', 10], ['203.0.113.7', 12]]);

    // One IPv6 subscriber (a /64) is one address, whichever of its addresses it uses.
    for (let i = 0; i < 10; i++) assert.equal((await signIn(`guess ${i}`, `2001:db8:1:2::${i + 1}`)).status, 401);
    assert.equal((await signIn('gail password', '2001:db8:1:2::ff')).status, 429);
    assert.equal((await signIn('gail password', '2001:db8:1:3::1')).status, 200);
    // The name counts the tries of both addresses that were allowed them.
    assert.deepEqual(await rows(), [['', 20], ['2001:db8:1:2::/64', 11], ['203.0.113.7', 12]]);

    // A hundred failures for the name over every address: now every address waits.
    await s.services.store.write((trx) => trx.updateTable('signin_failures').set({ count: 100 }).where('username_lc', '=', 'gail').where('address', '=', '').execute());
    const r = await signIn('gail password', '192.0.2.77');
    assert.equal(r.status, 429);
    assert.match((await json(r)).error.message, /^too many failed sign-ins for "gail"; try again in (15|14) minutes/);
    // An operator's new password lifts the lock, everywhere.
    await s.services.sessions.setPassword('gail', 'gail new password');
    assert.deepEqual(await rows(), []);
    assert.equal((await signIn('gail new password', '203.0.113.7')).status, 200);

    // The trusted proxy's scheme and host make the links the API writes.
    const gail = api(s.url, await s.user('gail2'));
    assert.equal((await gail('/v1/algorithms/gail2', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"Linked","settings":{"language":"python3"}}' })).status, 201);
    const behind = await json(await gail('/v1/algorithms/gail2/Linked', { headers: { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'algo.example' } }));
    assert.equal(behind.self_link, 'https://algo.example/v1/algorithms/gail2/Linked');
  } finally {
    await s.close();
  }
});

test('the admin CLI: user create --password-stdin and user password (with or without it) set what the console signs in with', async () => {
  const home = tempHome('algohost-cli-pw-');
  const made = await runCli(['user', 'create', 'frank', '--password-stdin', '--init'], home, undefined, {}, 'frank password 1\n');
  assert.equal(made.code, 0, made.stderr);
  assert.equal(JSON.parse(made.stdout).password_set, true);
  const short = await runCli(['user', 'create', 'gina', '--password-stdin'], home, undefined, {}, 'short\n');
  assert.notEqual(short.code, 0);
  assert.match(short.stderr, /too short/);
  const changed = await runCli(['user', 'password', 'frank'], home, undefined, {}, 'frank password 2\n');
  assert.equal(changed.code, 0, changed.stderr);
  // The flag the README pairs with user create is taken by user password too.
  const flagged = await runCli(['user', 'password', 'frank', '--password-stdin'], home, undefined, {}, 'frank password 3\n');
  assert.equal(flagged.code, 0, flagged.stderr);
  assert.equal(JSON.parse(flagged.stdout).password_set, true);
  const unknown = await runCli(['user', 'password', 'nobody'], home, undefined, {}, 'whatever password\n');
  assert.notEqual(unknown.code, 0);
  assert.match(unknown.stderr, /no user named "nobody"/);

  const s = await startServer({ home });
  try {
    const list = await s.services.users.list();
    assert.deepEqual(list.map((u) => u.username), ['frank'], 'a refused password leaves no user behind');
    const signIn = (password: string) =>
      fetch(`${s.url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'frank', password }) });
    assert.equal((await signIn('frank password 1')).status, 401);
    assert.equal((await signIn('frank password 2')).status, 401);
    assert.equal((await signIn('frank password 3')).status, 200);
  } finally {
    await s.close();
  }
});
