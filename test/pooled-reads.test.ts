/**
 * The pooled transport for large S3 reads (src/data/connectors/pooledReads.ts): through the
 * real SDK against a real S3 protocol server (s3rver on loopback), and against local raw-socket
 * stand-ins for the answers a store can give that s3rver does not (chunked, close-delimited,
 * cut short, silent, not HTTP, over TLS). Chunks piped into an HTTP response are recycled; any
 * other reader keeps its chunks intact while other transfers reuse the pool.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { PassThrough, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { GetObjectCommand, PutObjectCommand, S3Client, type S3ClientConfig } from '@aws-sdk/client-s3';
import { PooledReadHandler, pooledBuffersFree, type SdkHttpRequest } from '../src/data/connectors/pooledReads.ts';
import { S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { tempHome } from './helpers/server.ts';
import { makeCa } from './helpers/tls.ts';

const MiB = 1024 * 1024;
const BUCKET = 'pooled';
let s3: S3Server;
let sdk: S3Client;
let pooled: S3Client;
const big = crypto.randomBytes(5 * MiB + 12345);
const sha = (b: Uint8Array) => crypto.createHash('sha256').update(b).digest('hex');
const servers: net.Server[] = [];
const work = tempHome('algohost-pooled-');

before(async () => {
  s3 = await startS3([BUCKET]);
  const config: S3ClientConfig = {
    endpoint: s3.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: S3RVER_KEY.access_key_id, secretAccessKey: S3RVER_KEY.secret_access_key },
    maxAttempts: 1,
  };
  sdk = new S3Client(config);
  pooled = new S3Client({ ...config, requestHandler: new PooledReadHandler() as S3ClientConfig['requestHandler'] });
  await sdk.send(new PutObjectCommand({ Bucket: BUCKET, Key: 'big', Body: big }));
  await sdk.send(new PutObjectCommand({ Bucket: BUCKET, Key: 'other', Body: Buffer.alloc(3 * MiB, 0x5a) }));
});

after(async () => {
  sdk?.destroy();
  pooled?.destroy();
  for (const s of servers) s.close();
  await s3?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

async function collect(body: Readable): Promise<Buffer[]> {
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c as Buffer);
  return chunks;
}

async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  return (server.address() as net.AddressInfo).port;
}

/** A store stand-in that answers every connection with `answer` (written in the given pieces). */
async function rawStore(answer: (socket: net.Socket) => void): Promise<number> {
  return listen(
    net.createServer((socket) => {
      socket.once('data', () => answer(socket));
      socket.on('error', () => undefined);
    }),
  );
}

function request(port: number, extra: Partial<SdkHttpRequest> = {}): SdkHttpRequest {
  return { method: 'GET', protocol: 'http:', hostname: '127.0.0.1', port, path: '/b/k', query: {}, headers: { host: `127.0.0.1:${port}` }, ...extra };
}

