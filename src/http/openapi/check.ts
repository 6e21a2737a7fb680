import fs from 'node:fs';
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { ROUTES, UNDOCUMENTED, type RouteDoc } from './routes.ts';
import type { OpenApiDocument } from './document.ts';

/**
 * A testing aid (ALGOHOST_TEST_OPENAPI_CHECK, docs/openapi.md): every answer the server gives
 * is checked against its OpenAPI document. The route is found from the request's method and
 * path with the route table's own patterns (fastify's, static parts before parameters before
 * wildcards, as its router does), then: the status must be one the operation lists, the
 * Content-Type one the answer lists, and a JSON body must validate against its schema (Ajv,
 * JSON Schema 2020-12, as OpenAPI 3.1 has it).
 *
 * It wraps the HTTP server's request listener rather than hooking fastify: the direct call path
 * (directCalls.ts) and hijacked answers (the event stream) never run fastify's hooks, and they
 * are answers like the others. What does not match is a Violation: logged at error level, and
 * appended to a file that the test helpers read when they stop a server, failing the test.
 */

export interface Violation {
  method: string;
  url: string;
  status: number;
  contentType: string | undefined;
  /** The route pattern matched, if any. */
  route: string | undefined;
  problem: string;
}

/** Bodies longer than this are not kept (nor validated): the status and type still are. */
const MAX_BODY = 1024 * 1024;

interface Matcher {
  regex: RegExp;
  route: string;
  /** Static characters: more is more specific. */
  weight: number;
  docs: Map<string, RouteDoc>;
  skip: boolean;
}

function matcher(route: string, skip: boolean): Matcher {
  const parts = route.split(/(:[A-Za-z0-9_]+|\*)/).filter((p) => p !== '');
  let weight = 0;
  const source = parts
    .map((p) => {
      if (p === '*') return '.*';
      // Empty too: fastify's router gives a parameter an empty value (`/keys//x`), and routes there answer.
      if (p.startsWith(':')) return '[^/]*';
      weight += p.length * 4;
      return p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    })
    .join('');
  // A wildcard weighs less than a parameter, which weighs less than the same text written out.
  weight -= parts.filter((p) => p === '*').length * 2 + parts.filter((p) => p.startsWith(':')).length;
  return { regex: new RegExp(`^${source}$`), route, weight, docs: new Map(), skip };
}

const mediaType = (header: string | undefined) => (header ?? '').split(';')[0]!.trim().toLowerCase();

function headerValue(headers: OutgoingHttpHeaders | readonly unknown[] | undefined, name: string): string | undefined {
  if (!headers) return undefined;
  if (Array.isArray(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) if (String(headers[i]).toLowerCase() === name) return String(headers[i + 1]);
    return undefined;
  }
  for (const [k, v] of Object.entries(headers as OutgoingHttpHeaders)) if (k.toLowerCase() === name && v !== undefined) return String(v);
  return undefined;
}

export class AnswerCheck {
  readonly violations: Violation[] = [];
  private readonly matchers: Matcher[];
  private readonly ajv: Ajv2020;
  private readonly validators = new Map<string, ValidateFunction>();

  constructor(
    private readonly doc: OpenApiDocument,
    private readonly options: { file?: string; metrics: boolean; log?: { error(obj: object, msg: string): void } },
  ) {
    const byRoute = new Map<string, Matcher>();
    for (const r of ROUTES) {
      if (r.only === 'metrics' && !options.metrics) continue;
      let m = byRoute.get(r.route);
      if (!m) byRoute.set(r.route, (m = matcher(r.route, false)));
      m.docs.set(r.method, r);
    }
    for (const u of UNDOCUMENTED) byRoute.set(u.route, matcher(u.route, true));
    this.matchers = [...byRoute.values()].sort((a, b) => b.weight - a.weight);
    this.ajv = new Ajv2020({ strict: false, allErrors: false });
    this.ajv.addFormat('date-time', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/);
    this.ajv.addFormat('date', /^\d{4}-\d\d-\d\d$/);
    this.ajv.addFormat('binary', true);
    this.ajv.addSchema({ $id: 'openapi.json', paths: doc.paths, components: doc.components } as object);
  }

