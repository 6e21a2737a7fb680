import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

/** s3rver's fixed credentials: it checks signatures made with them. */
export const S3RVER_KEY = { access_key_id: 'S3RVER', secret_access_key: 'S3RVER' };

export interface S3Server {
  /** http://127.0.0.1:PORT */
  endpoint: string;
  pid: number;
  stop(): Promise<void>;
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
    const server = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: process.argv[1],
      configureBuckets: JSON.parse(process.argv[2]).map((name) => ({ name })) });
    server.run().then(({ port }) => console.log(JSON.stringify({ port })), (err) => { console.error(err); process.exit(1); });
  `;
  // s3rver makes its continuation tokens with DES, which OpenSSL 3 keeps in its legacy provider.
  const child: ChildProcess = spawn('/usr/bin/node', ['--openssl-legacy-provider', '-e', script, dir, JSON.stringify(buckets)], {
    cwd: REPO,
    env: { PATH: '/usr/bin:/bin', NODE_PATH: path.join(REPO, 'node_modules') },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = readline.createInterface({ input: child.stdout! });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('s3rver did not start within 15 s')), 15_000);
    child.once('exit', (code) => reject(new Error(`s3rver exited (${code}) before it was ready`)));
    lines.once('line', (line) => {
      clearTimeout(timer);
      resolve((JSON.parse(line) as { port: number }).port);
    });
  });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGKILL');
        await exited;
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
