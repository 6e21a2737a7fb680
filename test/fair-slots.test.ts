/** Build slots shared fairly among owners (src/concurrency.ts FairSlots, used by the Builder). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FairSlots } from '../src/concurrency.ts';
import { Builder, MAX_BUILDS_PER_OWNER, MAX_CONCURRENT_BUILDS } from '../src/algorithms/builder.ts';

/** Requests of `owners` in this order; each records when it started and holds its slot until told to go. */
function harness(slots: FairSlots) {
  const started: string[] = [];
  const releases = new Map<string, () => void>();
  const ask = (owner: string, id: string) =>
    void slots.acquire(owner).then((release) => {
      started.push(id);
      releases.set(id, release);
    });
  const finish = async (id: string) => {
    releases.get(id)!();
    await new Promise((r) => setImmediate(r));
  };
  return { started, ask, finish, settle: () => new Promise((r) => setImmediate(r)) };
}

test("one owner's flood waits behind itself: another owner's build starts in the next free slot, and in the slot left free", async () => {
  const h = harness(new FairSlots(2, 1));
  for (let i = 0; i < 5; i++) h.ask('mallory', `m${i}`);
  h.ask('alice', 'a0');
  h.ask('bob', 'b0');
  await h.settle();
  // mallory holds one slot, not both: alice came after five of mallory's and starts at once.
  assert.deepEqual(h.started, ['m0', 'a0']);
  await h.finish('m0');
  // The freed slot goes to bob (waiting, nothing running), not to mallory's next.
  assert.deepEqual(h.started, ['m0', 'a0', 'b0']);
  await h.finish('a0');
  assert.deepEqual(h.started, ['m0', 'a0', 'b0', 'm1']);
  await h.finish('b0');
  await h.finish('m1');
  assert.deepEqual(h.started, ['m0', 'a0', 'b0', 'm1', 'm2']);
});

test('slots are never over-given, and a release given twice frees one slot', async () => {
  const slots = new FairSlots(2, 2);
  const h = harness(slots);
  for (let i = 0; i < 4; i++) h.ask('x', `x${i}`);
  await h.settle();
  assert.deepEqual(slots.stats(), { running: 2, waiting: 2 });
  await h.finish('x0');
  await h.finish('x0');
  assert.deepEqual(slots.stats(), { running: 2, waiting: 1 });
});

test('the builder shares its slots this way', () => {
  const b = new Builder({ unsandboxed: true, installTimeoutMs: 1000 });
  assert.equal(b.slots.total, MAX_CONCURRENT_BUILDS);
  assert.equal(b.slots.perOwner, MAX_BUILDS_PER_OWNER);
  assert.ok(MAX_BUILDS_PER_OWNER < MAX_CONCURRENT_BUILDS, 'one owner could hold every slot');
});

test('an owner who asks again as soon as a build ends takes its turn: it is not a newcomer who goes first', async () => {
  const h = harness(new FairSlots(2, 1));
  h.ask('dave', 'd0');
  h.ask('bob', 'b0');
  h.ask('dave', 'd1');
  h.ask('bob', 'b1');
  h.ask('alice', 'a0');
  await h.settle();
  assert.deepEqual(h.started, ['d0', 'b0']);
  await h.finish('d0');
  // alice, never served, goes first; then dave's turn.
  assert.deepEqual(h.started, ['d0', 'b0', 'a0']);
  await h.finish('a0');
  assert.deepEqual(h.started, ['d0', 'b0', 'a0', 'd1']);
  // alice asks again at once: bob, served before her and waiting since, goes first.
  h.ask('alice', 'a1');
  await h.settle();
  await h.finish('b0');
  assert.deepEqual(h.started, ['d0', 'b0', 'a0', 'd1', 'b1'], 'alice went before bob, whose turn it was');
  await h.finish('d1');
  assert.deepEqual(h.started, ['d0', 'b0', 'a0', 'd1', 'b1', 'a1']);
});

test('the turns of owners gone idle are forgotten once more than MAX_REMEMBERED are kept', async () => {
  const slots = new FairSlots(2, 1);
  for (let i = 0; i <= FairSlots.MAX_REMEMBERED; i++) (await slots.acquire(`owner${i}`))();
  const served = (slots as unknown as { served: Map<string, number> }).served;
  assert.ok(served.size <= FairSlots.MAX_REMEMBERED / 2 + 1, `${served.size} turns kept`);
  // The most recent are the ones kept.
  assert.ok(served.has(`owner${FairSlots.MAX_REMEMBERED}`));
});
