/**
 * A path with a "." or ".." segment cannot be sent: URL parsing resolves it whatever its
 * encoding (`a/..` would become `a`'s parent), so a delete of a folder listed as `..` in
 * connected storage would hit the folder above. The client refuses before any request.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AlgohostClient } from '../client/src/index.ts';

test('"." and ".." segments are refused before anything is sent', async () => {
  // Port 1: were a request made, it would fail with ECONNREFUSED, not invalid_path.
  const client = new AlgohostClient({ baseUrl: 'http://127.0.0.1:1', apiKey: 'simAAAAAAAAAAAAAAAAAAAAAAAAA', env: {} });
  for (const uri of ['objstore+l://bucket/a/..', 'objstore+l://bucket/a/./b', 'data://.my/c/..']) {
    await assert.rejects(client.dir(uri).delete({ force: true }), (e: { code?: string }) => e.code === 'invalid_path', uri);
    await assert.rejects(client.file(uri).delete(), (e: { code?: string }) => e.code === 'invalid_path', uri);
  }
  // A name that only starts with dots is a name.
  await assert.rejects(client.file('data://.my/c/..x').delete(), (e: { code?: string }) => e.code === 'ECONNREFUSED');
});
