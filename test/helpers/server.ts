import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config.ts';
import { createServices, type ServiceOptions, type Services } from '../../src/services.ts';
import { OPENAPI_CHECK_ENV, openapiViolations } from './openapi.ts';
import { backendEnv, CLUSTER, shareBackends } from './backends.ts';
import { startTestCluster, type TestCluster } from './cluster.ts';

export interface TestServer {
  /** Base address, e.g. http://127.0.0.1:PORT (no trailing slash). */
  url: string;
  /**
   * This process's own server: `url` itself, except under test:cluster, where `url` is the
   * balancer in front of two API nodes and this is the one in this process.
   */
  node: string;
  home: string;
  services: Services;
  app: FastifyInstance;
  /** Under `npm run test:cluster`: the NATS server, worker nodes and second API node around this one. */
  cluster?: TestCluster | undefined;
  /** Creates a user and returns its default key. */
  user(name: string): Promise<string>;
  close(): Promise<void>;
}

export function tempHome(prefix = 'algohost-test-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** A real server on 127.0.0.1 port 0 with a fresh home in a temp directory. */
export async function startServer(
  options: ServiceOptions & { env?: Record<string, string>; home?: string } = {},
): Promise<TestServer> {
  const home = options.home ?? tempHome();
  // Every answer is checked against the OpenAPI document (docs/openapi.md); close() fails on one off it.
  const env = { ...OPENAPI_CHECK_ENV, ...(await backendEnv(home)), ...options.env };
  const config = loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, env);
  let cluster: TestCluster | undefined;
  if (CLUSTER) {
    const secondHome = tempHome('algohost-test-api2-');
    await shareBackends(home, secondHome);
    // Page sizes and pool limits are tunings of this process: another process cannot take them.
    cluster = await startTestCluster(config, env, secondHome, Boolean(options.hosted || options.connected || options.runtime));
  }
  let services: Services;
  try {
    services = await createServices(config, { ...options, ...cluster?.parts });
  } catch (err) {
    await cluster?.close();
    throw err;
  }
  let app: FastifyInstance | undefined;
  let url: string;
  let local: string;
  try {
    await services.hosted.recover();
    app = buildApp(services, cluster ? { role: 'api' } : {});
    local = await app.listen({ port: 0, host: '127.0.0.1' });
    url = cluster ? await cluster.front(local) : local;
  } catch (err) {
    await app?.close();
    await services.close();
    await cluster?.close();
    throw err;
  }
  return {
    url,
    node: local,
    home,
    services,
    app: app!,
    cluster,
    async user(name) {
      return (await services.users.create(name)).apiKey;
    },
    async close() {
      await app!.close();
      await services.close();
      await cluster?.close();
      const violations = openapiViolations(home);
      fs.rmSync(home, { recursive: true, force: true });
      if (violations.length > 0) throw new Error(`answers off the OpenAPI document (docs/openapi.md):\n${violations.join('\n')}`);
    },
  };
}

/** fetch with an API key (`Simple` scheme unless the caller sets Authorization itself). */
export function api(base: string, key: string | undefined) {
  return (p: string, init: RequestInit = {}) => {
    const headers = new Headers(init.headers);
    if (key !== undefined && !headers.has('authorization')) headers.set('authorization', `Simple ${key}`);
    return fetch(base + p, { ...init, headers });
  };
}

/** Reads a JSON body, failing with the raw text when it is not JSON. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- bodies are checked field by field by the tests' assertions
export async function json(res: Response): Promise<any> {
  const text = await res.text();
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`expected JSON, got ${res.status}: ${text.slice(0, 200)}`);
  }
}
