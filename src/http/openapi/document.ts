import { ERROR_CODES } from '../../errors.ts';
import { CSRF_HEADER, SESSION_COOKIE } from '../../auth/sessions.ts';
import { PATH_PARAMS, ROUTES, type Answer, type Param, type RouteDoc } from './routes.ts';
import { codesOf, ERROR_STATUSES, SCHEMAS, type Schema } from './schemas.ts';

/**
 * The OpenAPI 3.1 document of the API, assembled from the route table (routes.ts) and the
 * schemas (schemas.ts); served at GET /v1/openapi.json (docs/openapi.md).
 */

export interface DocumentOptions {
  /** GET /metrics is on the public port (ALGOHOST_METRICS_TOKEN is set). */
  metrics: boolean;
}

export type OpenApiDocument = Record<string, unknown> & { paths: Record<string, Record<string, Operation>> };
type Operation = Record<string, unknown> & { responses: Record<string, unknown> };

const TAGS: { name: string; description: string }[] = [
  { name: 'Calls', description: 'Calling algorithms (spec 4.1), synchronously or asynchronously.' },
  { name: 'Data', description: 'Hosted data and connected storage (spec 4.2-4.9): directories and files.' },
  { name: 'Algorithms', description: 'Algorithm records: create, change, delete, search.' },
  { name: 'Builds', description: 'Sources and builds.' },
  { name: 'Versions', description: 'Published versions.' },
  { name: 'Environments', description: 'The languages and starter templates (the original API\'s environments).' },
  { name: 'Keys', description: 'API keys and what they may do (docs/auth.md).' },
  { name: 'Connected accounts', description: 'External storage accounts (docs/connectors.md).' },
  { name: 'Usage and limits', description: 'What you used, and the limits in force (docs/usage.md, docs/limits.md).' },
  { name: 'Events', description: 'Your events as a live stream (docs/events.md).' },
  { name: 'Webhooks', description: 'Event deliveries to your URLs (docs/events.md).' },
  { name: 'Triggers', description: 'Algorithms run on your events (docs/events.md).' },
  { name: 'Sessions', description: 'The web console\'s sign-in (docs/console.md).' },
  { name: 'Server', description: 'The server itself.' },
  { name: 'Retired', description: 'Unversioned routes of the original service (spec 9.1).' },
];

const REASONS: Record<number, string> = {
  400: 'Bad request', 401: 'No or bad credentials', 403: 'Not allowed', 404: 'Not found', 405: 'Method not allowed', 408: 'Request timeout', 409: 'Conflict',
  410: 'Gone', 413: 'Too large', 415: 'Unsupported media type', 416: 'Range not satisfiable', 422: 'Idempotency key reused',
  429: 'Too many requests', 431: 'Headers too large', 500: 'Server error', 502: 'Storage error', 503: 'Unavailable', 504: 'Storage timeout',
};

