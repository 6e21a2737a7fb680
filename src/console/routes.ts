import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../errors.ts';
import { ASSET_PREFIX, consoleAssets, type Asset } from './assets.ts';

/**
 * What the console's page may do: run and style itself from this origin's files, talk to this
 * origin's API, show images it made (blob:, data:). No inline script, no framing: a README or
 * a file name that holds markup has nothing to run in (and is sanitised besides).
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data: blob:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/** br, else gzip, else none, as the request accepts (q=0 refuses). */
export function pickEncoding(header: string | undefined): 'br' | 'gzip' | undefined {
  if (!header) return undefined;
  const accepted = new Map<string, number>();
  for (const part of header.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    accepted.set(name!, q ? Number(q.slice(2)) : 1);
  }
  const ok = (name: string) => (accepted.get(name) ?? accepted.get('*') ?? 0) > 0;
  if (ok('br')) return 'br';
  if (ok('gzip')) return 'gzip';
  return undefined;
}

function send(req: FastifyRequest, reply: FastifyReply, a: Asset): FastifyReply {
  reply
    .header('content-type', a.type)
    .header('etag', a.etag)
    .header('vary', 'Accept-Encoding')
    .header('cache-control', a.immutable ? 'public, max-age=31536000, immutable' : 'no-cache');
  if (req.headers['if-none-match'] === a.etag) return reply.code(304).send();
  const encoding = pickEncoding(req.headers['accept-encoding']);
  if (encoding) reply.header('content-encoding', encoding);
  return reply.send(encoding === 'br' ? a.br : encoding === 'gzip' ? a.gzip : a.body);
}

/** The console at `/` and its files under `/console/` (no key needed: the page signs in itself). */
export async function consoleRoutes(app: FastifyInstance): Promise<void> {
  app.get('/', async (req, reply) => {
    const { index } = await consoleAssets();
    reply.header('content-security-policy', CONSOLE_CSP).header('x-frame-options', 'DENY').header('referrer-policy', 'same-origin');
    return send(req, reply, index);
  });
  app.get<{ Params: { file: string } }>(`${ASSET_PREFIX}:file`, async (req, reply) => {
    const { files } = await consoleAssets();
    const a = files.get(req.params.file);
    if (!a) throw new AppError('route_not_found', `the console has no file ${req.params.file.slice(0, 100)}`);
    return send(req, reply, a);
  });
}
