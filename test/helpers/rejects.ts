import assert from 'node:assert/strict';

/** Awaits `promise`, which must reject with an instance of `type`; answers that error. */
export async function rejects<E extends Error>(promise: Promise<unknown>, type: new (...args: never[]) => E): Promise<E> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof type, `expected ${type.name}, got ${String(err)}`);
    return err;
  }
  assert.fail(`expected ${type.name}, but it resolved`);
}