/** `components.responses.ErrorNNN`: the envelope, its code one of that status's. */
function errorResponse(status: number): Record<string, unknown> {
  const headers: Record<string, unknown> = {
    'X-Error-Message': { description: 'The error\'s message (percent-encoded outside printable ASCII).', schema: { type: 'string' } },
  };
  if (status === 401) headers['WWW-Authenticate'] = { description: '`Simple realm="algohost"` (git\'s routes: Basic; /metrics: Bearer).', schema: { type: 'string' } };
  if (status === 429 || status === 503) headers['Retry-After'] = { description: 'Seconds to wait.', schema: { type: 'integer' } };
  if (status === 429) {
    headers['RateLimit-Policy'] = { description: 'draft-ietf-httpapi-ratelimit-headers: `"calls";q=N;w=60` (calls a minute), `"requests";q=N;w=60` (every request a minute) or `"compute";q=N;w=S` (the month\'s compute seconds).', schema: { type: 'string' } };
    headers.RateLimit = { description: 'draft-ietf-httpapi-ratelimit-headers: `"calls";r=N;t=S` (or `"requests"`, `"compute"`).', schema: { type: 'string' } };
  }
  const codes = codesOf(status);
  return {
    description: `${REASONS[status] ?? 'Error'}: ${codes.map((c) => `\`${c}\``).join(', ')}.`,
    headers,
    content: {
      'application/json': {
        schema: {
          allOf: [
            { $ref: '#/components/schemas/ErrorEnvelope' },
            { type: 'object', properties: { error: { type: 'object', properties: { code: { enum: codes } } } } },
          ],
        },
      },
    },
  };
}

const pathParams = (path: string): string[] => [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!);

function parameter(p: Param): Record<string, unknown> {
  return { name: p.name, in: p.in, description: p.description, required: p.required ?? false, schema: p.schema };
}

function answer(a: Answer): Record<string, unknown> {
  const out: Record<string, unknown> = { description: a.description };
  if (a.headers) out.headers = Object.fromEntries(Object.entries(a.headers).map(([name, h]) => [name, { description: h.description, schema: h.schema ?? { type: 'string' } }]));
  if (a.content) out.content = Object.fromEntries(Object.entries(a.content).map(([type, schema]) => [type, { schema }]));
  return out;
}

const SECURITY: Record<RouteDoc['auth'], unknown[]> = {
  key: [{ Simple: [] }, { ConsoleSession: [], CsrfToken: [] }],
  none: [],
  bearer: [{ MetricsToken: [] }],
};

/**
 * What Node's HTTP parser answers before any route is found (clientErrors.ts), so any operation
 * may: a head that took too long (408), headers over the size limit (431). (Its 400,
 * `malformed_request`, is among every operation's 400s already.)
 */
const BEFORE_ROUTING = [408, 431];

/**
 * What fastify answers, before the route's own code, to a request with a body of a method whose
 * bodies it reads (all but GET and HEAD), whether the route takes a body or not: over the body
 * limit (413), of a type no parser of the route's takes (415). (Not JSON where JSON was said: 400.)
 */
const BODY_READ = (method: string) => (method === 'GET' || method === 'HEAD' ? [] : [413, 415]);

function operation(r: RouteDoc, path: string, index: number): Operation {
  const op: Operation = {
    operationId: r.operationIds?.[index] ?? (index === 0 ? r.operationId : `${r.operationId}${index + 1}`),
    tags: [r.tag],
    summary: r.summary,
    ...(r.description ? { description: r.description } : {}),
    ...(r.deprecated ? { deprecated: true } : {}),
    security: SECURITY[r.auth],
    responses: {},
  };
  const params: Record<string, unknown>[] = pathParams(path).map((name) => {
    const known = PATH_PARAMS[name];
    if (!known) throw new Error(`openapi: path parameter {${name}} of ${path} has no description in PATH_PARAMS`);
    return { name, in: 'path', required: true, description: known.description, schema: known.schema ?? { type: 'string' } };
  });
  params.push(...(r.parameters ?? []).map(parameter));
  if (params.length > 0) op.parameters = params;
  if (r.body) {
    op.requestBody = {
      required: r.body.required,
      ...(r.body.description ? { description: r.body.description } : {}),
      content: Object.fromEntries(Object.entries(r.body.content).map(([type, schema]) => [type, { schema }])),
    };
  }
  for (const [status, a] of Object.entries(r.answers)) op.responses[status] = answer(a);
  for (const status of [...r.errors, ...BODY_READ(r.method), ...BEFORE_ROUTING]) op.responses[String(status)] ??= { $ref: `#/components/responses/Error${status}` };
  return op;
}

/** The document (a fresh object: callers may keep or change it). */
export function openapiDocument(options: DocumentOptions): OpenApiDocument {
  const paths: Record<string, Record<string, Operation>> = {};
  for (const r of ROUTES) {
    if (r.only === 'metrics' && !options.metrics) continue;
    r.paths.forEach((path, i) => {
      const item = (paths[path] ??= {});
      const method = r.method.toLowerCase();
      if (item[method]) throw new Error(`openapi: ${r.method} ${path} is described twice`);
      item[method] = operation(r, path, i);
    });
  }
  const responses = Object.fromEntries(ERROR_STATUSES.map((s) => [`Error${s}`, errorResponse(s)]));
  return {
    openapi: '3.1.0',
    info: {
      title: 'algohost API',
      version: '1',
      summary: 'Call algorithms, manage them, and keep data in hosted or connected storage.',
      description: [
        'Every route but the few marked otherwise takes an API key: `Authorization: Simple <key>` (keys start with `sim`). The web console sends its session cookie and `X-CSRF-Token` instead.',
        'Errors are JSON envelopes `{"error": {"code", "message", "id"}}` with a stable code (docs/errors.md); an algorithm\'s own failure is a 200 envelope with `error` (spec 7).',
        'This document is served by the server at GET /v1/openapi.json, with no key needed.',
      ].join('\n\n'),
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    servers: [{ url: '/', description: 'This server.' }],
    tags: TAGS,
    security: SECURITY.key,
    paths,
    components: {
      schemas: SCHEMAS as Record<string, Schema>,
      responses,
      securitySchemes: {
        Simple: {
          type: 'apiKey',
          in: 'header',
          name: 'Authorization',
          description: 'An API key, sent as `Authorization: Simple <key>`: the word `Simple`, a space, then the key (28 characters starting with `sim`). A bare key is refused.',
        },
        ConsoleSession: { type: 'apiKey', in: 'cookie', name: SESSION_COOKIE, description: 'The web console\'s session (POST /v1/session); goes with X-CSRF-Token.' },
        CsrfToken: { type: 'apiKey', in: 'header', name: CSRF_HEADER, description: 'The session\'s csrf_token, on every request the session authenticates.' },
        MetricsToken: { type: 'http', scheme: 'bearer', description: 'ALGOHOST_METRICS_TOKEN (docs/metrics.md).' },
      },
    },
    'x-error-codes': ERROR_CODES,
  };
}
