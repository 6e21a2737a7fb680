/**
 * The setup of the in-process call benches (bench/callStages.ts, bench/usageCost.ts): a home
 * in the bench's work directory with one user, `bench`, and the echo `bench/Echo` published
 * through a real server on loopback (as bench/algo.ts does), a warm worker pool sized for it,
 * and the principal and call request a warm call needs without HTTP.
 */
import fs from 'node:fs';
import path from 'node:path';
import { buildApp } from '../src/app.ts';
import type { Principal } from '../src/auth/principal.ts';
import { loadConfig } from '../src/config.ts';
import { createServices, type Services } from '../src/services.ts';
import { release } from '../test/helpers/algorithms.ts';
import { api } from '../test/helpers/server.ts';
import type { Bench } from './common.ts';

export interface EchoHome {
  services: Services;
  apiKey: string;
  principal: Principal;
  /** A warm call of bench/Echo with `input`, as the call routes hand it to CallService. */
  request: { owner: string; name: string; version: undefined; contentType: 'text'; input: Buffer; timeoutS: number; stdout: boolean };
  close(): Promise<void>;
}

export async function openEchoHome(bench: Bench, input: Buffer): Promise<EchoHome> {
  const home = path.join(bench.work, 'home');
  fs.mkdirSync(home, { recursive: true });
  const config = loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, {});
  const services = await createServices(config, { runtime: { pool: { maxWorkers: 4, maxPerVersion: 1, idleMs: 600_000, maxQueue: 100, queueTimeoutMs: 60_000 } } });
  const app = buildApp(services);
  const close = async () => {
    await app.close();
    await services.close();
  };
  try {
    const apiKey = (await services.users.create('bench')).apiKey;
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    await release(api(url, apiKey), 'bench', 'Echo', { 'src/Echo.js': 'export function apply(input) { return input; }\n' }, { settings: { language: 'javascript' } });
    const principal = await services.keys.authenticate(`Simple ${apiKey}`);
    const request = { owner: 'bench', name: 'Echo', version: undefined, contentType: 'text' as const, input, timeoutS: 300, stdout: false };
    return { services, apiKey, principal, request, close };
  } catch (err) {
    await close();
    throw err;
  }
}