  /** The request listener `listener`, with every answer it gives checked. */
  wrap(listener: (req: IncomingMessage, res: ServerResponse) => void, skip: (req: IncomingMessage) => boolean): (req: IncomingMessage, res: ServerResponse) => void {
    return (req, res) => {
      if (!skip(req)) this.watch(req, res);
      listener(req, res);
    };
  }

  private watch(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    let size = 0;
    let kept = true;
    let headHeaders: OutgoingHttpHeaders | readonly unknown[] | undefined;
    const keep = (chunk: unknown, encoding?: unknown) => {
      if (!kept || chunk === undefined || chunk === null || typeof chunk === 'function') return;
      const b = Buffer.isBuffer(chunk) ? chunk : typeof chunk === 'string' ? Buffer.from(chunk, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8') : Buffer.from(chunk as Uint8Array);
      size += b.length;
      if (size > MAX_BODY) {
        kept = false;
        chunks.length = 0;
      } else chunks.push(b);
    };
    const { write, end, writeHead } = res;
    res.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
      keep(chunk, rest[0]);
      return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
    } as ServerResponse['write'];
    res.end = function (this: ServerResponse, chunk?: unknown, ...rest: unknown[]) {
      keep(chunk, rest[0]);
      return (end as (...a: unknown[]) => ServerResponse).call(this, chunk, ...rest);
    } as ServerResponse['end'];
    res.writeHead = function (this: ServerResponse, ...args: unknown[]) {
      headHeaders = args.find((a) => typeof a === 'object' && a !== null) as OutgoingHttpHeaders | undefined;
      return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
    } as ServerResponse['writeHead'];
    res.once('close', () => {
      // The client went away before any answer (mid-upload, say): there is none to check.
      if (!res.headersSent) return;
      // An answer cut off (the client went away, or the stream was endless) has no whole body to check.
      const whole = kept && res.writableFinished;
      // Headers given to writeHead (fastify sends them so) are not all readable with getHeader.
      const header = (name: string) => headerValue(headHeaders, name) ?? (res.getHeader(name) === undefined ? undefined : String(res.getHeader(name)));
      const encoded = header('content-encoding') !== undefined;
      this.check(req.method ?? 'GET', req.url ?? '/', res.statusCode, header('content-type'), whole && !encoded ? Buffer.concat(chunks) : undefined, header);
    });
  }

  /** Checks one answer; public for the check's own test. */
  check(method: string, url: string, status: number, contentType: string | undefined, body: Buffer | undefined, header: (name: string) => string | undefined = () => undefined): Violation | undefined {
    let problem: { route: string | undefined; text: string } | undefined;
    try {
      problem = this.problem(method, url, status, contentType, body, header);
    } catch (err) {
      // A document the validator cannot compile is a fault of the document: reported, never thrown into the server.
      problem = { route: undefined, text: `the check itself failed: ${(err as Error).message}` };
    }
    if (problem === undefined) return undefined;
    const v: Violation = { method, url: url.slice(0, 300), status, contentType, route: problem.route, problem: problem.text };
    this.violations.push(v);
    this.options.log?.error({ openapi: v }, `answer off the OpenAPI document: ${method} ${v.url} ${status}: ${v.problem}`);
    if (this.options.file) fs.appendFileSync(this.options.file, `${JSON.stringify(v)}\n`);
    return v;
  }

