import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config.ts';
import { createServices, type ServiceOptions, type Services } from '../../src/services.ts';
import { backendEnv } from './backends.ts';

export interface TestServer {
  /** Base address, e.g. http://127.0.0.1:PORT (no trailing slash). */
  url: string;
  home: string;
  services: Services;
  app: FastifyInstance;
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
  const config = loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, { ...(await backendEnv(home)), ...options.env });
  const services = await createServices(config, options);
  await services.hosted.recover();
  const app = buildApp(services);
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    url,
    home,
    services,
    app,
    async user(name) {
      return (await services.users.create(name)).apiKey;
    },
    async close() {
      await app.close();
      await services.close();
      fs.rmSync(home, { recursive: true, force: true });
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
