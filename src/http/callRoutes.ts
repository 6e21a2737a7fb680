import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import { AppError } from '../errors.ts';
import type { CallRequest, CallService } from '../algorithms/calls.ts';
import { DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, type CallResult } from '../algorithms/calls.ts';
import type { AsyncCalls } from '../algorithms/asyncCalls.ts';
import type { ContentType } from '../runtime/contract.ts';
import { queryBool } from '../data/paths.ts';
import { readLimited } from './body.ts';
import { describeFailure, envelope, resultJson } from '../algorithms/envelope.ts';
import type { AsyncCallAccepted } from '../../client/src/types.ts';
import { bodyDigest, idempotencyKey, type IdempotencyKeys } from './idempotency.ts';
import { requestSpan } from '../tracing.ts';

/** Spec 8: the largest call input. Larger inputs go through the data API. */
export const MAX_INPUT_BYTES = 10 * 1024 * 1024;

/** The input type a Content-Type names (spec 4.1; compat.md adds text/plain and charsets). */
export function inputType(header: string | undefined): ContentType {
  const type = (header ?? '').split(';')[0]!.trim().toLowerCase();
  // No Content-Type: RFC 9110 lets a recipient assume application/octet-stream.
  if (type === '' || type === 'application/octet-stream') return 'binary';
  if (type === 'application/json' || type.endsWith('+json')) return 'json';
  if (type === 'application/text' || type.startsWith('text/')) return 'text';
  throw new AppError('unsupported_media_type', `Content-Type "${type.slice(0, 80)}" is not an algorithm input; send application/json, text/plain or application/octet-stream`);
}

/** Reads the input as it streams in, refusing it as soon as it passes the limit. */
export function readInput(headers: IncomingHttpHeaders, stream: Readable): Promise<Buffer> {
  const declared = Number(headers['content-length']);
  if (Number.isFinite(declared) && declared > MAX_INPUT_BYTES) return Promise.reject(inputTooLarge());
  return readLimited(stream, MAX_INPUT_BYTES, inputTooLarge);
}

function inputTooLarge(): AppError {
  return new AppError('payload_too_large', `an algorithm input may be at most 10 MiB; pass larger inputs as a data:// file`);
}

function parseTimeout(raw: string | undefined): number {
  if (raw === undefined || raw === '') return DEFAULT_TIMEOUT_S;
  const n = /^\d+(\.\d+)?$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isFinite(n) || n <= 0 || n > MAX_TIMEOUT_S) {
    throw new AppError('invalid_query', `timeout must be a number of seconds above 0 and at most ${MAX_TIMEOUT_S}, got "${raw.slice(0, 40)}"`);
  }
  return n;
}

/**
 * `owner/name[/version]` from the part of the path after `/v1/algo/`. npm 0.3.10 sends the
 * reference verbatim (`algo://demo/Hello`), and a proxy may collapse its `//`: both tolerated.
 */