  private problem(method: string, url: string, status: number, contentType: string | undefined, body: Buffer | undefined, header: (name: string) => string | undefined): { route: string | undefined; text: string } | undefined {
    let path = url.split('?')[0]!;
    // One trailing slash dropped, as fastify's router does (ignoreTrailingSlash): `/v1/web/algo//` is the wildcard's.
    if (path.length > 1 && path.endsWith('/')) path = path.slice(0, -1);
    const m = this.matchers.find((x) => x.regex.test(path));
    if (m?.skip) return undefined;
    const doc = m && (m.docs.get(method) ?? (method === 'HEAD' ? m.docs.get('GET') : undefined));
    if (!m || !doc) {
      // No operation here: only the router's own answers may come back.
      if (![400, 404, 405, 503].includes(status)) return { route: m?.route, text: `no documented operation ${method} for this path, yet a ${status}` };
      return this.errorBody(m?.route, status, contentType, body, '#/components/responses/Error' + status);
    }
    const operation = this.doc.paths[doc.paths[0]!]?.[doc.method.toLowerCase()];
    const response = operation?.responses[String(status)] as { $ref?: string; content?: Record<string, unknown> } | undefined;
    if (!response) return { route: m.route, text: `status ${status} is not among the documented answers of ${doc.method} ${doc.paths[0]} (${Object.keys(operation?.responses ?? {}).join(', ')})` };
    if (response.$ref) return this.errorBody(m.route, status, contentType, body, response.$ref);
    const content = response.content;
    const type = mediaType(contentType);
    const empty = body !== undefined && body.length === 0;
    if (method === 'HEAD' || status === 304 || empty) return undefined;
    if (!content) return body === undefined || body.length === 0 ? undefined : { route: m.route, text: `a ${status} of ${doc.method} ${doc.paths[0]} is documented without a body, yet one came (${type || 'no type'})` };
    const key = type in content ? type : '*/*' in content ? '*/*' : undefined;
    if (key === undefined) return { route: m.route, text: `Content-Type "${type}" is not among the documented types of this ${status} (${Object.keys(content).join(', ')})` };
    if (key !== 'application/json' || body === undefined) return undefined;
    const pointer = `openapi.json#/paths/${escape(doc.paths[0]!)}/${doc.method.toLowerCase()}/responses/${status}/content/${escape(key)}/schema`;
    const documented = this.validate(m.route, pointer, body);
    if (documented || !doc.strict || status !== 200) return documented;
    const { query, header: h } = doc.strict.unless;
    const q = url.indexOf('?');
    if (query && q >= 0 && new URLSearchParams(url.slice(q + 1)).get(query[0]) === query[1]) return undefined;
    if (h && header(h[0])?.toLowerCase() === h[1]) return undefined;
    return this.validate(m.route, `strict:${doc.operationId}`, body, doc.strict.schema);
  }

  private errorBody(route: string | undefined, status: number, contentType: string | undefined, body: Buffer | undefined, ref: string): { route: string | undefined; text: string } | undefined {
    const name = ref.split('/').pop()!;
    if (!(this.doc.components as { responses: Record<string, unknown> }).responses[name]) return { route, text: `status ${status} is no error status of errors.ts` };
    if (body === undefined || body.length === 0) return undefined; // HEAD, or cut off
    if (mediaType(contentType) !== 'application/json') return { route, text: `an error answer (${status}) whose Content-Type is "${mediaType(contentType)}", not the JSON envelope` };
    return this.validate(route, `openapi.json#/components/responses/${name}/content/application~1json/schema`, body);
  }

  private validate(route: string | undefined, pointer: string, body: Buffer, schema: object = { $ref: pointer }): { route: string | undefined; text: string } | undefined {
    let value: unknown;
    try {
      value = JSON.parse(body.toString('utf8'));
    } catch {
      return { route, text: 'a JSON answer that is not JSON' };
    }
    let v = this.validators.get(pointer);
    if (!v) this.validators.set(pointer, (v = this.ajv.compile(schema)));
    if (v(value)) return undefined;
    const e = v.errors?.[0];
    return { route, text: `the body does not match its schema: ${e?.instancePath || '(root)'} ${e?.message ?? ''} (${e?.schemaPath ?? ''}); body: ${body.toString('utf8').slice(0, 300)}` };
  }
}

/** A JSON pointer segment, as a URI fragment holds it. */
const escape = (s: string) => encodeURIComponent(s.replace(/~/g, '~0').replace(/\//g, '~1'));