describe('through the SDK against s3rver', () => {
  test('a whole object and a range arrive byte for byte', async () => {
    const whole = await pooled.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'big' }));
    assert.equal(whole.ContentLength, big.length);
    assert.equal(sha(Buffer.concat(await collect(whole.Body as Readable))), sha(big));

    const part = await pooled.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'big', Range: `bytes=${MiB + 7}-${3 * MiB}` }));
    assert.match(part.ContentRange ?? '', new RegExp(`^bytes ${MiB + 7}-${3 * MiB}/${big.length}$`));
    assert.equal(sha(Buffer.concat(await collect(part.Body as Readable))), sha(big.subarray(MiB + 7, 3 * MiB + 1)));
  });

  test("the store's errors reach the SDK as they would through its own transport", async () => {
    await assert.rejects(pooled.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'nothing-here' })), (err: Error) => {
      assert.equal(err.name, 'NoSuchKey');
      return true;
    });
    const stranger = new S3Client({
      endpoint: s3.endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: 'NOSUCHKEY', secretAccessKey: 'x' },
      maxAttempts: 1,
      requestHandler: new PooledReadHandler() as S3ClientConfig['requestHandler'],
    });
    try {
      await assert.rejects(stranger.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'big' })), (err: Error & { $metadata?: { httpStatusCode?: number } }) => {
        assert.equal(err.$metadata?.httpStatusCode, 403);
        return true;
      });
    } finally {
      stranger.destroy();
    }
  });

  test('piped into HTTP responses, chunks go back to the pool; a reader that keeps its chunks keeps them intact', async () => {
    // An HTTP server relays the object as our data route does (body.pipe(res)).
    const port = await listen(
      http.createServer(async (_req, res) => {
        const out = await pooled.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'big' }));
        res.writeHead(200, { 'content-length': String(out.ContentLength) });
        (out.Body as Readable).pipe(res);
      }),
    );
    // A reader that keeps every chunk it gets, reading slowly, while three relays reuse buffers.
    const kept = await pooled.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'other' }));
    const keptChunks: Buffer[] = [];
    const slow = (async () => {
      for await (const c of kept.Body as Readable) {
        keptChunks.push(c as Buffer);
        await new Promise((r) => setImmediate(r));
      }
    })();
    const relayed = await Promise.all(
      [0, 1, 2].map(
        () =>
          new Promise<Buffer>((resolve, reject) => {
            http
              .get({ host: '127.0.0.1', port, path: '/' }, (res) => {
                const parts: Buffer[] = [];
                res.on('data', (c: Buffer) => parts.push(c));
                res.on('end', () => resolve(Buffer.concat(parts)));
                res.on('error', reject);
              })
              .on('error', reject);
          }),
      ),
    );
    await slow;
    for (const r of relayed) assert.equal(sha(r), sha(big));
    assert.ok(pooledBuffersFree() > 0, 'chunks written to a response came back to the pool');
    // Every kept chunk still holds what arrived: nothing was recycled under the reader.
    assert.equal(Buffer.concat(keptChunks).length, 3 * MiB);
    assert.ok(keptChunks.every((c) => c.every((b) => b === 0x5a)), 'a kept chunk was overwritten');
  });

  test('through a PassThrough (pipeline) nothing is recycled and the bytes are whole', async () => {
    const out = await pooled.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'big' }));
    const through = new PassThrough();
    const chunks: Buffer[] = [];
    through.on('data', (c: Buffer) => chunks.push(c));
    // Another transfer reuses the pool meanwhile.
    const other = pooled.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'other' })).then(async (o) => collect(o.Body as Readable));
    await pipeline(out.Body as Readable, through);
    await other;
    assert.equal(sha(Buffer.concat(chunks)), sha(big));
  });
});

