/**
 * The server of bench/callParity.ts, built from the sources of any tree (ROOT: this checkout
 * or a base exported by bench/baseTree.ts) with pino at level info writing to LOGFILE, so
 * that two versions' answers and request log lines can be compared.
 *
 *   node --import ./bin/loader.mjs bench/paritySrv.ts ROOT HOME LOGFILE
 *
 * Prints "parity is ready at http://127.0.0.1:PORT" on stderr.
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';

const [root, home, logFile] = process.argv.slice(2);
if (!root || !home || !logFile) throw new Error('usage: paritySrv.ts ROOT HOME LOGFILE');
const from = (file: string) => import(pathToFileURL(path.join(root, 'src', file)).href);
// A base older than LOG_OPTIONS exports only LOG_REDACT.
const { buildApp, LOG_OPTIONS, LOG_REDACT } = await from('app.ts');
const { loadConfig } = await from('config.ts');
const { createServices } = await from('services.ts');

const config = loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, { ALGOHOST_LOG_LEVEL: 'info' });
const services = await createServices(config);
const app = buildApp(services, { logger: pino({ level: 'info', ...(LOG_OPTIONS ?? { redact: LOG_REDACT }) }, pino.destination({ dest: logFile, sync: true })) });
const url = await app.listen({ port: 0, host: '127.0.0.1' });
process.stderr.write(`parity is ready at ${url}\n`);
const stop = async () => {
  await app.close();
  await services.close();
  process.exit(0);
};
process.once('SIGTERM', () => void stop());
process.once('SIGINT', () => void stop());
