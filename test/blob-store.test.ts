/**
 * The BlobStore contract, held to both adapters: the home's disk and an S3 protocol server
 * (s3rver on loopback), each opened the way the server opens it (openBlobStore from a Config).
 * Whole and ranged reads, a missing blob, idempotent delete, list, the size limit and a failing
 * body (nothing visible after either), and concurrent work without listener warnings.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { Readable } from 'node:stream';
import { loadConfig } from '../src/config.ts';
import { openBlobStore } from '../src/data/blobBackends.ts';
import { BlobMissingError, type BlobStore } from '../src/data/blobStore.ts';
import { AppError } from '../src/errors.ts';
import { S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { tempHome } from './helpers/server.ts';

const MiB = 1024 * 1024;
let s3: S3Server;
const homes: string[] = [];
const stores: BlobStore[] = [];

before(async () => {
  s3 = await startS3(['contract']);
});

after(async () => {
  for (const b of stores) b.close();
  await s3?.stop();
  for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
});

const drivers: Record<string, () => BlobStore> = {
  local: () => {
    const home = tempHome('algohost-blobs-');
    homes.push(home);
    return openBlobStore(loadConfig({ home }, {}));
  },
  s3: () => {
    const home = tempHome('algohost-blobs-');
    homes.push(home);
    const prefix = crypto.randomBytes(6).toString('hex');
    return openBlobStore(
      loadConfig(
        { home },
        {
          ALGOHOST_BLOBS: `s3://contract/${prefix}?endpoint=${encodeURIComponent(s3.endpoint)}&force_path_style=true`,
          AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id,
          AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key,
        },
      ),
    );
  },
};

async function bytesOf(body: Readable | Buffer): Promise<Buffer> {
  if (Buffer.isBuffer(body)) return body;
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

async function ids(store: BlobStore): Promise<string[]> {
  const out: string[] = [];
  for await (const id of store.list()) out.push(id);
  return out.sort();
}

for (const [name, open] of Object.entries(drivers)) {
  describe(`BlobStore on ${name}`, () => {
    let store: BlobStore;
    before(async () => {
      store = open();
      stores.push(store);
      await store.check();
      await store.recover();
    });

    test('put, then open whole and by range; a large blob streams, a small one may be a Buffer', async () => {
      const small = crypto.randomBytes(100);
      const large = crypto.randomBytes(9 * MiB + 7); // more than one S3 part
      const a = store.newId();
      const b = store.newId();
      assert.notEqual(a, b);
      assert.equal((await store.put(a, Readable.from([small]), { maxBytes: small.length })).size, small.length);
      assert.equal((await store.put(b, Readable.from([large.subarray(0, 4 * MiB), large.subarray(4 * MiB)]), { maxBytes: large.length })).size, large.length);
      assert.deepEqual(await bytesOf(await store.open(a, undefined, small.length)), small);
      const whole = await store.open(b, undefined, large.length);
      assert.ok(!Buffer.isBuffer(whole), 'a large blob is streamed');
      assert.equal(crypto.createHash('sha256').update(await bytesOf(whole)).digest('hex'), crypto.createHash('sha256').update(large).digest('hex'));
      const part = await bytesOf(await store.open(b, { start: 5 * MiB, end: 5 * MiB + 99 }, 100));
      assert.deepEqual(part, large.subarray(5 * MiB, 5 * MiB + 100));
      assert.deepEqual(await ids(store), [a, b].sort());
    });

    test('a missing blob is BlobMissingError; delete is idempotent', async () => {
      const id = store.newId();
      await assert.rejects(store.open(id, undefined, 10), BlobMissingError);
      await store.put(id, Readable.from([Buffer.from('x')]), { maxBytes: 1 });
      await store.delete(id);
      await store.delete(id);
      await assert.rejects(store.open(id, undefined, 1), BlobMissingError);
      assert.ok(!(await ids(store)).includes(id));
    });

    test('over the size limit: payload_too_large and nothing stored', async () => {
      const id = store.newId();
      const body = crypto.randomBytes(6 * MiB);
      await assert.rejects(store.put(id, Readable.from([body.subarray(0, 3 * MiB), body.subarray(3 * MiB)]), { maxBytes: 5 * MiB }), (err: unknown) => err instanceof AppError && err.code === 'payload_too_large');
      await assert.rejects(store.open(id, undefined, 1), BlobMissingError);
      assert.ok(!(await ids(store)).includes(id));
    });

    test('a body that fails half-way fails the put with its own error, and nothing is stored', async () => {
      const id = store.newId();
      const failing = new Readable({
        read() {
          this.push(crypto.randomBytes(MiB));
          if (++sent === 3) this.destroy(new Error('the client went away'));
        },
      });
      let sent = 0;
      await assert.rejects(store.put(id, failing, { maxBytes: 100 * MiB }), /the client went away/);
      await assert.rejects(store.open(id, undefined, 1), BlobMissingError);
      assert.ok(!(await ids(store)).includes(id));
    });

    test('many operations at once: all whole, and no listener-leak warning', async () => {
      const warnings: string[] = [];
      const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
      process.on('warning', onWarning);
      try {
        const bodies = Array.from({ length: 24 }, () => crypto.randomBytes(64 * 1024));
        const made = bodies.map(() => store.newId());
        await Promise.all(made.map((id, i) => store.put(id, Readable.from([bodies[i]!]), { maxBytes: bodies[i]!.length })));
        const back = await Promise.all(made.map(async (id, i) => bytesOf(await store.open(id, undefined, bodies[i]!.length))));
        back.forEach((b, i) => assert.deepEqual(b, bodies[i]));
        await Promise.all(made.map((id) => store.delete(id)));
        await new Promise((r) => setImmediate(r));
      } finally {
        process.off('warning', onWarning);
      }
      assert.deepEqual(warnings, []);
    });
  });
}
