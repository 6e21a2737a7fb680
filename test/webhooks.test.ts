/**
 * Webhooks (issue 23; docs/events.md): subscriptions over HTTP, deliveries to real receivers on
 * loopback (ALGOHOST_CONNECTOR_NETWORK=any lets them be there), signed as the Standard Webhooks
 * specification says and checked with its own npm package (`standardwebhooks`), retried on a
 * (shortened) schedule, recorded attempt by attempt, redelivered with the same id, and another
 * user's subscriptions out of reach.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { verify } from '../src/events/signing.ts';
import { ownListener, type OwnListener } from './helpers/ownAddress.ts';

/** Retries a few hundred ms apart instead of seconds to hours (8 attempts, as the real schedule). */
const SCHEDULE = [0, 100, 200, 200, 200, 200, 200, 200];
const CLUSTER = process.env.ALGOHOST_TEST_BACKENDS === 'cluster';

let s: TestServer;
let alice: ReturnType<typeof api>;
let bob: ReturnType<typeof api>;
/** Added to the server's clock (the failing-for-days rule). */
let skew = 0;

interface Received {
  headers: http.IncomingHttpHeaders;
  body: string;
  at: number;
}

/** A receiver on 127.0.0.1 that records what it gets and answers as `answer` says (status, or 'hang'). */
async function receiver(answer: (n: number) => number | 'hang' = () => 200) {
  const got: Received[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c));
    req.on('end', () => {
      got.push({ headers: req.headers, body, at: Date.now() });
      const a = answer(got.length);
      if (a === 'hang') return;
      res.writeHead(a, a >= 300 && a < 400 ? { location: 'http://127.0.0.1:1/elsewhere' } : {}).end(a === 200 ? 'ok' : 'nope');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    got,
    async until(n: number, ms = 15_000) {
      const end = Date.now() + ms;
      while (got.length < n && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
      return got;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

const postJson = (call: ReturnType<typeof api>, path: string, body: unknown, method = 'POST') => call(path, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

async function subscribe(url: string, extra: Record<string, unknown> = {}, who = alice, user = 'alice') {
  const r = await postJson(who, `/v1/users/${user}/subscriptions`, { url, ...extra });
  const body = await json(r);
  assert.equal(r.status, 201, JSON.stringify(body));
  return body as { id: string; secret: string; url: string; types: string[]; path: string | null; enabled: boolean };
}

before(async () => {
  s = await startServer({ env: { ALGOHOST_CONNECTOR_NETWORK: 'any' }, webhooks: { schedule: SCHEDULE, timeoutMs: 1000, now: () => Date.now() + skew } });
  alice = api(s.url, await s.user('alice'));
  bob = api(s.url, await s.user('bob'));
  await postJson(alice, '/v1/data/.my', { name: 'inbox' });
  await postJson(bob, '/v1/data/.my', { name: 'inbox' });
});
after(() => s.close());

describe('webhook subscriptions', () => {
  test('made, listed, read, changed and deleted; the secret is shown once, when made', async () => {
    const made = await subscribe('https://example.com/hook', { types: ['data.file.*'], path: 'data://.my/inbox/**' });
    assert.match(made.id, /^sub_[0-9a-f]{24}$/);
    assert.match(made.secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.deepEqual([made.url, made.types, made.path, made.enabled], ['https://example.com/hook', ['data.file.*'], 'data://.my/inbox/**', true]);
    const one = await json(await alice(`/v1/users/alice/subscriptions/${made.id}`));
    assert.equal(one.secret, undefined, 'the secret is shown again');
    assert.equal(one.id, made.id);
    const list = await json(await alice('/v1/users/alice/subscriptions'));
    assert.ok(list.results.some((x: { id: string }) => x.id === made.id));
    const patched = await json(await postJson(alice, `/v1/users/alice/subscriptions/${made.id}`, { enabled: false, types: ['data.**'] }, 'PATCH'));
    assert.equal(patched.enabled, false);
    assert.deepEqual(patched.types, ['data.**']);
    assert.equal(patched.path, 'data://.my/inbox/**');
    assert.equal((await alice(`/v1/users/alice/subscriptions/${made.id}`, { method: 'DELETE' })).status, 204);
    assert.equal((await alice(`/v1/users/alice/subscriptions/${made.id}`)).status, 404);
  });

  test('bad bodies are 400 with what is wrong; another user\'s subscriptions are out of reach', async () => {
    for (const [body, pattern] of [
      [{ url: 'ftp://example.com/x' }, /http:\/\/ or https:\/\//],
      [{ url: 'https://user:pw@example.com/x' }, /no user name or password/],
      [{ url: 'not a url' }, /is not a URL/],
      [{ url: 'https://example.com/x', types: ['no.such'] }, /matches no event type/],
      [{ url: 'https://example.com/x', types: 'data.file.*' }, /a list of event types/],
      [{ url: 'https://example.com/x', path: 'data://bob/**' }, /your own data/],
      [[1, 2], /JSON object/],
    ] as const) {
      const r = await postJson(alice, '/v1/users/alice/subscriptions', body);
      const b = await json(r);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(b.error.code, 'invalid_subscription');
      assert.match(b.error.message, pattern);
    }
    const mine = await subscribe('https://example.com/mine');
    assert.equal((await bob(`/v1/users/alice/subscriptions`)).status, 403);
    const theirs = await bob(`/v1/users/bob/subscriptions/${mine.id}`);
    assert.equal(theirs.status, 404);
    assert.equal((await json(theirs)).error.code, 'subscription_not_found');
    assert.equal((await bob(`/v1/users/bob/subscriptions/${mine.id}`, { method: 'DELETE' })).status, 404);
    assert.equal((await postJson(bob, `/v1/users/bob/subscriptions/${mine.id}/test`, {})).status, 404);
    await alice(`/v1/users/alice/subscriptions/${mine.id}`, { method: 'DELETE' });
  });

  test('with ALGOHOST_CONNECTOR_NETWORK=public (the default), the address rule holds: internal addresses, the deployment\'s services and the server\'s own public address are refused, when subscribing and at delivery', async (t) => {
    const strict = await startServer();
    let mine: OwnListener | string | undefined;
    try {
      const carol = api(strict.url, await strict.user('carol'));
      // The deployment's database (PostgreSQL under test:shared and test:cluster) and NATS are services of ours too.
      const services = [process.env.ALGOHOST_TEST_PG_URL, strict.cluster ? strict.services.config.natsUrl : undefined].flatMap((u) => (u ? [`http://${new URL(u).host}/hook`] : []));
      for (const url of ['http://127.0.0.1:9/hook', 'http://169.254.169.254/latest', 'http://[::1]/x', 'http://10.1.2.3/x', 'http://168.63.129.16/machine', ...services]) {
        const r = await postJson(carol, '/v1/users/carol/subscriptions', { url });
        const body = await json(r);
        assert.equal(r.status, 403, url);
        assert.equal(body.error.code, 'connector_address_refused');
        assert.match(body.error.message, /^the webhook url was refused by the address rule: /);
      }

      // The finding (issue 36): a subscription reached a listener on the node's own public
      // address, and its delivery records told what answered there. This machine is given such
      // an address (198.51.100.213 on an interface of the test's own: no range refuses it).
      const made = await subscribe('http://198.51.100.213:9/hook', {}, carol, 'carol');
      mine = await ownListener('198.51.100.213');
      if (typeof mine === 'string') return t.skip(mine);
      const url = `${mine.url}/hook`;
      const r = await postJson(carol, '/v1/users/carol/subscriptions', { url });
      assert.equal(r.status, 403);
      assert.match((await json(r)).error.message, /^the webhook url was refused by the address rule: 198\.51\.100\.213 is an address of this server\./);
      // A subscription made before the rule (or to a name that now resolves here) is refused at delivery.
      await strict.services.store.write((trx) => trx.updateTable('subscriptions').set({ url }).where('id', '=', made.id).execute());
      const queued = await json(await postJson(carol, `/v1/users/carol/subscriptions/${made.id}/test`, {}));
      let attempts: { status_code: number | null; error: string }[] = [];
      for (const end = Date.now() + 15_000; attempts.length === 0 && Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {
        const list = await json(await carol(`/v1/users/carol/subscriptions/${made.id}/deliveries`));
        attempts = list.results.find((d: { id: string }) => d.id === queued.id)?.attempts ?? [];
      }
      assert.ok(attempts.length > 0, 'no attempt was recorded');
      assert.equal(attempts[0]!.status_code, null);
      assert.match(attempts[0]!.error, /^the endpoint was refused by the address rule: 198\.51\.100\.213 is an address of this server\./);
      assert.doesNotMatch(attempts[0]!.error, /501|Unsupported|ECONNREFUSED|Parse Error/);
      assert.deepEqual(mine.heard, [], 'the listener on the server\'s own address was reached');
    } finally {
      if (typeof mine === 'object') await mine.close();
      await strict.close();
    }
  });
});

describe('deliveries', () => {
  test('an upload reaches the endpoint as a signed CloudEvent that the standardwebhooks package verifies; only what the filter wants', async () => {
    const rx = await receiver();
    const sub = await subscribe(rx.url, { types: ['data.file.created'], path: 'data://.my/inbox/**' });
    try {
      await alice('/v1/data/.my/inbox/skip.json', { method: 'PUT', body: '{}' }).then((r) => assert.equal(r.status, 200));
      await alice('/v1/data/.my/inbox/skip.json', { method: 'PUT', body: '{"again":1}' });
      await postJson(alice, '/v1/data/.my', { name: 'elsewhere' });
      const [d] = await rx.until(1);
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(rx.got.length, 1, 'an update or another path was delivered');
      const event = new Webhook(sub.secret).verify(d!.body, d!.headers as Record<string, string>) as { type: string; subject: string; specversion: string; data: { size: number } };
      assert.equal(event.type, 'data.file.created');
      assert.equal(event.subject, 'data://alice/inbox/skip.json');
      assert.equal(event.specversion, '1.0');
      assert.equal(d!.headers['content-type'], 'application/json');
      assert.match(String(d!.headers['webhook-id']), /^msg_[0-9a-f]{24}$/);
      assert.ok(verify(sub.secret, d!.headers, d!.body), 'our own verify disagrees');
      // A body changed in transit, or another secret, does not verify.
      assert.throws(() => new Webhook(sub.secret).verify(d!.body.replace('skip', 'skop'), d!.headers as Record<string, string>));
      assert.throws(() => new Webhook(`whsec_${Buffer.alloc(32, 7).toString('base64')}`).verify(d!.body, d!.headers as Record<string, string>));
      const deliveries = await json(await alice(`/v1/users/alice/subscriptions/${sub.id}/deliveries`));
      assert.equal(deliveries.results.length, 1);
      const [one] = deliveries.results;
      assert.equal(one.id, d!.headers['webhook-id']);
      assert.equal(one.status, 'delivered');
      assert.equal(one.attempts.length, 1);
      assert.equal(one.attempts[0].status_code, 200);
      assert.equal(typeof one.attempts[0].latency_ms, 'number');
    } finally {
      await alice(`/v1/users/alice/subscriptions/${sub.id}`, { method: 'DELETE' });
      await rx.close();
    }
  });

  test('a failing endpoint is retried on the schedule with the same webhook-id; a redirect is a failure; every attempt is listed', { skip: CLUSTER ? 'the second API node keeps the real schedule' : false }, async () => {
    const rx = await receiver((n) => (n === 1 ? 500 : n === 2 ? 302 : 200));
    const sub = await subscribe(rx.url, { types: ['data.directory.created'] });
    try {
      await postJson(alice, '/v1/data/.my', { name: 'retried' });
      const got = await rx.until(3);
      assert.equal(got.length, 3);
      assert.equal(new Set(got.map((g) => g.headers['webhook-id'])).size, 1, 'a retry had another id');
      // The last answer is recorded just after the receiver has sent it.
      let d;
      for (const stop = Date.now() + 5_000; ; ) {
        [d] = (await json(await alice(`/v1/users/alice/subscriptions/${sub.id}/deliveries`))).results;
        if (d.status !== 'pending' || Date.now() > stop) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(d.status, 'delivered');
      assert.deepEqual(
        d.attempts.map((a: { status_code: number }) => a.status_code),
        [500, 302, 200],
      );
      assert.match(d.attempts[0].error, /answered 500/);
      assert.match(d.attempts[1].error, /answered 302/);
    } finally {
      await alice(`/v1/users/alice/subscriptions/${sub.id}`, { method: 'DELETE' });
      await rx.close();
    }
  });

  test('an endpoint that never answers in time fails each attempt; after the last the delivery is failed; one that fails for days is turned off, saying why', { skip: CLUSTER ? 'the second API node keeps the real schedule and clock' : false }, async () => {
    const rx = await receiver(() => 'hang');
    const sub = await subscribe(rx.url, { types: ['data.directory.created'] });
    try {
      await postJson(alice, '/v1/data/.my', { name: 'hanging' });
      const end = Date.now() + 30_000;
      let d;
      for (;;) {
        [d] = (await json(await alice(`/v1/users/alice/subscriptions/${sub.id}/deliveries`))).results;
        if (d?.status === 'failed' || Date.now() > end) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(d.status, 'failed');
      assert.equal(d.attempts.length, SCHEDULE.length);
      assert.ok(d.attempts.every((a: { status_code: number | null; error: string }) => a.status_code === null && /no answer within 1 s/.test(a.error)));
      const failing = await json(await alice(`/v1/users/alice/subscriptions/${sub.id}`));
      assert.ok(failing.failing_since, 'failing_since not set');
      assert.equal(failing.enabled, true);
      // Six days later, it fails again: it is turned off.
      skew += 6 * 24 * 3_600_000;
      await postJson(alice, '/v1/data/.my', { name: 'later' });
      let off;
      for (const stop = Date.now() + 20_000; Date.now() < stop; ) {
        off = await json(await alice(`/v1/users/alice/subscriptions/${sub.id}`));
        if (!off.enabled) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(off.enabled, false);
      assert.match(off.disabled_reason, /every delivery has failed since .*PATCH \{"enabled": true\}/);
      // Turned on again by its owner: a fresh start.
      const on = await json(await postJson(alice, `/v1/users/alice/subscriptions/${sub.id}`, { enabled: true }, 'PATCH'));
      assert.equal(on.enabled, true);
      assert.equal(on.disabled_reason, null);
      assert.equal(on.failing_since, null);
    } finally {
      skew = 0;
      await alice(`/v1/users/alice/subscriptions/${sub.id}`, { method: 'DELETE' });
      await rx.close();
    }
  });

  test('a test event is sent when asked; a delivery is sent again with its id when asked', async () => {
    const rx = await receiver();
    const sub = await subscribe(rx.url);
    try {
      const r = await postJson(alice, `/v1/users/alice/subscriptions/${sub.id}/test`, {});
      assert.equal(r.status, 202);
      const queued = await json(r);
      const [first] = await rx.until(1);
      const event = new Webhook(sub.secret).verify(first!.body, first!.headers as Record<string, string>) as { type: string };
      assert.equal(event.type, 'webhook.test');
      assert.equal(first!.headers['webhook-id'], queued.id);
      const again = await postJson(alice, `/v1/users/alice/subscriptions/${sub.id}/deliveries/${queued.id}/redeliver`, {});
      assert.equal(again.status, 202);
      const got = await rx.until(2);
      assert.equal(got[1]!.headers['webhook-id'], queued.id);
      assert.equal(got[1]!.body, first!.body);
      assert.equal((await postJson(alice, `/v1/users/alice/subscriptions/${sub.id}/deliveries/msg_000000000000000000000000/redeliver`, {})).status, 404);
    } finally {
      await alice(`/v1/users/alice/subscriptions/${sub.id}`, { method: 'DELETE' });
      await rx.close();
    }
  });

  test('a rotated secret: both sign for a while, so a receiver verifies with either', async () => {
    const rx = await receiver();
    const sub = await subscribe(rx.url);
    try {
      const rotated = await json(await postJson(alice, `/v1/users/alice/subscriptions/${sub.id}/secret`, {}));
      assert.match(rotated.secret, /^whsec_/);
      assert.notEqual(rotated.secret, sub.secret);
      await postJson(alice, `/v1/users/alice/subscriptions/${sub.id}/test`, {});
      const [d] = await rx.until(1);
      assert.equal(String(d!.headers['webhook-signature']).split(' ').length, 2);
      for (const secret of [sub.secret, rotated.secret]) new Webhook(secret).verify(d!.body, d!.headers as Record<string, string>);
    } finally {
      await alice(`/v1/users/alice/subscriptions/${sub.id}`, { method: 'DELETE' });
      await rx.close();
    }
  });

  test('an endpoint that hangs holds a few of the sends, not all: the other subscriptions\' deliveries go on, and uploads are not held', async () => {
    let open = 0;
    let most = 0;
    const hanging = http.createServer((req) => {
      open++;
      most = Math.max(most, open);
      req.resume();
      req.socket.once('close', () => open--);
    });
    await new Promise<void>((r) => hanging.listen(0, '127.0.0.1', r));
    const rx = await receiver();
    await postJson(alice, '/v1/data/.my', { name: 'hang' });
    const filter = { types: ['data.file.created'], path: 'data://.my/hang/**' };
    const stuck = await subscribe(`http://127.0.0.1:${(hanging.address() as AddressInfo).port}/hook`, filter);
    const good = await subscribe(rx.url, filter);
    try {
      const n = 40;
      const puts = await Promise.all(Array.from({ length: n }, (_, i) => alice(`/v1/data/.my/hang/f${i}`, { method: 'PUT', body: 'x' })));
      assert.ok(puts.every((r) => r.status === 200));
      const got = await rx.until(n, 30_000);
      assert.equal(new Set(got.map((g) => (JSON.parse(g.body) as { subject: string }).subject)).size, n, 'every event reached the working endpoint');
      // Each API node sends at most 4 at once to one subscription (the cluster has two).
      assert.ok(most >= 1 && most <= (CLUSTER ? 8 : 4), `the hanging endpoint had ${most} requests open at once`);
    } finally {
      await alice(`/v1/users/alice/subscriptions/${stuck.id}`, { method: 'DELETE' });
      await alice(`/v1/users/alice/subscriptions/${good.id}`, { method: 'DELETE' });
      await rx.close();
      hanging.closeAllConnections();
      await new Promise<void>((r) => hanging.close(() => r()));
    }
  });

  test('finished deliveries are kept 7 days, then swept with their attempts', async () => {
    const rx = await receiver();
    const sub = await subscribe(rx.url);
    try {
      await postJson(alice, `/v1/users/alice/subscriptions/${sub.id}/test`, {});
      await rx.until(1);
      const end = Date.now() + 10_000;
      let list: { status: string }[] = [];
      while (Date.now() < end && list[0]?.status !== 'delivered') {
        list = (await json(await alice(`/v1/users/alice/subscriptions/${sub.id}/deliveries`))).results;
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(list[0]?.status, 'delivered');
      assert.equal(await s.services.webhooks.sweep(Date.now() + 6 * 24 * 3_600_000), 0, 'kept for 7 days');
      assert.ok((await s.services.webhooks.sweep(Date.now() + 8 * 24 * 3_600_000)) >= 1);
      assert.deepEqual((await json(await alice(`/v1/users/alice/subscriptions/${sub.id}/deliveries`))).results, []);
    } finally {
      await alice(`/v1/users/alice/subscriptions/${sub.id}`, { method: 'DELETE' });
      await rx.close();
    }
  });

  test("bob's subscription hears nothing of alice's changes", async () => {
    const rx = await receiver();
    const sub = await subscribe(rx.url, {}, bob, 'bob');
    try {
      await alice('/v1/data/.my/inbox/private.txt', { method: 'PUT', body: 'secret' });
      await bob('/v1/data/.my/inbox/bobs.txt', { method: 'PUT', body: 'mine' });
      await rx.until(1);
      await new Promise((r) => setTimeout(r, 500));
      assert.deepEqual(
        rx.got.map((g) => (JSON.parse(g.body) as { subject: string }).subject),
        ['data://bob/inbox/bobs.txt'],
      );
    } finally {
      await bob(`/v1/users/bob/subscriptions/${sub.id}`, { method: 'DELETE' });
      await rx.close();
    }
  });
});
