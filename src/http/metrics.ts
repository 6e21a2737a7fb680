import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { AppError } from '../errors.ts';
import type { Metrics } from '../metrics.ts';
import { errorAnswer } from './answers.ts';

/*
 * Where Prometheus reads a node's metrics (docs/metrics.md): a listener of its own
 * (ALGOHOST_METRICS_ADDR), and/or GET /metrics on the public port behind a Bearer token
 * (ALGOHOST_METRICS_TOKEN). Never on the public port without the token.
 */

/** The path on both. */
export const METRICS_PATH = '/metrics';

/**
 * Counts every request fastify answers, by its route pattern (never the raw URL: that would
 * make a series per path and id), and serves GET /metrics when a token is set.
 */
export function metricsRoutes(app: FastifyInstance, metrics: Metrics, token: string | undefined): void {
  if (metrics.enabled) {
    // Synchronous (callback style), as the app's other per-request hooks.
    app.addHook('onResponse', (req, reply, done) => {
      metrics.http(req.routeOptions.url ?? 'unmatched', req.method, reply.statusCode, reply.elapsedTime / 1000);
      done();
    });
  }
  if (token === undefined) return;
  const expected = digest(token);
  app.get(METRICS_PATH, async (req, reply) => {
    const header = req.headers.authorization;
    const given = header?.startsWith('Bearer ') ? header.slice(7).trim() : undefined;
    if (given === undefined || !crypto.timingSafeEqual(digest(given), expected)) {
      reply.header('www-authenticate', 'Bearer realm="metrics"');
      throw new AppError(header === undefined ? 'auth_required' : 'invalid_authorization', 'GET /metrics takes Authorization: Bearer with the token of ALGOHOST_METRICS_TOKEN');
    }
    const { contentType, body } = await metrics.scrape();
    reply.header('content-type', contentType).header('cache-control', 'no-store');
    return body;
  });
}

function digest(s: string): Buffer {
  return crypto.createHash('sha256').update(s).digest();
}

/**
 * The metrics listener (ALGOHOST_METRICS_ADDR): GET /metrics, nothing else, no authentication
 * (the operator puts it where only the monitoring reaches). Resolves once it listens.
 */
export async function listenMetrics(metrics: Metrics, addr: { host: string; port: number }, log: { error(obj: object, msg: string): void }): Promise<http.Server & { url: string }> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== METRICS_PATH || (req.method !== 'GET' && req.method !== 'HEAD')) {
      const a = errorAnswer(new AppError('route_not_found', `this listener serves GET ${METRICS_PATH} only`), 'metrics');
      res.writeHead(a.status, { 'content-type': 'application/json; charset=utf-8' }).end(a.body);
      return;
    }
    metrics.scrape().then(
      ({ contentType, body }) => res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store' }).end(req.method === 'HEAD' ? undefined : body),
      (err: unknown) => {
        log.error({ err }, 'collecting the metrics failed');
        const a = errorAnswer(err, 'metrics');
        res.writeHead(a.status, { 'content-type': 'application/json; charset=utf-8' }).end(a.body);
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(addr.port, addr.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const a = server.address() as AddressInfo;
  const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
  return Object.assign(server, { url: `http://${host}:${a.port}${METRICS_PATH}` });
}
