/**
 * The `algo` data commands on a connected account (objstore+label://, and the original s3+label://
 * spelling) backed by a real S3 protocol server (s3rver): a tree up to it, across from it into
 * hosted data, ls, cat and rm there.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { AlgohostClient } from '../client/src/index.ts';
import { startServer, tempHome, type TestServer } from './helpers/server.ts';
import { connectAccount } from './helpers/connectors.ts';
import { S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { childEnv, NODE, within } from './helpers/process.ts';

const ALGO = path.resolve(import.meta.dirname, '..', 'bin', 'algo.mjs');

let s3: S3Server;
let server: TestServer;
let key: string;
let client: AlgohostClient;
let work: string;

before(async () => {
  s3 = await startS3(['bkt']);
  server = await startServer({ env: { ALGOHOST_CONNECTOR_NETWORK: 'any' } });
  key = await server.user('alice');
  await connectAccount(server, 'alice', key, {
    label: 'store', protocol: 'objstore', writeable: true, cred_data: { endpoint: s3.endpoint, ...S3RVER_KEY, force_path_style: true },
  });
  client = new AlgohostClient({ apiKey: key, baseUrl: server.url, env: {} });
  work = tempHome('algo-cli-connected-');
});

after(async () => {
  await server?.close();
  await s3?.stop();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

async function algo(args: string[]): Promise<{ code: number | null; stdout: Buffer; err: string }> {
  const child = spawn(NODE, [ALGO, ...args], {
    cwd: work,
    env: childEnv({ HOME: work, ALGOHOST_API: server.url, ALGOHOST_API_KEY: key, TZ: 'UTC' }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out: Buffer[] = [];
  let err = '';
  child.stdout.on('data', (b: Buffer) => out.push(b));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const code = await within(new Promise<number | null>((resolve) => child.on('close', resolve)), 60_000, `algo ${args.join(' ')}`)
    .finally(() => child.kill('SIGKILL'));
  return { code, stdout: Buffer.concat(out), err };
}

const sha = (b: Uint8Array) => crypto.createHash('sha256').update(b).digest('hex');

test('a tree up to an object store, across from it into hosted data, and ls, cat, rm there', async () => {
  const files: Record<string, Buffer> = {
    'one.txt': Buffer.from('one'),
    'a/two.bin': crypto.randomBytes(200_000),
    'a/b/three.bin': crypto.randomBytes(3 * 1024 * 1024 + 17),
  };
  for (const [rel, data] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(work, 'tree', rel)), { recursive: true });
    fs.writeFileSync(path.join(work, 'tree', rel), data);
  }

  const up = await algo(['cp', '-r', 'tree', 'objstore+store://bkt']);
  assert.equal(up.code, 0, up.err);
  for (const [rel, data] of Object.entries(files)) {
    assert.equal(sha(await client.file(`objstore+store://bkt/tree/${rel}`).buffer()), sha(data), rel);
  }

  const ls = await algo(['ls', 'objstore+store://bkt/tree']);
  assert.equal(ls.code, 0, ls.err);
  assert.equal(ls.stdout.toString(), 'one.txt\na/\n'); // files first, then folders (docs/data.md)

  // Across sources, streamed: the object store into hosted data (the original spelling s3+label://).
  await client.dir('data://.my/fromstore').create();
  const across = await algo(['cp', '-r', 's3+store://bkt/tree', 'data://.my/fromstore']);
  assert.equal(across.code, 0, across.err);
  for (const [rel, data] of Object.entries(files)) {
    assert.equal(sha(await client.file(`data://.my/fromstore/tree/${rel}`).buffer()), sha(data), rel);
  }

  const cat = await algo(['cat', 'objstore+store://bkt/tree/a/b/three.bin']);
  assert.equal(cat.code, 0, cat.err);
  assert.equal(sha(cat.stdout), sha(files['a/b/three.bin']!));

  const rm = await algo(['rm', 'objstore+store://bkt/tree/one.txt']);
  assert.equal(rm.code, 0, rm.err);
  assert.equal(await client.file('objstore+store://bkt/tree/one.txt').exists(), false);
  const missing = await algo(['cat', 'objstore+store://bkt/tree/one.txt']);
  assert.equal(missing.code, 1);
  assert.equal(missing.err, 'algo cat: no such file objstore+store://bkt/tree/one.txt\n');
});

test('rmdir without -f refuses a non-empty object-store directory made by mkdir', async () => {
  assert.equal((await algo(['mkdir', 'objstore+store://bkt/kept'])).code, 0);
  await client.file('objstore+store://bkt/kept/f.txt').put('keep me');
  const r = await algo(['rmdir', 'objstore+store://bkt/kept']);
  assert.equal(r.code, 1, r.err);
  assert.equal(await client.file('objstore+store://bkt/kept/f.txt').exists(), true);
});