export function parseAlgoRef(rest: string): { owner: string; name: string; version: string | undefined } {
  let decoded = rest;
  try {
    if (rest.includes('%')) decoded = decodeURIComponent(rest);
  } catch {
    throw new AppError('invalid_path', 'the algorithm path is not valid percent-encoding');
  }
  const bare = decoded.replace(/^algo:\/*/i, '');
  // Trailing slashes are tolerated; an empty segment anywhere else is not.
  let end = bare.length;
  while (end > 0 && bare.charCodeAt(end - 1) === 0x2f) end--;
  const parts = bare.slice(0, end).split('/');
  if (parts.length < 2 || parts.length > 3 || parts.includes('')) {
    throw new AppError('invalid_path', `"${decoded.slice(0, 120)}" is not an algorithm; call /v1/algo/OWNER/NAME[/VERSION]`);
  }
  return { owner: parts[0]!, name: parts[1]!, version: parts[2] };
}

/** Whether a browser page at `origin` may call with a key restricted to `allowed` (`host` or `*.host`). */
export function originAllowed(allowed: string | null, origin: string | undefined): boolean {
  if (allowed === null) return true;
  if (!origin) return false;
  let host: string;
  try {
    host = new URL(origin).host.toLowerCase();
  } catch {
    return false;
  }
  if (allowed.startsWith('*.')) return host.endsWith(allowed.slice(1)) && host.length > allowed.length - 1;
  return host === allowed;
}

/** What a call asks for besides its algorithm: read from the query and headers, before the body. */
export interface CallOptions {
  timeoutS: number;
  stdout: boolean;
  output: string | null;
  contentType: ContentType;
}

export function callOptions(url: string, q: number, contentTypeHeader: string | undefined): CallOptions {
  const query = q < 0 ? undefined : new URLSearchParams(url.slice(q + 1));
  const timeoutS = parseTimeout(query?.get('timeout') ?? undefined);
  const stdout = queryBool('stdout', query?.get('stdout') ?? undefined);
  const output = query?.get('output') ?? null;
  if (output !== null && output !== 'raw' && output !== 'void') {
    throw new AppError('invalid_query', `output must be "raw" or "void", got "${output.slice(0, 40)}"`);
  }
  return { timeoutS, stdout, output, contentType: inputType(contentTypeHeader) };
}

/** The input, read as it streams in; a json input must be JSON. */
async function callInput(headers: IncomingHttpHeaders, stream: Readable, contentType: ContentType): Promise<Buffer> {
  return checkedInput(await readInput(headers, stream), contentType);
}

/** A json input must be JSON. */
export function checkedInput(input: Buffer, contentType: ContentType): Buffer {
  if (contentType === 'json') {
    try {
      JSON.parse(input.toString('utf8'));
    } catch {
      throw new AppError('invalid_json', 'the input is declared application/json but is not valid JSON');
    }
  }
  return input;
}

/** A call's answer as it goes out: the envelope (spec 2.2), or with `output=raw` the result itself. */
interface CallAnswer {
  status: number;
  /** The Content-Type, with the charset fastify would add to a text body. */
  type: string;
  body: string | Buffer;
}

export const JSON_UTF8 = 'application/json; charset=utf-8';
const TEXT_UTF8 = 'text/plain; charset=utf-8';

export function callAnswer(r: CallResult, options: CallOptions): CallAnswer {
  if (options.output !== 'raw') return { status: 200, type: JSON_UTF8, body: envelope(r, options.timeoutS) };
  const o = r.outcome;
  if (o.kind === 'result') {
    switch (o.contentType) {
      case 'void':
        return { status: 200, type: TEXT_UTF8, body: '' };
      case 'text':
        return { status: 200, type: TEXT_UTF8, body: o.body };
      case 'binary':
        return { status: 200, type: 'application/octet-stream', body: o.body };
      default:
        if (resultJson('json', o.body) !== undefined) return { status: 200, type: 'application/json', body: o.body };
    }
  }
  // A failure is a 400 with its message.
  const message = o.kind === 'result' ? 'the algorithm returned a json result that is not JSON' : describeFailure(r, options.timeoutS).message;
  return { status: 400, type: TEXT_UTF8, body: message };
}

/** The call API (spec 4.1): `/v1/algo/...` and the browser variant `/v1/web/algo/...`. */
export async function callRoutes(app: FastifyInstance, opts: { calls: CallService; asyncCalls: AsyncCalls; idempotency?: IdempotencyKeys }): Promise<void> {
  // The body is the algorithm's input, read here as it streams, whatever its type.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));

  const handle = (web: boolean) => async (req: FastifyRequest, reply: FastifyReply) => {
    const principal = req.principal!;
    const url = req.raw.url ?? '';
    const q = url.indexOf('?');
    const prefix = web ? '/v1/web/algo/' : '/v1/algo/';
    const ref = parseAlgoRef((q < 0 ? url : url.slice(0, q)).slice(prefix.length));
    if (web) {
      const origin = req.headers.origin ?? req.headers.referer;
      if (!principal.permissions.allow_web_algo) throw new AppError('algo_not_allowed', 'this API key may not be used from a browser (allow_web_algo is off)');
      if (!originAllowed(principal.permissions.referer_host, origin)) {
        throw new AppError('algo_not_allowed', `this API key may only be used from pages on ${principal.permissions.referer_host}`);
      }
      if (req.headers.origin) reply.header('access-control-allow-origin', req.headers.origin).header('vary', 'Origin');
    }
    const options = callOptions(url, q, req.headers['content-type']);
    // An async call may carry an Idempotency-Key (idempotency.ts); other calls ignore it.
    const key = options.output === 'void' && opts.idempotency ? idempotencyKey(req.headers) : undefined;
    const input = await callInput(req.headers, req.raw, options.contentType);
    const request: CallRequest = { owner: ref.owner, name: ref.name, version: ref.version, contentType: options.contentType, input, timeoutS: options.timeoutS, stdout: options.stdout, parent: req.callContext, trace: requestSpan(req.raw) };
    if (key !== undefined) {
      // The request row and the key's answer are written in one transaction (AcceptedWith); a
      // replay of a request whose accepting process died before queueing it queues it now.
      const line = `${req.method} ${url} (${options.contentType})`;
      return opts.idempotency!.answer(
        req,
        reply,
        key,
        { line, digest: bodyDigest(input) },
        async (claim) => {
          const answerOf = (id: string) => ({ status: 200, body: JSON.stringify({ async: true, request_id: id } satisfies AsyncCallAccepted) });
          const accepted = await opts.asyncCalls.accept(principal, request, req.log, {
            accepted: (trx, id) => claim.record(trx, answerOf(id)),
            withdrawn: (trx) => claim.withdraw(trx),
          });
          return 'early' in accepted ? { status: 200, body: envelope(accepted.early, options.timeoutS) } : answerOf(accepted.id);
        },
        async (answer) => {
          const id = answer.status === 200 ? (JSON.parse(answer.body) as Partial<AsyncCallAccepted>).request_id : undefined;
          if (typeof id === 'string') await opts.asyncCalls.requeueOrphan(id);
        },
      );
    }
    if (options.output === 'void') {
      // Checked and resolved before the answer, queued durably, then answered with its id;
      // GET /v1/requests/:id gives its answer once it has run (asyncCalls.ts).
      const accepted = await opts.asyncCalls.accept(principal, request, req.log);
      if ('early' in accepted) return reply.type('application/json').send(envelope(accepted.early, options.timeoutS));
      return reply.type('application/json').send({ async: true, request_id: accepted.id } satisfies AsyncCallAccepted);
    }
    const r = await opts.calls.call(principal, request, req.log);
    const a = callAnswer(r, options);
    // What is left of the caller's rate, on answers admitted too (docs/limits.md).
    if (r.rateLimit !== undefined) for (const [name, value] of r.rateLimit) reply.header(name, value);
    // Whether a worker was started for this call (docs/limits.md, "Cold starts").
    reply.header('x-cold-start', r.outcome.coldStart === true ? 'true' : 'false');
    return reply.code(a.status).type(a.type).send(a.body);
  };

  app.post('/v1/algo/*', handle(false));
  app.post('/v1/web/algo/*', handle(true));
  // An async call's state and answer, for the user whose key made it.
  app.get('/v1/requests/:id', async (req: FastifyRequest<{ Params: { id: string } }>, reply) =>
    reply.type('application/json').send(await opts.asyncCalls.get(req.principal!, req.params.id)),
  );
}

/** Browser preflight for `/v1/web/algo`: carries no key, so it lives outside authentication. */
export async function webPreflight(app: FastifyInstance): Promise<void> {
  // A preflight's body means nothing (browsers send none): read to its end and dropped, whatever
  // its type, rather than refused as of a type no parser takes (a 415 the preflight does not
  // document). Read, not left unread: a body left in the stream cost the kept-alive connection.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, payload, done) => {
    payload.on('end', () => done(null, undefined)).on('error', (err) => done(err, undefined)).resume();
  });
  app.options('/v1/web/algo/*', async (req, reply) => {
    if (req.headers.origin) reply.header('access-control-allow-origin', req.headers.origin).header('vary', 'Origin');
    return reply
      .code(204)
      .header('access-control-allow-methods', 'POST')
      .header('access-control-allow-headers', 'Authorization, Content-Type, Idempotency-Key')
      .header('access-control-max-age', '600')
      .send();
  });
}
