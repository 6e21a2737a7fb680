/**
 * Deliveries yield to requests (docs/events.md, "Under load"): while requests saturate the
 * process, the webhook dispatcher runs one round per PACE_MS and sends at most PACED_SENDS in
 * it; what waits is sent once the requests ease, none lost. The server's load meter here reads
 * any request begun in its 100 ms window as saturation (a real Pressure with threshold 0), so a steady stream of uploads
 * holds it paced however fast or slow this machine is.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { PACED_FAN_OUT_EVENTS, PACED_SENDS } from '../src/events/webhooks.ts';
import { PACE_MS, Pressure } from '../src/concurrency.ts';

const CLUSTER = process.env.ALGOHOST_TEST_BACKENDS === 'cluster';
const SUBSCRIPTIONS = 5;
const LOAD_MS = 2_000;

let s: TestServer;
let alice: ReturnType<typeof api>;
const arrivals: number[] = [];
const servers: http.Server[] = [];

before(async () => {
  s = await startServer({ env: { ALGOHOST_CONNECTOR_NETWORK: 'any' }, pressure: new Pressure(0, 100) });
  alice = api(s.url, await s.user('alice'));
  await alice('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'load' }) });
  for (let i = 0; i < SUBSCRIPTIONS; i++) {
    const server = http.createServer((req, res) => {
      req.resume().on('end', () => {
        arrivals.push(performance.now());
        res.end('ok');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    servers.push(server);
    const r = await alice('/v1/users/alice/subscriptions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, types: ['data.file.created'], path: 'data://.my/load/**' }),
    });
    assert.equal(r.status, 201, JSON.stringify(await json(r)));
  }
});
after(async () => {
  await s.close();
  for (const server of servers) server.close();
});

test('while uploads saturate the server, deliveries go PACED_SENDS a round; after, every one arrives', { timeout: 120_000, skip: CLUSTER && 'the second API node has a load meter of its own, which this test does not set' }, async () => {
  let uploads = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: 8 }, async (_, w) => {
      for (let i = 0; performance.now() - t0 < LOAD_MS; i++) {
        const r = await alice(`/v1/data/.my/load/${w}-${i}.txt`, { method: 'PUT', body: 'x' });
        assert.equal(r.status, 200);
        uploads++;
      }
    }),
  );
  const loadEnd = performance.now();
  const during = arrivals.filter((t) => t <= loadEnd).length;
  // The fan-out kept pace with the sends: the deliveries not yet sent are about one slice of
  // events' worth, the rest still events in the outbox (unpaced, every upload's 5 rows are made
  // at once: thousands here).
  const pending = Number((await s.services.store.db.selectFrom('deliveries').select((eb) => eb.fn.countAll().as('n')).where('status', '=', 'pending').executeTakeFirstOrThrow()).n);
  assert.ok(pending <= 2 * PACED_FAN_OUT_EVENTS * SUBSCRIPTIONS, `${pending} deliveries waiting at the end of ${uploads} uploads (${uploads * SUBSCRIPTIONS} due, ${during} sent): the fan-out did not wait for the sends`);
  // Rounds at least PACE_MS apart: at most this many in the window, and room for a few more (one
  // begun before it, a window the meter read as quiet while this machine stalled); unpaced, the
  // same load sent 590 in 2 s here, against this bound's 384.
  const bound = (Math.floor((loadEnd - t0) / PACE_MS) + 4) * PACED_SENDS;
  assert.ok(during <= bound, `${during} deliveries arrived during ${Math.round(loadEnd - t0)} ms of uploads (${uploads} uploads, ${uploads * SUBSCRIPTIONS} deliveries due): more than ${bound}, so they were not paced`);
  // Paced, not stopped: some went out while the uploads went on.
  assert.ok(during > 0, 'no delivery went out while the uploads went on');
  const want = uploads * SUBSCRIPTIONS;
  const end = Date.now() + 60_000;
  while (arrivals.length < want && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  assert.equal(arrivals.length, want, 'every delivery arrives once the uploads end');
});
