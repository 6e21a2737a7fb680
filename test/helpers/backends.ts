import crypto from 'node:crypto';
import path from 'node:path';
import { createDatabase } from './postgres.ts';
import { S3RVER_KEY } from './s3.ts';

/**
 * Which backends the suite runs on. `npm run test:unit` runs it on the single-machine defaults
 * (SQLite in the home, blobs on its disk); `npm run test:shared` (test/run-shared.ts) starts a
 * throwaway PostgreSQL cluster and an S3 server and runs the same files again with
 * ALGOHOST_TEST_BACKENDS=postgres+s3, ALGOHOST_TEST_PG_URL and ALGOHOST_TEST_S3_ENDPOINT set.
 * Every server a test starts then gets a database and a key prefix of its own.
 */
export const SHARED = process.env.ALGOHOST_TEST_BACKENDS === 'postgres+s3' || process.env.ALGOHOST_TEST_BACKENDS === 'cluster';

/**
 * `npm run test:cluster` (test/run-shared.ts cluster): the shared backends, and every test server
 * is a cluster: two API nodes behind a balancer, two worker nodes, NATS (test/helpers/cluster.ts).
 */
export const CLUSTER = process.env.ALGOHOST_TEST_BACKENDS === 'cluster';

/** The bucket test/run-shared.ts makes on its S3 server. */
export const TEST_BUCKET = 'algohost-test';

const byHome = new Map<string, Promise<Record<string, string>>>();

/**
 * The settings that put a home's metadata and blobs on the shared backends: made once per
 * home (a new database, a new prefix), so a CLI run on that home later finds the same ones.
 * Empty on the default backends.
 */
export function backendEnv(home: string): Promise<Record<string, string>> {
  if (!SHARED) return Promise.resolve({});
  const key = path.resolve(home);
  let env = byHome.get(key);
  if (!env) {
    env = (async () => ({
      ALGOHOST_DATABASE_URL: await createDatabase(process.env.ALGOHOST_TEST_PG_URL!),
      ALGOHOST_BLOBS: `s3://${TEST_BUCKET}/${crypto.randomBytes(6).toString('hex')}?endpoint=${encodeURIComponent(process.env.ALGOHOST_TEST_S3_ENDPOINT!)}&force_path_style=true`,
      AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id,
      AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key,
    }))();
    byHome.set(key, env);
  }
  return env;
}

/** `other` (another node's home) uses the same database and blob prefix as `home`. */
export async function shareBackends(home: string, other: string): Promise<void> {
  if (SHARED) byHome.set(path.resolve(other), Promise.resolve(await backendEnv(home)));
}

/** Why a test that reads the home's own files (SQLite, blobs on disk) does not run on shared backends. */
export const HOME_FILES_ONLY = SHARED ? 'reads the SQLite file or blob files in the home, which the shared backends do not use' : false;