describe('answers s3rver does not give (local stand-ins)', () => {
  const handler = new PooledReadHandler({ connectionTimeoutMs: 2000, socketTimeoutMs: 500 });

  test('a chunked answer split at awkward places is decoded', async () => {
    const payload = crypto.randomBytes(200_000);
    const port = await rawStore((socket) => {
      const a = payload.subarray(0, 70_000);
      const b = payload.subarray(70_000);
      const wire = Buffer.concat([
        Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'),
        Buffer.from(`${a.length.toString(16)};ext=1\r\n`),
        a,
        Buffer.from(`\r\n${b.length.toString(16)}\r\n`),
        b,
        Buffer.from('\r\n0\r\nx-trailer: y\r\n\r\n'),
      ]);
      // Written in pieces of 7 bytes around the first boundary, then the rest.
      let at = 0;
      const next = () => {
        if (at >= wire.length) return socket.end();
        const size = at < 80 ? 7 : 65_536;
        socket.write(wire.subarray(at, at + size), () => setImmediate(next));
        at += size;
      };
      next();
    });
    const { response } = await handler.handle(request(port));
    assert.equal(response.statusCode, 200);
    assert.equal(sha(Buffer.concat(await collect(response.body))), sha(payload));
  });

  test('an answer without length ends with the connection', async () => {
    const payload = crypto.randomBytes(150_000);
    const port = await rawStore((socket) => socket.end(Buffer.concat([Buffer.from('HTTP/1.1 200 OK\r\nx-a: 1\r\nx-a: 2\r\n\r\n'), payload])));
    const { response } = await handler.handle(request(port));
    assert.equal(response.headers['x-a'], '1, 2');
    assert.equal(sha(Buffer.concat(await collect(response.body))), sha(payload));
  });

  test('an answer cut short fails its body, never ends it as if whole', async () => {
    const port = await rawStore((socket) => socket.end(Buffer.concat([Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n'), Buffer.alloc(40_000)])));
    const { response } = await handler.handle(request(port));
    await assert.rejects(collect(response.body), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'ECONNRESET');
      assert.match(err.message, /60000 bytes short/);
      return true;
    });
  });

  test('a store that sends more than it announced is refused', async () => {
    const port = await rawStore((socket) => socket.end(Buffer.concat([Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n'), Buffer.alloc(30)])));
    const { response } = await handler.handle(request(port));
    await assert.rejects(collect(response.body), /more than the 10 bytes/);
  });

  test('silence, refusal, a closed connection and a non-HTTP answer are errors with codes the S3 client maps', async () => {
    const silent = await rawStore(() => undefined);
    await assert.rejects(handler.handle(request(silent)), (err: Error & { code?: string }) => err.code === 'ETIMEDOUT');

    const closed = await listen(net.createServer((socket) => socket.end()));
    await assert.rejects(handler.handle(request(closed)), (err: Error & { code?: string }) => err.code === 'ECONNRESET' || err.code === 'EPIPE');

    const free = await listen(net.createServer());
    await new Promise<void>((resolve) => servers.pop()!.close(() => resolve()));
    await assert.rejects(handler.handle(request(free)), (err: Error & { code?: string }) => err.code === 'ECONNREFUSED');

    const ssh = await rawStore((socket) => socket.end('SSH-2.0-OpenSSH_9.2\r\n\r\n'));
    await assert.rejects(handler.handle(request(ssh)), /did not answer in HTTP\/1\.1/);

    const huge = await rawStore((socket) => socket.end(`HTTP/1.1 200 OK\r\n${'x-pad: y\r\n'.repeat(10_000)}`));
    await assert.rejects(handler.handle(request(huge)), /head is larger/);
  });

  test('an abort stops the request at once', async () => {
    const silent = await rawStore(() => undefined);
    const ac = new AbortController();
    const pending = handler.handle(request(silent), { abortSignal: ac.signal });
    setTimeout(() => ac.abort(), 50);
    await assert.rejects(pending, (err: Error) => err.name === 'AbortError');
  });

  test('only GET without a body is carried', async () => {
    await assert.rejects(handler.handle(request(1, { method: 'PUT' })), /GET requests without a body/);
    await assert.rejects(handler.handle(request(1, { headers: { 'x-evil': 'a\r\nb' } })), /line break/);
  });

  test('https endpoints: the answer comes over TLS, checked against the given CA', async () => {
    const { ca, key, cert } = makeCa(work, 'pooled');
    const payload = crypto.randomBytes(300_000);
    const seen: string[] = [];
    const server = https.createServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) }, (req, res) => {
      seen.push(`${req.method} ${req.url} ${req.headers.host}`);
      res.writeHead(200, { 'content-length': String(payload.length) });
      res.end(payload);
    });
    const port = await listen(server);
    const trusting = new PooledReadHandler({ tls: { ca: fs.readFileSync(ca) } });
    const { response } = await trusting.handle(request(port, { protocol: 'https:', hostname: 'localhost', headers: { host: `localhost:${port}` }, query: { 'x-id': 'GetObject', list: null } }));
    assert.equal(sha(Buffer.concat(await collect(response.body))), sha(payload));
    assert.deepEqual(seen, [`GET /b/k?x-id=GetObject&list localhost:${port}`]);
    // Without the CA, the certificate is refused.
    await assert.rejects(new PooledReadHandler().handle(request(port, { protocol: 'https:', hostname: 'localhost' })), /self-signed|unable to verify|certificate/i);
  });
});
