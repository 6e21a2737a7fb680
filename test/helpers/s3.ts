import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { spawnUntilFirstLine } from './process.ts';

/** s3rver's fixed credentials: it checks signatures made with them. */
export const S3RVER_KEY = { access_key_id: 'S3RVER', secret_access_key: 'S3RVER' };

export interface S3Server {
  /** http://127.0.0.1:PORT */
  endpoint: string;
  pid: number;
  stop(): Promise<void>;
  /** Kills the server, keeping its files (a store that went away)... */
  halt(): Promise<void>;
  /** ...and starts it again on the same port and files. */
  resume(): Promise<void>;
}

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/**
 * A real S3 protocol server on loopback: s3rver (npm), in a process of its own so that the
 * server under test talks to it over the network as it would to MinIO or AWS, and so that
 * memory measured in the server's process is the server's own.
 */
export async function startS3(buckets: string[]): Promise<S3Server> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-s3-'));
  const script = `
    const S3rver = require('s3rver');
    const server = new S3rver({ port: Number(process.argv[3]), address: '127.0.0.1', silent: true, directory: process.argv[1],
      configureBuckets: JSON.parse(process.argv[2]).map((name) => ({ name })) });
    server.run().then(({ port }) => console.log(JSON.stringify({ port })), (err) => { console.error(err); process.exit(1); });
  `;
  // s3rver makes its continuation tokens with DES, which OpenSSL 3 keeps in its legacy provider.
  const launch = (port: number) =>
    spawnUntilFirstLine('/usr/bin/node', ['--openssl-legacy-provider', '-e', script, dir, JSON.stringify(buckets), String(port)], {
      what: 's3rver',
      cwd: REPO,
      env: { PATH: '/usr/bin:/bin', NODE_PATH: path.join(REPO, 'node_modules') },
    });
  let started = await launch(0).catch((err: unknown) => {
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  });
  const port = (JSON.parse(started.line) as { port: number }).port;
  const server: S3Server = {
    endpoint: `http://127.0.0.1:${port}`,
    pid: started.child.pid!,
    async stop() {
      await started.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
    halt: () => started.stop(),
    async resume() {
      started = await launch(port);
      server.pid = started.child.pid!;
    },
  };
  return server;
}

/** An SDK client of `server` with its credentials, one attempt per request (tests look, not retry). */
export function s3Client(server: S3Server): S3Client {
  return new S3Client({
    endpoint: server.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: S3RVER_KEY.access_key_id, secretAccessKey: S3RVER_KEY.secret_access_key },
    maxAttempts: 1,
  });
}

/** Every object key under `prefix` in `bucket`, sorted. */
export async function listKeys(client: S3Client, bucket: string, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  let token: string | undefined;
  do {
    const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }));
    for (const o of page.Contents ?? []) keys.push(o.Key!);
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  return keys.sort();
}
