/**
 * Our server for the tenants benchmark (bench/tenants.ts), built the way the tests build it
 * (createServices + buildApp, pino silent, 127.0.0.1 port 0) on an existing home, from this
 * tree's src/ or another's (`--tree DIR`, bench/baseTree.ts: the code before a change, for a
 * reference measured in the same run).
 *
 *   node --import ./bin/loader.mjs bench/tenantsServer.ts HOME --workers N --per-version N --queue N --per-caller N [--prestart N] [--tree DIR]
 *
 * Prints "tenants is ready at http://127.0.0.1:PORT" on stderr.
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { REPO } from './procs.ts';
import type * as App from '../src/app.ts';
import type * as Config from '../src/config.ts';
import type * as Pool from '../src/runtime/pool.ts';
import type * as Services from '../src/services.ts';

const home = process.argv[2];
if (!home) throw new Error('usage: tenantsServer.ts HOME --workers N --per-version N --queue N --per-caller N [--tree DIR]');
const arg = (name: string, fallback?: string) => {
  const i = process.argv.indexOf(name);
  const v = i > 0 ? process.argv[i + 1] : fallback;
  if (v === undefined) throw new Error(`${name} is required`);
  return v;
};
const tree = path.resolve(arg('--tree', REPO));
const load = async <T>(file: string) => (await import(pathToFileURL(path.join(tree, file)).href)) as T;

const { buildApp, LOG_OPTIONS } = await load<typeof App>('src/app.ts');
const { loadConfig } = await load<typeof Config>('src/config.ts');
const { DEFAULT_POOL } = await load<typeof Pool>('src/runtime/pool.ts');
const { createServices } = await load<typeof Services>('src/services.ts');

const pool = {
  ...DEFAULT_POOL,
  maxWorkers: Number(arg('--workers')),
  maxPerVersion: Number(arg('--per-version')),
  maxQueue: Number(arg('--queue')),
  // A tree before fair shares ignores it (one queue, first come first served).
  maxQueuePerCaller: Number(arg('--per-caller')),
};
// Pre-started workers per language (bench/catalog.ts turns them off for its baseline; a tree before them ignores it).
const config = loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, { ALGOHOST_LOG_LEVEL: 'silent', ALGOHOST_PRESTART: arg('--prestart', '2') });
const services = await createServices(config, { runtime: { pool } });
await services.hosted.recover();
const app = buildApp(services, { logger: pino({ level: 'silent', ...LOG_OPTIONS }) });
const url = await app.listen({ port: 0, host: '127.0.0.1' });
process.stderr.write(`tenants is ready at ${url}\n`);
process.stderr.write(`sandbox: ${services.sandbox.available ? 'bubblewrap' : `NONE (${services.sandbox.reason})`}\n`);
