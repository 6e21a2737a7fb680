/**
 * The npm client's side of events (issue 23; client/README.md): `verifyWebhook` on real
 * deliveries our server sends to a receiver on loopback (ALGOHOST_CONNECTOR_NETWORK=any),
 * held to the Standard Webhooks package (`standardwebhooks`) both ways; the live stream's
 * iterator (`client.events()`) over both transports, seeing uploads as they happen, resuming
 * after a dropped connection with Last-Event-ID, stopping on abort and on break, and refusals
 * thrown as ApiErrors; the subscription methods. Runs on every configuration.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import crypto from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { startServer, type TestServer } from './helpers/server.ts';
import { rejects } from './helpers/rejects.ts';
import { within } from './helpers/process.ts';
import { TRANSPORTS, makeClient, type AnyClient } from './helpers/clients.ts';
import {
  AlgohostClient, ApiError, NetworkError, SseParser, WebhookVerificationError, verifyWebhook, type CloudEvent, type EventStreamOptions,
} from '../client/src/index.ts';

let s: TestServer;
let aliceKey: string;
let bobKey: string;
let alice: AlgohostClient;

before(async () => {
  s = await startServer({ env: { ALGOHOST_CONNECTOR_NETWORK: 'any' } });
  aliceKey = await s.user('alice');
  bobKey = await s.user('bob');
  alice = new AlgohostClient({ baseUrl: s.url, apiKey: aliceKey, env: {} });
  await alice.dir('data://.my/inbox').create();
  await alice.dir('data://.my/other').create();
});
after(() => s.close());

/** Waits until `check` answers true, polling; fails with `what` after `ms`. */
async function until(check: () => boolean, what: string, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

interface Received {
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** A webhook receiver on 127.0.0.1 that records what it gets and answers 200. */
async function receiver() {
  const got: Received[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      got.push({ headers: req.headers, body: Buffer.concat(chunks) });
      res.end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/hook`,
    got,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/**
 * A TCP proxy in front of the server, to drop the client's connections: `cut()` closes every
 * connection through it, `stall()` lets them pass nothing more, and while `down` it takes new
 * ones and closes them at once.
 * `state.streams` counts the open connections that asked for an event stream (others, such
 * as `GET /v1/user`, may stay open in a client's pool).
 */
async function proxy(target: string) {
  const { hostname, port } = new URL(target);
  const open = new Set<net.Socket>();
  const streams = new Set<net.Socket>();
  const upstreams = new Set<net.Socket>();
  const state = { down: false, get streams() {
    return streams.size;
  } };
  const server = net.createServer((client) => {
    if (state.down) return client.destroy();
    const upstream = net.connect(Number(port), hostname);
    open.add(client);
    open.add(upstream);
    upstreams.add(upstream);
    client.once('data', (first: Buffer) => {
      if (/^GET \/v1\/users\/[^/]+\/events/.test(first.toString('latin1'))) streams.add(client);
    });
    const gone = () => {
      open.delete(client);
      streams.delete(client);
      open.delete(upstream);
      upstreams.delete(upstream);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', gone).on('error', gone);
    upstream.on('close', gone).on('error', gone);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    state,
    cut() {
      for (const socket of [...open]) socket.destroy();
    },
    /** The connections open now stay open, and pass nothing more from the server (a half-open connection). */
    stall() {
      for (const upstream of upstreams) {
        upstream.unpipe();
        upstream.pause();
      }
    },
    close: () => {
      for (const socket of [...open]) socket.destroy();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** An event iterator read in the background: what it gave, and how it ended. */
function follow(iterable: AsyncIterable<CloudEvent>) {
  const events: CloudEvent[] = [];
  const state: { ended: boolean; error: unknown } = { ended: false, error: undefined };
  const done = (async () => {
    try {
      for await (const e of iterable) events.push(e);
    } catch (err) {
      state.error = err;
    } finally {
      state.ended = true;
    }
  })();
  return { events, state, done };
}

let probes = 0;
/**
 * Uploads probe files into inbox until `check` holds. A stream "from now on" starts from where
 * the outbox is once the server has subscribed it, just after it answered: an upload made at
 * that moment may come before its start, so a test first waits for a probe to show.
 */
async function nudge(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 50; i++) {
    await alice.file(`data://.my/inbox/probe-${++probes}.txt`).put('probe');
    const end = Date.now() + 1_000;
    while (Date.now() < end) {
      if (check()) return;
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  assert.fail(`no probe upload made ${what}`);
}

/** Waits until the stream is surely live; answers the probe's event it showed. */
async function settle(events: CloudEvent[]): Promise<CloudEvent> {
  const start = events.length;
  const probe = () => events.slice(start).find((e) => e.subject.includes('/probe-'));
  await nudge(() => probe() !== undefined, 'the event stream show it');
  return probe()!;
}

describe('verifyWebhook', () => {
  test('verifies what our server delivers (a string, bytes, Node headers, a Headers, any case) as standardwebhooks does; a changed body, another secret, a missing header or an old timestamp is refused', async () => {
    const rx = await receiver();
    const sub = await alice.subscriptions('alice').create({ url: rx.url, types: ['data.file.created'], path: 'data://.my/inbox/hooked/**' });
    try {
      await alice.dir('data://.my/inbox/hooked').create();
      await alice.file('data://.my/inbox/hooked/a.txt').put('hello');
      await until(() => rx.got.length >= 1, 'the delivery');
      const d = rx.got[0]!;
      const text = d.body.toString('utf8');

      const event = await verifyWebhook(sub.secret, d.headers, text);
      assert.equal(event.type, 'data.file.created');
      assert.equal(event.subject, 'data://alice/inbox/hooked/a.txt');
      assert.match(event.id, /^evt_[0-9a-f]{24}$/);
      assert.equal(event.data.size, 5);
      // The same as the specification's package answers.
      assert.deepEqual(event, new Webhook(sub.secret).verify(text, d.headers as Record<string, string>));
      // Bytes (a Buffer, a plain Uint8Array, an ArrayBuffer), a fetch Headers, names in any case.
      assert.deepEqual(await verifyWebhook(sub.secret, d.headers, d.body), event);
      assert.deepEqual(await verifyWebhook(sub.secret, d.headers, new Uint8Array(d.body)), event);
      assert.deepEqual(await verifyWebhook(sub.secret, d.headers, new Uint8Array(d.body).buffer), event);
      assert.deepEqual(await verifyWebhook(sub.secret, new Headers(d.headers as Record<string, string>), text), event);
      const shouted = Object.fromEntries(Object.entries(d.headers).map(([k, v]) => [k.toUpperCase(), v]));
      assert.deepEqual(await verifyWebhook(sub.secret, shouted, text), event);

      const refused = async (secret: string, headers: Record<string, unknown> | Headers, body: string, code: string, options = {}) => {
        const err = await rejects(verifyWebhook(secret, headers as Record<string, string>, body, options), WebhookVerificationError);
        assert.equal(err.code, code, err.message);
        return err;
      };
      // A body changed on the way, another event id, another secret: the signature is not the secret's.
      await refused(sub.secret, d.headers, text.replace('hooked/a.txt', 'hooked/b.txt'), 'webhook_signature_invalid');
      await refused(sub.secret, { ...d.headers, 'webhook-id': 'msg_000000000000000000000000' }, text, 'webhook_signature_invalid');
      await refused(`whsec_${crypto.randomBytes(32).toString('base64')}`, d.headers, text, 'webhook_signature_invalid');
      await refused(sub.secret, { ...d.headers, 'webhook-signature': undefined }, text, 'webhook_headers_missing');
      await refused('not base64!', d.headers, text, 'webhook_secret_invalid');
      // Replayed 10 minutes later (or a clock 10 minutes behind): out of the 5 minutes tolerated, unless told otherwise.
      const later = Date.now() + 10 * 60_000;
      const old = await refused(sub.secret, d.headers, text, 'webhook_timestamp_out_of_range', { now: later });
      assert.match(old.message, /in the past/);
      await refused(sub.secret, d.headers, text, 'webhook_timestamp_out_of_range', { now: Date.now() - 10 * 60_000 });
      assert.deepEqual(await verifyWebhook(sub.secret, d.headers, text, { now: later, toleranceSeconds: 3600 }), event);
      assert.throws(() => new Webhook(sub.secret).verify(text.replace('a.txt', 'b.txt'), d.headers as Record<string, string>));
    } finally {
      await alice.subscriptions('alice').delete(sub.id);
      await rx.close();
    }
  });

  test('after a rotation a delivery is signed by both secrets and verifies with either; a third does not', async () => {
    const rx = await receiver();
    const subs = alice.subscriptions('alice');
    const sub = await subs.create({ url: rx.url, types: ['data.directory.created'] });
    try {
      const rotated = await subs.rotateSecret(sub.id);
      assert.notEqual(rotated.secret, sub.secret);
      assert.equal(rotated.id, sub.id);
      const sent = await subs.test(sub.id);
      assert.match(sent.id, /^msg_[0-9a-f]{24}$/);
      await until(() => rx.got.length >= 1, 'the test delivery');
      const d = rx.got[0]!;
      assert.equal(d.headers['webhook-id'], sent.id);
      assert.equal(String(d.headers['webhook-signature']).split(' ').length, 2, 'one signature per secret');
      const text = d.body.toString('utf8');
      const byNew = await verifyWebhook(rotated.secret, d.headers, text);
      const byOld = await verifyWebhook(sub.secret, d.headers, text);
      assert.equal(byNew.type, 'webhook.test');
      assert.deepEqual(byOld, byNew);
      for (const secret of [sub.secret, rotated.secret]) new Webhook(secret).verify(text, d.headers as Record<string, string>);
      const third = await rejects(verifyWebhook(`whsec_${crypto.randomBytes(32).toString('base64')}`, d.headers, text), WebhookVerificationError);
      assert.equal(third.code, 'webhook_signature_invalid');
    } finally {
      await subs.delete(sub.id);
      await rx.close();
    }
  });

  test('accepts what the standardwebhooks package signs, and refuses it changed; only v1 signatures count', async () => {
    const secret = `whsec_${crypto.randomBytes(24).toString('base64')}`;
    const wh = new Webhook(secret);
    const body = JSON.stringify({ specversion: '1.0', id: 'evt_1', type: 'x.y', subject: 's', data: { ü: 'ñ' } });
    const at = new Date();
    const sig = wh.sign('msg_1', at, body);
    const headers = { 'webhook-id': 'msg_1', 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': sig };
    assert.deepEqual(await verifyWebhook(secret, headers, body), JSON.parse(body));
    assert.deepEqual(await verifyWebhook(secret, headers, Buffer.from(body)), JSON.parse(body));
    // Several signatures, one of them good (a rotation): accepted; the good one under another version: not.
    assert.ok(await verifyWebhook(secret, { ...headers, 'webhook-signature': `v1,${Buffer.alloc(32).toString('base64')} ${sig}` }, body));
    const v2 = await rejects(verifyWebhook(secret, { ...headers, 'webhook-signature': sig.replace(/^v1,/, 'v2,') }, body), WebhookVerificationError);
    assert.equal(v2.code, 'webhook_signature_invalid');
    const changed = await rejects(verifyWebhook(secret, headers, body.replace('ñ', 'n')), WebhookVerificationError);
    assert.equal(changed.code, 'webhook_signature_invalid');
    const bad = await rejects(verifyWebhook(secret, { ...headers, 'webhook-timestamp': 'soon' }, body), WebhookVerificationError);
    assert.equal(bad.code, 'webhook_timestamp_invalid');
  });
});

describe('the event stream parser', () => {
  test('as the HTML standard reads text/event-stream: CRLF, CR or LF; comments; data over lines; ids kept; retry; split anywhere', () => {
    const text = 'retry: 2500\r\n: connected\r\n\r\nid: evt_1\r\ndata: {"a":\r\ndata: 1}\r\n\r\n: keep-alive\n\nid: evt_2\rdata:{"b":2}\r\revent: other\ndata: x\n\ndata: {"c":3}\n\n';
    for (const size of [1, 2, 3, 7, text.length]) {
      const p = new SseParser();
      const out = [];
      for (let i = 0; i < text.length; i += size) out.push(...p.push(text.slice(i, i + size)));
      assert.deepEqual(out, [
        { event: 'message', data: '{"a":\n1}', id: 'evt_1' },
        { event: 'message', data: '{"b":2}', id: 'evt_2' },
        { event: 'other', data: 'x', id: 'evt_2' },
        { event: 'message', data: '{"c":3}', id: 'evt_2' },
      ], `in pieces of ${size}`);
      assert.equal(p.retryMs, 2500);
      assert.equal(p.lastEventId, 'evt_2');
    }
  });
});

for (const kind of TRANSPORTS) {
  describe(`client.events() over ${kind}`, () => {
    const client = (baseUrl = s.url, key = aliceKey): AnyClient => makeClient(kind, { baseUrl, apiKey: key });

    test('sees uploads as they happen, in order, as its filter says; a break closes the connection', async () => {
      const px = await proxy(s.url);
      const stop = new AbortController();
      try {
        const st = follow(client(px.url).events({ user: 'alice', types: ['data.file.created'], path: 'data://.my/inbox/**', signal: stop.signal }));
        const probe = await settle(st.events);
        await alice.file(`data://.my/inbox/${kind}-a.txt`).put('a');
        await alice.file(`data://.my/other/${kind}-x.txt`).put('not this path');
        await alice.file(`data://.my/inbox/${kind}-a.txt`).put('an update: not this type');
        await alice.file(`data://.my/inbox/${kind}-b.txt`).put('bb');
        const after = () => st.events.slice(st.events.indexOf(probe) + 1).filter((e) => !e.subject.includes('/probe-'));
        await until(() => after().length >= 2, 'two uploads');
        await new Promise((r) => setTimeout(r, 300));
        assert.deepEqual(after().map((e) => [e.type, e.subject]), [
          ['data.file.created', `data://alice/inbox/${kind}-a.txt`],
          ['data.file.created', `data://alice/inbox/${kind}-b.txt`],
        ]);
        const b = after()[1]!;
        assert.equal(b.data.size, 2);
        assert.equal(b.data.by, 'alice');
        assert.equal(b.specversion, '1.0');
        assert.equal(Number(b.sequence) > Number(probe.sequence), true);
        assert.equal(st.state.error, undefined);
        assert.equal(px.state.streams, 1);

        // A break out of the loop closes the stream's connection.
        let first: CloudEvent | undefined;
        const broken = (async () => {
          for await (const e of client(px.url).events({ user: 'alice', types: 'data.file.*', signal: stop.signal })) {
            first = e;
            break;
          }
        })();
        await until(() => px.state.streams === 2, 'the second stream to connect');
        await nudge(() => first !== undefined, 'the second stream show it');
        await within(broken, 15_000, 'the loop to end at its break');
        await until(() => px.state.streams === 1, 'the broken-off stream to close its connection');
      } finally {
        stop.abort();
        await px.close();
      }
    });

    test('a dropped connection is reconnected with Last-Event-ID: what happened meanwhile comes next, nothing twice', async () => {
      const px = await proxy(s.url);
      const stop = new AbortController();
      const opened: { reconnected: boolean; lastEventId: string | undefined }[] = [];
      const retries: { attempt: number; delayMs: number; error: unknown }[] = [];
      try {
        const options: EventStreamOptions = {
          user: 'alice',
          types: 'data.file.*',
          path: 'data://.my/inbox/**',
          signal: stop.signal,
          retryMs: 50,
          maxRetryMs: 200,
          onOpen: (info) => opened.push(info),
          onRetry: (info) => retries.push(info),
        };
        const st = follow(client(px.url).events(options));
        const probe = await settle(st.events);
        const seenBefore = st.events.length;
        // The network goes: the stream is cut, and reconnections are refused for a while.
        px.state.down = true;
        px.cut();
        await until(() => retries.length >= 2, 'two refused reconnections');
        await alice.file(`data://.my/inbox/${kind}-while-1.txt`).put('1');
        await alice.file(`data://.my/inbox/${kind}-while-2.txt`).put('2');
        await alice.file(`data://.my/inbox/${kind}-while-1.txt`).delete();
        assert.equal(st.events.length, seenBefore, 'nothing can arrive while the network is down');
        px.state.down = false;
        await until(() => st.events.length >= seenBefore + 3, 'the events made while disconnected');
        await alice.file(`data://.my/inbox/${kind}-after.txt`).put('3');
        await until(() => st.events.length >= seenBefore + 4, 'an event after the reconnection');
        assert.deepEqual(st.events.slice(seenBefore).map((e) => [e.type, e.subject]), [
          ['data.file.created', `data://alice/inbox/${kind}-while-1.txt`],
          ['data.file.created', `data://alice/inbox/${kind}-while-2.txt`],
          ['data.file.deleted', `data://alice/inbox/${kind}-while-1.txt`],
          ['data.file.created', `data://alice/inbox/${kind}-after.txt`],
        ]);
        assert.equal(new Set(st.events.map((e) => e.id)).size, st.events.length, 'an event came twice');
        assert.ok(retries.every((r) => r.error instanceof NetworkError), String(retries.map((r) => r.error)));
        assert.ok(retries.every((r) => r.delayMs <= 200), 'the wait is bounded');
        const last = opened[opened.length - 1]!;
        assert.equal(last.reconnected, true);
        assert.equal(last.lastEventId, st.events[seenBefore - 1]!.id, 'it resumed after the last event it had');
        assert.ok(st.events.indexOf(probe) < seenBefore);
        assert.equal(st.state.error, undefined);
      } finally {
        stop.abort();
        await px.close();
      }
    });

    test('a connection that brings nothing for idleTimeoutMs (half-open) is given up and reconnected, nothing missed', async () => {
      const px = await proxy(s.url);
      const stop = new AbortController();
      const retries: unknown[] = [];
      try {
        const st = follow(client(px.url).events({ user: 'alice', types: 'data.file.created', path: 'data://.my/inbox/**', signal: stop.signal, idleTimeoutMs: 1_000, retryMs: 50, onRetry: (r) => retries.push(r.error) }));
        await settle(st.events);
        const before = st.events.length;
        px.stall();
        await alice.file(`data://.my/inbox/${kind}-stalled.txt`).put('s');
        await until(() => st.events.some((e) => e.subject.endsWith(`/${kind}-stalled.txt`)), 'the event sent into the stalled connection');
        assert.ok(retries.some((e) => e instanceof NetworkError && e.code === 'stream_idle'), String(retries));
        assert.equal(st.events.length, before + 1);
        assert.equal(st.state.error, undefined);
      } finally {
        stop.abort();
        await px.close();
      }
    });

    test('an abort of the signal ends the loop quietly and closes the connection, also during a reconnection wait', async () => {
      const px = await proxy(s.url);
      try {
        const stop = new AbortController();
        const st = follow(client(px.url).events({ user: 'alice', signal: stop.signal }));
        await until(() => px.state.streams === 1, 'the stream to connect');
        stop.abort();
        await until(() => st.state.ended, 'the loop to end');
        assert.equal(st.state.error, undefined);
        await until(() => px.state.streams === 0, 'the connection to close');

        // Aborted while it waits to reconnect (a long wait): it ends at once.
        const later = new AbortController();
        const retries: number[] = [];
        let open = false;
        const waiting = follow(client(px.url).events({ user: 'alice', signal: later.signal, retryMs: 600_000, onOpen: () => (open = true), onRetry: (r) => retries.push(r.delayMs) }));
        await until(() => open, 'the stream to connect');
        px.cut();
        await until(() => retries.length === 1, 'the wait to reconnect');
        later.abort();
        await until(() => waiting.state.ended, 'the loop to end');
        assert.equal(waiting.state.error, undefined);
        // An already aborted signal gives nothing.
        const none = follow(client(px.url).events({ user: 'alice', signal: AbortSignal.abort() }));
        await until(() => none.state.ended, 'the loop to end');
        assert.deepEqual([none.events.length, none.state.error], [0, undefined]);
      } finally {
        await px.close();
      }
    });

    test('refusals are ApiErrors: 410 event_expired for a resume point not kept, 403 for another user, 400 for a bad filter; a first connection that fails is thrown', async () => {
      const first = <T>(it: AsyncIterable<T>) => it[Symbol.asyncIterator]().next();
      const expired = await rejects(first(client().events({ lastEventId: `evt_${'0'.repeat(24)}` })), ApiError);
      assert.deepEqual([expired.status, expired.code], [410, 'event_expired']);
      const theirs = await rejects(first(client(s.url, bobKey).events({ user: 'alice' })), ApiError);
      assert.deepEqual([theirs.status, theirs.code], [403, 'forbidden']);
      const badType = await rejects(first(client().events({ types: ['no.such'] })), ApiError);
      assert.deepEqual([badType.status, badType.code], [400, 'invalid_query']);
      const foreign = await rejects(first(client().events({ path: 'data://bob/**' })), ApiError);
      assert.equal(foreign.status, 400);
      const px = await proxy(s.url);
      px.state.down = true;
      try {
        await rejects(first(client(px.url).events({ user: 'alice' })), NetworkError);
      } finally {
        await px.close();
      }
    });
  });
}

describe('subscriptions through the client', () => {
  test('create, list, get, update, deliveries, redeliver, delete; another user\'s are out of reach', async () => {
    const rx = await receiver();
    const subs = alice.subscriptions('alice');
    const made = await subs.create({ url: rx.url, types: ['data.directory.*'], path: 'data://.my/subs/**' });
    try {
      assert.match(made.id, /^sub_[0-9a-f]{24}$/);
      assert.match(made.secret, /^whsec_/);
      assert.ok((await subs.list()).some((x) => x.id === made.id));
      const one = await subs.get(made.id);
      assert.equal((one as { secret?: string }).secret, undefined);
      assert.deepEqual([one.url, one.types, one.enabled], [rx.url, ['data.directory.*'], true]);
      const changed = await subs.update(made.id, { types: ['data.directory.created'], path: null });
      assert.deepEqual([changed.types, changed.path], [['data.directory.created'], null]);
      await alice.dir('data://.my/subs').create();
      await until(() => rx.got.length >= 1, 'the delivery');
      let deliveries = await subs.deliveries(made.id, { limit: 10 });
      await until(() => deliveries[0]?.status === 'delivered', 'the delivery to be recorded', 5_000).catch(async () => {
        deliveries = await subs.deliveries(made.id, { limit: 10 });
        assert.equal(deliveries[0]?.status, 'delivered');
      });
      deliveries = await subs.deliveries(made.id, { limit: 10 });
      assert.equal(deliveries.length, 1);
      assert.equal(deliveries[0]!.id, rx.got[0]!.headers['webhook-id']);
      const again = await subs.redeliver(made.id, deliveries[0]!.id);
      assert.equal(again.id, deliveries[0]!.id);
      await until(() => rx.got.length >= 2, 'the redelivery');
      assert.equal(rx.got[1]!.headers['webhook-id'], rx.got[0]!.headers['webhook-id']);

      const bob = new AlgohostClient({ baseUrl: s.url, apiKey: bobKey, env: {} });
      const notHers = await rejects(bob.subscriptions('bob').get(made.id), ApiError);
      assert.deepEqual([notHers.status, notHers.code], [404, 'subscription_not_found']);
      const forbidden = await rejects(bob.subscriptions('alice').list(), ApiError);
      assert.equal(forbidden.status, 403);
      const invalid = await rejects(subs.create({ url: 'ftp://example.com/x' }), ApiError);
      assert.deepEqual([invalid.status, invalid.code], [400, 'invalid_subscription']);
    } finally {
      await subs.delete(made.id);
      await rx.close();
    }
    const gone = await rejects(subs.get(made.id), ApiError);
    assert.equal(gone.code, 'subscription_not_found');
  });
});

describe('triggers through the client', () => {
  test('create, list, get, update, runs, delete; bad fields and another user\'s triggers refused', async () => {
    const triggers = alice.triggers('alice');
    const made = await triggers.create({ types: ['data.file.created'], path: 'data://.my/inbox/**', algorithm: 'alice/NotRunHere/1.*', input: { file: '{{subject}}', size: '{{data.size}}' }, output: 'data://.my/out/{{name}}', timeout: 30 });
    try {
      assert.match(made.id, /^trg_[0-9a-f]{24}$/);
      assert.deepEqual([made.algorithm, made.input, made.timeout, made.enabled], ['alice/NotRunHere/1.*', { file: '{{subject}}', size: '{{data.size}}' }, 30, true]);
      const mine = (await alice.whoami()).key_id;
      assert.equal(made.key, mine, 'by default the runs have the permissions of the key that made it');
      assert.ok((await triggers.list()).some((t) => t.id === made.id));
      assert.equal((await triggers.get(made.id)).output, made.output);
      const paused = await triggers.update(made.id, { enabled: false, input: '{{name}}' });
      assert.deepEqual([paused.enabled, paused.input], [false, '{{name}}']);
      assert.deepEqual(await triggers.runs(made.id, { limit: 5 }), []);
      const invalid = await rejects(triggers.create({ algorithm: 'alice/X', input: '{{no_such_placeholder}}' }), ApiError);
      assert.deepEqual([invalid.status, invalid.code], [400, 'invalid_trigger']);
      const bob = new AlgohostClient({ baseUrl: s.url, apiKey: bobKey, env: {} });
      const notHers = await rejects(bob.triggers('bob').get(made.id), ApiError);
      assert.deepEqual([notHers.status, notHers.code], [404, 'trigger_not_found']);
    } finally {
      await triggers.delete(made.id);
    }
    const gone = await rejects(triggers.get(made.id), ApiError);
    assert.deepEqual([gone.status, gone.code], [404, 'trigger_not_found']);
  });
});
