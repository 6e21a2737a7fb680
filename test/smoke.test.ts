import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer } from './helpers/server.ts';

test('health answers ok once the server listens', async () => {
  const s = await startServer();
  try {
    const res = await fetch(`${s.url}/health`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    const health = await json(res);
    assert.equal(health.status, 'ok');
    assert.deepEqual(health.sandbox, s.services.sandbox.available ? { enabled: true, kind: 'bubblewrap' } : { enabled: false, warning: `algorithms are NOT sandboxed: ${s.services.sandbox.reason}` });
    const key = await s.user('alice');
    const call = api(s.url, key);
    assert.equal((await call('/v1/data/.my', { method: 'POST', body: JSON.stringify({ name: 'c' }), headers: { 'content-type': 'application/json' } })).status, 200);
  } finally {
    await s.close();
  }
});
