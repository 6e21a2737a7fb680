import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../errors.ts';
import type { DataService } from '../data/dataService.ts';
import { parseDataPath, queryBool } from '../data/paths.ts';
import { negotiateContentType } from '../data/contentType.ts';
import type { Connector, FileRead } from '../data/connector.ts';
import { noneMatch, parseRange } from './range.ts';
import { parseJsonObject, readSmallBody } from './body.ts';
import type { DataUriResult, DeleteResult, ListingPage } from '../../client/src/types.ts';
import { DOWNLOAD_PARAM } from '../auth/sessions.ts';
import { idempotencyKey, type IdempotencyKeys } from './idempotency.ts';

export const DATA_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/**
 * `Content-Disposition: attachment` for a file's name (RFC 6266): a plain-ASCII `filename` for
 * old browsers, and the name itself, percent-encoded UTF-8, in `filename*`.
 */
export function attachment(name: string): string {
  const ascii = Array.from(name, (c) => (/^[\x20-\x7e]$/.test(c) && !'"\\%'.includes(c) ? c : '_')).join('');
  const encoded = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encoded}`;
}

export function methodNotAllowed(method: string): AppError {
  return new AppError('method_not_allowed', `${method} is not a data operation; use ${DATA_METHODS.join(', ')}`);
}

/** The raw path (still percent-encoded) and the query of a request. */
function splitUrl(url: string): { path: string; query: URLSearchParams } {
  const q = url.indexOf('?');
  return q < 0 ? { path: url, query: new URLSearchParams() } : { path: url.slice(0, q), query: new URLSearchParams(url.slice(q + 1)) };
}

function param(query: URLSearchParams, name: string): string | undefined {
  return query.get(name) ?? undefined;
}

/**
 * The data API (spec 4.2-4.9) under /v1/data, /v1/connector and /api/v1/connector. Routes
 * only parse, authorise and shape; connectors do the work. Bodies are not parsed by fastify
 * here: a file upload is streamed as it arrives, whatever Content-Type it claims.
 */
export async function dataRoutes(app: FastifyInstance, opts: { data: DataService; maxUploadBytes: number; idempotency?: IdempotencyKeys }): Promise<void> {
  const { data } = opts;
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));

  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    const principal = req.principal!;
    const { path, query } = splitUrl(req.raw.url ?? '/');
    const target = parseDataPath(path);
    const connector = await data.resolve(principal, target.connector);
    reply.header('cache-control', 'private, no-cache');
    switch (req.method) {
      case 'GET':
      case 'HEAD': {
        data.requireRead(principal);
        return get(req, reply, connector, target.segments, query);
      }
      case 'PUT': {
        data.requireWrite(principal);
        const declared = Number(req.headers['content-length']);
        if (Number.isFinite(declared) && declared > opts.maxUploadBytes) {
          throw new AppError('payload_too_large', `the file is larger than the limit of ${opts.maxUploadBytes} bytes`);
        }
        // Declared, a storage quota refuses it before a byte is read.
        const size = req.headers['content-length'] !== undefined && Number.isSafeInteger(declared) ? declared : undefined;
        // An upload may carry an Idempotency-Key (idempotency.ts): its body hashed as it streams,
        // its answer written in the transaction that commits a hosted file.
        const key = opts.idempotency ? idempotencyKey(req.headers) : undefined;
        // What one user may have in flight (docs/security.md): refused before a byte is read.
        const release = await data.holdUpload(principal);
        try {
          if (key !== undefined) {
            const answerOf = (uri: string) => ({ status: 200, body: JSON.stringify({ result: uri } satisfies DataUriResult) });
            return await opts.idempotency!.answer(req, reply, key, { line: `${req.method} ${req.raw.url ?? '/'}`, stream: req.raw, maxBytes: opts.maxUploadBytes }, async (claim, body) =>
              answerOf(await connector.write(principal, target.segments, body!, { size, along: (trx, uri) => claim.record(trx, answerOf(uri)) })),
            );
          }
          const result = await connector.write(principal, target.segments, req.raw, { size });
          return reply.type('application/json').send({ result } satisfies DataUriResult);
        } finally {
          release();
        }
      }
      case 'POST': {
        data.requireWrite(principal);
        const text = await readSmallBody(req.raw);
        const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
        let name: unknown;
        let acl: unknown;
        if (type === 'text/plain' || type === 'application/text') {
          name = text;
        } else {
          const body = parseJsonObject(text, ['name', 'acl']);
          name = body.name;
          acl = body.acl;
        }
        if (typeof name !== 'string' || name === '') {
          throw new AppError('invalid_body', 'send the new directory\'s name: {"name": "...", "acl": {"read": [...]}} or the bare name as text/plain');
        }
        const result = await connector.mkdir(principal, target.segments, name, acl);
        return reply.type('application/json').send({ result } satisfies DataUriResult);
      }
      case 'PATCH': {
        data.requireWrite(principal);
        const body = parseJsonObject(await readSmallBody(req.raw), ['acl']);
        const result = await connector.update(principal, target.segments, { acl: body.acl });
        return reply.type('application/json').send({ result } satisfies DataUriResult);
      }
      case 'DELETE': {
        data.requireWrite(principal);
        const deleted = await connector.delete(principal, target.segments, queryBool('force', param(query, 'force')));
        return reply.type('application/json').send({ result: { deleted } } satisfies DeleteResult);
      }
      default:
        throw methodNotAllowed(req.method);
    }
  };

  for (const url of ['/v1/data', '/v1/data/*', '/v1/connector/*', '/api/v1/connector/*']) {
    app.route({ method: [...DATA_METHODS], url, handler });
  }
}

async function get(req: FastifyRequest, reply: FastifyReply, connector: Connector, segments: string[], query: URLSearchParams) {
  const head = req.method === 'HEAD';
  const wantsAcl = queryBool('acl', param(query, 'acl'));
  let notModified = false;
  const found = await connector.read(req.principal!, segments, {
    skipBody: (info) => (notModified = noneMatch(req.headers['if-none-match'], info.etag)) || head,
    pickRange: (info) => {
      const ifRange = req.headers['if-range'];
      if (ifRange !== undefined && ifRange !== info.etag) return undefined;
      try {
        return parseRange(req.headers.range, info.size);
      } catch (err) {
        reply.header('content-range', `bytes */${info.size}`);
        throw err;
      }
    },
  });
  if (found.info.kind === 'dir') {
    // A download link reads one file; a listing takes the session's CSRF token as ever.
    if (req.byDownloadLink) throw new AppError('download_link_invalid', 'a download link is for a file, and this is a directory');
    reply.header('x-data-type', 'directory');
    if (head) return reply.type('application/json').send();
    const marker = param(query, 'marker');
    const page: ListingPage = await connector.list(req.principal!, segments, { marker: marker || undefined, acl: wantsAcl });
    return reply.type('application/json').send(page);
  }
  const { info, range, body } = found as FileRead;
  reply.header('x-data-type', 'file');
  reply.header('etag', info.etag);
  reply.header('last-modified', new Date(info.modified).toUTCString());
  reply.header('accept-ranges', 'bytes');
  // A download link (the console's, sessions.ts) or any `?download`: saved, not shown.
  if (query.has(DOWNLOAD_PARAM)) reply.header('content-disposition', attachment(segments[segments.length - 1] ?? 'download'));
  reply.type(negotiateContentType(req.headers.accept, info.contentType));
  if (notModified) return reply.code(304).send();
  if (range) {
    reply.code(206);
    reply.header('content-range', `bytes ${range.start}-${range.end}/${info.size}`);
    reply.header('content-length', range.end - range.start + 1);
  } else {
    reply.header('content-length', info.size);
  }
  if (head) return reply.send();
  return reply.send(body);
}
