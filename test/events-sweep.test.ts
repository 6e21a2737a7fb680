/**
 * The outbox's retention sweep keeps what a dispatcher has still to read (docs/events.md,
 * "Under load"): an event past its time that the webhook or trigger dispatcher has not turned
 * into deliveries or runs yet, for a user with an enabled subscription or trigger, waits for it.
 * Services without a server (no dispatcher runs on its own here), on this configuration's store.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { tempHome } from './helpers/server.ts';
import { backendEnv } from './helpers/backends.ts';
import { loadConfig } from '../src/config.ts';
import { createServices, type Services } from '../src/services.ts';
import { appendEvents, type NewEvent } from '../src/events/outbox.ts';
import { sweepEvents } from '../src/events/feed.ts';

let services: Services;
let alice: { id: number; username: string };
let bob: { id: number; username: string };

before(async () => {
  const home = tempHome();
  services = await createServices(loadConfig({ home, port: '0', demo: false }, { ...(await backendEnv(home)), ALGOHOST_CONNECTOR_NETWORK: 'any' }));
  alice = (await services.users.create('alice')).user;
  bob = (await services.users.create('bob')).user;
});
after(async () => {
  await services.close();
});

const event = (user: { id: number; username: string }, name: string): NewEvent => ({ userId: user.id, type: 'data.file.created', subject: `data://${user.username}/inbox/${name}`, data: { size: 1 } });
/** A sweep as if every event so far were past its retention. */
const sweepAll = () => sweepEvents(services.store, Date.now() + 1000);
const subjects = async () => (await services.store.db.selectFrom('events').select('subject').orderBy('id').execute()).map((r) => r.subject);

test('events not yet fanned out to an enabled subscription outlive their retention; the rest go', async () => {
  const { subscription } = await services.webhooks.create(alice, { url: 'http://127.0.0.1:9/hook', types: ['data.file.*'] });
  // The dispatcher's first fan-out sets its cursor: from now on.
  await services.webhooks.fanOut();
  await services.store.write((trx) => appendEvents(trx, [event(alice, 'a.txt'), event(bob, 'b.txt')]));

  // Bob subscribes to nothing: his event goes; alice's waits for the fan-out.
  assert.equal(await sweepAll(), 1);
  assert.deepEqual(await subjects(), ['data://alice/inbox/a.txt']);

  // Once fanned out (a delivery made), it goes too.
  assert.equal(await services.webhooks.fanOut(), 1);
  assert.equal(await sweepAll(), 1);
  assert.deepEqual(await subjects(), []);

  // A subscription turned off holds nothing back.
  await services.webhooks.update(alice, subscription.id, { enabled: false });
  await services.store.write((trx) => appendEvents(trx, [event(alice, 'c.txt')]));
  assert.equal(await sweepAll(), 1);
  assert.deepEqual(await subjects(), []);
});
