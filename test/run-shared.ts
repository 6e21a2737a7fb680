/**
 * Runs the test suite on the shared backends: a throwaway PostgreSQL cluster (Debian's
 * postgresql-15) and an S3 protocol server (s3rver), both on loopback in temp directories,
 * started here and stopped here by pid whatever happens. Each server a test starts gets a
 * database and a key prefix of its own (test/helpers/backends.ts).
 *
 *   node --import tsx test/run-shared.ts [test files...]   (default: test/*.test.ts)
 *
 * With --cluster first (`npm run test:cluster`), every server a test starts is a cluster on those
 * backends: two API nodes behind a load balancer, two worker nodes and a NATS server
 * (test/helpers/cluster.ts). The default files are then the suites that go through a server
 * (those that call startServer): the others have nothing of a cluster to try.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { startPostgres } from './helpers/postgres.ts';
import { startS3 } from './helpers/s3.ts';
import { TEST_BUCKET } from './helpers/backends.ts';
import { natsUnavailable } from './helpers/nats.ts';

const root = path.resolve(import.meta.dirname, '..');
const cluster = process.argv[2] === '--cluster';
const files = process.argv.slice(cluster ? 3 : 2);
const tests =
  files.length > 0
    ? files
    : fs
        .readdirSync(path.join(root, 'test'))
        .filter((f) => f.endsWith('.test.ts') && (!cluster || fs.readFileSync(path.join(root, 'test', f), 'utf8').includes('startServer(')))
        .sort()
        .map((f) => path.join('test', f));

if (cluster && natsUnavailable()) {
  process.stderr.write(`test:cluster: ${natsUnavailable()}\n`);
  process.exit(1);
}
const pg = await startPostgres();
let s3: Awaited<ReturnType<typeof startS3>> | undefined;
let code = 1;
try {
  s3 = await startS3([TEST_BUCKET]);
  process.stderr.write(`test:${cluster ? 'cluster' : 'shared'}: PostgreSQL on port ${pg.port}, S3 at ${s3.endpoint}\n`);
  const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', ...tests], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, ALGOHOST_TEST_BACKENDS: cluster ? 'cluster' : 'postgres+s3', ALGOHOST_TEST_PG_URL: pg.adminUrl, ALGOHOST_TEST_S3_ENDPOINT: s3.endpoint },
  });
  const stop = () => child.kill('SIGTERM');
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  code = await new Promise<number>((resolve) => child.once('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0))));
} finally {
  await s3?.stop();
  pg.stop();
}
process.exit(code);
