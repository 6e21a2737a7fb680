/**
 * Call limits shared by the nodes of a deployment on PostgreSQL (src/limits/shared.ts; issue 24
 * "Cluster-wide"): two stores on one database stand for two API nodes, each with its own pool
 * of connections and its own instance, racing for one scope's tokens and slots.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { openPostgresStore } from '../src/store/postgresStore.ts';
import type { MetadataStore } from '../src/store/db.ts';
import { SharedLimitStore } from '../src/limits/shared.ts';
import { createDatabase, postgresAvailable, startPostgres, type PostgresCluster } from './helpers/postgres.ts';

let cluster: PostgresCluster | undefined;
let adminUrl = process.env.ALGOHOST_TEST_PG_URL;
const pgMissing = adminUrl ? undefined : postgresAvailable();

before(async () => {
  if (!adminUrl && !pgMissing) {
    cluster = await startPostgres();
    adminUrl = cluster.adminUrl;
  }
});
after(() => cluster?.stop());

describe('limits shared by two nodes on one PostgreSQL', { skip: pgMissing }, () => {
  let url: string;
  let a: MetadataStore;
  let b: MetadataStore;
  before(async () => {
    url = await createDatabase(adminUrl!, 'limits');
    a = await openPostgresStore({ url });
    b = await openPostgresStore({ url });
  });
  after(async () => {
    await a?.close();
    await b?.close();
  });

  test('tokens taken by both nodes at once never exceed what the bucket gives (burst + rate × time), and the rate is given', async () => {
    const limits = { callsPerMin: 1200, burst: 10, concurrency: 0 };
    const nodes = [new SharedLimitStore(a), new SharedLimitStore(b)];
    let granted = 0;
    let asks = 0;
    const t0 = performance.now();
    const windowMs = 3000;
    // Eight takers a node, each asking for up to 3 tokens as fast as the database answers.
    await Promise.all(
      nodes.flatMap((n) =>
        Array.from({ length: 8 }, async () => {
          while (performance.now() - t0 < windowMs) {
            const r = await n.take('u1', 3, limits);
            assert.ok(r.granted >= 0 && r.granted <= 3, `granted ${JSON.stringify(r)}`);
            assert.ok(r.tokens >= 0 && r.tokens <= limits.burst, `tokens within the bucket: ${r.tokens}`);
            granted += r.granted;
            asks++;
          }
        }),
      ),
    );
    const elapsed = performance.now() - t0;
    // The bucket's clock is the database's: it ran at most as long as the window took here.
    const most = limits.burst + (elapsed / 60_000) * limits.callsPerMin;
    assert.ok(granted <= most + 1e-6, `granted ${granted} of at most ${most.toFixed(1)} (in ${asks} asks)`);
    assert.ok(granted >= 0.8 * ((windowMs / 60_000) * limits.callsPerMin), `the rate is given: ${granted} in ${elapsed.toFixed(0)} ms`);
  });

  test('a changed limit holds from the next take: a lower burst caps what is left', async () => {
    const s = new SharedLimitStore(a);
    assert.equal((await s.take('u2', 5, { callsPerMin: 60, burst: 20, concurrency: 0 })).granted, 5);
    const lower = await s.take('u2', 10, { callsPerMin: 60, burst: 3, concurrency: 0 });
    assert.equal(lower.granted, 3, 'no more than the new burst');
    assert.ok(lower.tokens < 1);
    assert.equal((await s.take('u2', 1, { callsPerMin: 60, burst: 3, concurrency: 0 })).granted, 0, 'none left');
  });

  test('calls at once across both nodes: exactly the limit is held, a release lets one more in', async () => {
    const na = new SharedLimitStore(a);
    const nb = new SharedLimitStore(b);
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? na.hold('u3', 3, a.instance) : nb.hold('u3', 3, b.instance))));
    assert.equal(results.filter(Boolean).length, 3);
    assert.equal(await na.inFlight('u3'), 3);
    assert.equal(await nb.hold('u3', 3, b.instance), false);
    const holder = results.findIndex(Boolean) % 2 ? { s: na, i: a.instance } : { s: nb, i: b.instance };
    await holder.s.release('u3', holder.i);
    assert.equal(await na.inFlight('u3'), 2);
    assert.equal(await na.hold('u3', 3, a.instance), true);
    // A release by a node that holds none of the scope's calls changes nothing.
    await na.release('u3', 'nobody');
    assert.equal(await na.inFlight('u3'), 3);
  });

  test("a node that dies: its calls under way are given back by the next sweep, another node's are kept", async () => {
    const c = await openPostgresStore({ url });
    const nc = new SharedLimitStore(c);
    const na = new SharedLimitStore(a);
    assert.equal(await nc.hold('u4', 5, c.instance), true);
    assert.equal(await nc.hold('u4', 5, c.instance), true);
    assert.equal(await na.hold('u4', 5, a.instance), true);
    assert.equal(await na.forgetDead(), 0, 'every holder is alive');
    assert.equal(await na.inFlight('u4'), 3);
    await c.close();
    assert.equal(await na.forgetDead(), 2);
    assert.equal(await na.inFlight('u4'), 1);
    assert.equal(await na.forgetDead(), 0, 'once');
  });
});
