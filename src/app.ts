import crypto from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import injectRequest, { type DispatchFunc } from 'light-my-request';
import { tracedPrincipal, type Principal } from './auth/principal.ts';
import type { Services } from './services.ts';
import { AppError } from './errors.ts';
import { healthReport } from './health.ts';
import { sendError } from './http/errorHandler.ts';
import { clientErrorHandler } from './http/clientErrors.ts';
import { DATA_METHODS, dataRoutes, methodNotAllowed } from './http/dataRoutes.ts';
import { isDataPath, malformedEncoding } from './data/paths.ts';
import { keyRoutes } from './http/keyRoutes.ts';
import { algorithmRoutes } from './http/algorithmRoutes.ts';
import { environmentRoutes } from './http/environmentRoutes.ts';
import { gitRoutes } from './http/gitRoutes.ts';
import { callRoutes, webPreflight } from './http/callRoutes.ts';
import { DirectCalls } from './http/directCalls.ts';
import { Lingering } from './http/linger.ts';
import { capHeaderPhase } from './http/headerCap.ts';
import { connectorRoutes } from './http/connectorRoutes.ts';
import { usageRoutes } from './http/usageRoutes.ts';
import { triggerRoutes } from './http/triggerRoutes.ts';
import { eventRoutes } from './http/eventRoutes.ts';
import { subscriptionRoutes } from './http/subscriptionRoutes.ts';
import { EventFeed } from './events/feed.ts';
import { IdempotencyKeys } from './http/idempotency.ts';
import { downloadOf, passwordRoutes, refuseCrossSite, sessionRoutes } from './http/sessionRoutes.ts';
import { CSRF_HEADER, DOWNLOAD_PARAM, SESSION_COOKIE, readCookie } from './auth/sessions.ts';
import { consoleRoutes } from './console/routes.ts';
import { SDK_ROUTES, type CallContext } from './algorithms/hostRequests.ts';
import { metricsRoutes } from './http/metrics.ts';
import { checkAnswers, collectRoutes, openapiRoutes } from './http/openapi/serve.ts';
import { parseTraceparent, requestSpan, setRequestSpan, traceBindings, type Span } from './tracing.ts';

declare module 'fastify' {
  interface FastifyInstance {
    /** The direct call path (http/directCalls.ts), for its count of requests answered. */
    directCalls: DirectCalls;
  }
  interface FastifyRequest {
    principal?: Principal;
    /** Set on requests an algorithm makes through the SDK while it runs. */
    callContext?: CallContext;
  }
}

/** Carries the one-time id of a request made from inside an algorithm (hostRequests.ts). */
const INTERNAL_HEADER = 'x-algohost-internal';

export interface AppOptions {
  logger?: FastifyServerOptions['logger'] | FastifyServerOptions['loggerInstance'];
  /** In a cluster, the node's role, said by /health. */
  role?: 'api';
}

const REQ_PREFIX = crypto.randomBytes(4).toString('hex');
let reqCounter = 0;
/** Unique per process start (a random prefix) and cheap per request (a counter). */
const nextRequestId = () => `req-${REQ_PREFIX}${(reqCounter = (reqCounter + 1) >>> 0).toString(16).padStart(8, '0')}`;

/** Never contain a key in a log line, whatever a future serializer might add. */
export const LOG_REDACT = [
  'req.headers.authorization', 'headers.authorization', 'req.headers.cookie', 'headers.cookie', 'req.headers["x-csrf-token"]', 'headers["x-csrf-token"]',
  'api_key', '*.api_key', 'cred_data', '*.cred_data', 'credentials', '*.credentials',
  'password', '*.password', 'current_password', '*.current_password', 'csrf_token', '*.csrf_token',
];

/** A download ticket in a query (`?download=EXP.MAC`) is a credential for a minute. */
const TICKET = new RegExp(`([?&]${DOWNLOAD_PARAM}=)[^&#]+`, 'g');

/** A request's URL as the log shows it: with a download ticket's value replaced. */
export function logUrl(url: string): string {
  return url.includes(`${DOWNLOAD_PARAM}=`) ? url.replace(TICKET, '$1[Redacted]') : url;
}

interface LoggedRequest {
  method?: string;
  url?: string;
  headers?: Record<string, string | string[] | undefined>;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number };
}

/**
 * The logger options every server logger is made with: the paths above redacted, and
 * fastify's request line (the same fields) with its URL passed through `logUrl`. A logger's
 * own serializers take the place of fastify's, on both the fastify and the direct path.
 */
export const LOG_OPTIONS = {
  redact: LOG_REDACT,
  serializers: {
    req: (req: LoggedRequest) => ({
      method: req.method,
      url: req.url === undefined ? undefined : logUrl(req.url),
      version: req.headers?.['accept-version'],
      host: req.host,
      remoteAddress: req.ip,
      remotePort: req.socket?.remotePort,
    }),
  },
};

/**
 * Ends a request's server span when its answer has gone, or the connection closed first: a
 * response emits 'close' either way (after 'finish' when the answer went), so one listener
 * serves, where one each for 'finish' and 'close' cost ~1 µs more a request.
 */
function serverSpan(span: Span, req: IncomingMessage, res: ServerResponse): void {
  span.set('http.request.method', req.method);
  if (req.headers[INTERNAL_HEADER] !== undefined) span.set('algohost.sdk', true);
  res.once('close', () => {
    const route = span.route ?? 'unmatched';
    span.rename(`${req.method} ${route}`);
    span.set('http.route', route);
    span.set('http.response.status_code', res.statusCode);
    if (res.statusCode >= 500) span.fail(`answered ${res.statusCode}`);
    else if (!res.writableFinished) span.fail('the connection closed before the answer was sent');
    span.end();
  });
}

/**
 * Builds the HTTP app without listening: `main` listens on the configured port, tests on
 * port 0. Routes are thin; all decisions live in the services.
 */
export function buildApp(services: Services, options: AppOptions = {}): FastifyInstance {
  const loggerOpt = options.logger ?? false;
  const isInstance = typeof loggerOpt === 'object' && loggerOpt !== null && 'child' in loggerOpt;
  const app = Fastify({
    ...(isInstance ? { loggerInstance: loggerOpt as FastifyServerOptions['loggerInstance'] } : { logger: loggerOpt as FastifyServerOptions['logger'] }),
    genReqId: nextRequestId,
    // A request's lines carry its trace (docs/traces.md): its span, given it by the listener below.
    childLoggerFactory: (logger, bindings, opts, rawReq) => {
      const span = requestSpan(rawReq);
      return logger.child(span === undefined ? bindings : { ...bindings, ...traceBindings(span) }, opts);
    },
    // req.ip, req.protocol and req.host from the trusted proxies' X-Forwarded-* (ALGOHOST_TRUST_PROXY).
    trustProxy: services.config.trustProxy,
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 1000 },
    bodyLimit: 1024 * 1024,
    return503OnClosing: false, // answered below, in our envelope
    forceCloseConnections: 'idle',
    // Errors fastify raises before routing (a malformed URL) get our envelope too.
    frameworkErrors: (err, req, reply) =>
      sendError(
        err.code === 'FST_ERR_BAD_URL' ? malformedEncoding() : err,
        req,
        reply,
      ),
    // And so do requests Node's HTTP parser refuses before either (a control character in a
    // header, headers too large): answered and logged with a request id of their own.
    clientErrorHandler: clientErrorHandler(nextRequestId),
  });

  // Every route, as registered: the OpenAPI document is held to this set (docs/openapi.md).
  collectRoutes(app);

  // While draining, requests arriving on kept-alive connections are turned away cleanly.
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });

  app.setErrorHandler((err, req, reply) => sendError(err, req, reply));
  app.setNotFoundHandler((req, reply) => {
    const path = (req.raw.url ?? '').split('?')[0]!;
    if (isDataPath(path)) {
      reply.header('allow', DATA_METHODS.join(', '));
      return sendError(methodNotAllowed(req.method), req, reply);
    }
    return sendError(new AppError('route_not_found', `no route ${req.method} ${path.slice(0, 200)}`), req, reply);
  });
  // Hooks on every request are synchronous (callback style): no promise per request and hook.
  app.addHook('onSend', (_req, reply, payload, done) => {
    // While draining, a response finishing a request in flight also closes its connection.
    if (closing) reply.header('connection', 'close');
    reply.header('x-content-type-options', 'nosniff');
    // File bodies are users' content: never let a browser run them in our origin.
    if (reply.getHeader('x-data-type') === 'file') reply.header('content-security-policy', "default-src 'none'; sandbox");
    done(null, payload);
  });

  app.addHook('onRequest', (req, reply, done) => {
    // What background work (webhooks, triggers) paces itself by (concurrency.ts Pressure).
    services.pressure.request();
    // Requests from algorithms belong to calls in flight, which the drain lets finish.
    if (!closing || req.headers[INTERNAL_HEADER] !== undefined) return done();
    reply.header('connection', 'close');
    done(new AppError('shutting_down', 'the server is shutting down; retry shortly'));
  });

  // Requests counted for Prometheus, and GET /metrics behind its token (docs/metrics.md).
  metricsRoutes(app, services.metrics, services.config.metricsToken);

  app.get('/health', async (_req, reply) => {
    const { status, body } = await healthReport(services, options.role ? { role: options.role } : {});
    reply.code(status);
    return body;
  });

  // The API's OpenAPI 3.1 description (no key needed; docs/openapi.md).
  openapiRoutes(app, services.config);

  // Routes retired by the contract (spec 9.1): say where the same operation lives now.
  const deprecated = (prefix: string, to: string) =>
    app.all(`${prefix}/*`, async (req, reply) => {
      const rest = (req.raw.url ?? '').slice(prefix.length);
      return sendError(new AppError('deprecated_route', `this unversioned route was retired; use ${to}${rest.split('?')[0]}`), req, reply);
    });
  deprecated('/api', '/v1');
  deprecated('/data', '/v1/data');

  // The outbox of events, read for the live streams of this node (docs/events.md).
  const feed = new EventFeed(services.store, app.log);
  feed.keepFor(services.config.eventRetentionH * 3_600_000);
  app.addHook('preClose', async () => feed.close());
  // Idempotency-Key answers (docs/events.md#idempotency-key): the table is shared, every node sweeps it.
  const idempotency = new IdempotencyKeys(services.store, app.log);
  const stopKeySweep = idempotency.sweepEvery();
  app.addHook('onClose', async () => stopKeySweep());
  // This node sends webhooks too (each delivery is claimed by one node; docs/events.md).
  const dispatcher = services.webhooks.start(app.log);
  app.addHook('onClose', async () => dispatcher.stop());
  // And runs triggers (each run is claimed by one node; docs/events.md).
  const runner = services.triggers.start(app.log);
  app.addHook('onClose', async () => runner.stop());

  app.register(webPreflight);
  // Console sign-in: user name and password for a session cookie (no key needed to ask).
  app.register(sessionRoutes, { sessions: services.sessions });
  // The web console's page and files (console/, docs/console.md).
  app.register(consoleRoutes);
  // Algorithm sources over git: HTTP Basic (user name, API key), as git sends it.
  app.register(gitRoutes, { repos: services.git, keys: services.keys, admitRequest: (principal) => services.limits.admitRequest(principal) });

  // Everything below needs an API key. Authentication runs before any body is read.
  app.register(async (authed) => {
    authed.decorateRequest('principal', undefined);
    authed.decorateRequest('callContext', undefined);
    authed.addHook('onRequest', async (req) => {
      const internal = req.headers[INTERNAL_HEADER];
      if (internal !== undefined) {
        // Only the server writes this header, on requests it runs itself; an unknown id is
        // someone guessing from outside.
        const ctx = typeof internal === 'string' ? services.calls.internal.lookup(internal) : undefined;
        if (!ctx) throw new AppError('invalid_authorization', 'this request header is reserved for the server');
        // Whatever the path said, an algorithm reaches calls and data only.
        if (!SDK_ROUTES.has(req.routeOptions.url ?? '')) throw new AppError('forbidden', 'algorithms may only call algorithms and use data');
        req.principal = tracedPrincipal(ctx.principal, requestSpan(req.raw));
        req.callContext = ctx;
        return;
      }
      const authorization = req.headers.authorization;
      if (authorization === undefined) {
        // The web console: its session cookie, with the session's CSRF token (sessionRoutes.ts).
        const cookie = readCookie(req.headers.cookie, SESSION_COOKIE);
        if (cookie !== undefined) {
          refuseCrossSite(req);
          const header = req.headers[CSRF_HEADER];
          const csrf = typeof header === 'string' ? header : undefined;
          // A download link's GET brings a ticket in place of the header (sessions.ts).
          const download = csrf === undefined ? downloadOf(req) : undefined;
          req.principal = tracedPrincipal(await services.sessions.authenticate(cookie, csrf, download), requestSpan(req.raw));
          req.sessionCookie = cookie;
          req.byDownloadLink = download !== undefined;
          // The user's requests a minute (docs/limits.md, "Requests"), before any body is read.
          await services.limits.admitRequest(req.principal);
          return;
        }
      }
      req.principal = tracedPrincipal(await services.keys.authenticate(authorization), requestSpan(req.raw));
      await services.limits.admitRequest(req.principal);
    });
    await authed.register(passwordRoutes, { sessions: services.sessions });
    await authed.register(keyRoutes, { keys: services.keys, users: services.users });
    await authed.register(algorithmRoutes, { registry: services.algorithms, builds: services.builds, releases: services.releases });
    await authed.register(environmentRoutes, { environments: services.environments });
    await authed.register(callRoutes, { calls: services.calls, asyncCalls: services.asyncCalls, idempotency });
    await authed.register(connectorRoutes, { accounts: services.accounts, users: services.users });
    await authed.register(usageRoutes, { usage: services.usage, users: services.users, limits: services.limits, storedBytes: (userId) => services.hosted.storedBytes(userId) });
    await authed.register(eventRoutes, { feed, users: services.users });
    await authed.register(subscriptionRoutes, { webhooks: services.webhooks, users: services.users });
    await authed.register(triggerRoutes, { triggers: services.triggers, users: services.users });
    await authed.register(dataRoutes, { data: services.data, maxUploadBytes: services.config.maxUploadBytes, idempotency });
  });
  // Plain warm calls from clients skip fastify's per-request machinery (callRoutes.ts): the
  // server's request listener answers them, and hands fastify everything else.
  const fastify = app.server.listeners('request')[0] as (req: IncomingMessage, res: ServerResponse) => void;
  const direct = new DirectCalls({
    calls: services.calls,
    authenticate: (authorization, at) => services.keys.authenticate(authorization, at),
    admitRequest: (principal) => services.limits.admitRequest(principal),
    cachedPrincipal: (authorization, at) => services.keys.cachedPrincipal(authorization, at),
    version: () => services.store.version(),
    fallback: fastify,
    closing: () => closing,
    requestId: nextRequestId,
    log: app.log,
    trustProxy: services.config.trustProxy,
    metrics: services.metrics,
  });
  app.decorate('directCalls', direct);
  const lingering = new Lingering();
  app.server.on('connection', lingering.onConnection);
  app.addHook('preClose', async () => lingering.closeAll());
  app.server.removeListener('request', fastify);
  const tracing = services.tracing;
  if (tracing.exporting) {
    // The server span is named after the route fastify found (the direct path's is set below).
    app.addHook('onRequest', (req, _reply, done) => {
      const span = requestSpan(req.raw);
      if (span !== undefined) span.route = req.routeOptions.url;
      done();
    });
  }
  const dispatch = (req: IncomingMessage, res: ServerResponse, span: Span) => {
    if (closing || req.headers[INTERNAL_HEADER] !== undefined || !DirectCalls.takes(req)) fastify(req, res);
    else {
      span.route = DirectCalls.ROUTE;
      direct.handle(req, res);
    }
  };
  // Every request has its span (docs/traces.md): the caller's traceparent continued, or a new
  // trace; its log lines carry the trace id, its call's job carries it on, and its principal
  // (a copy, tracedPrincipal) gives it to the events its changes raise. What else it starts (a build)
  // is handed the span by its route: there is no ambient "current span" (no AsyncLocalStorage).
  app.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const span = tracing.start('HTTP', 'server', parseTraceparent(req.headers.traceparent));
    setRequestSpan(req, span);
    if (span.recording) serverSpan(span, req, res);
    dispatch(req, res, span);
  });
  // A testing aid: every answer checked against the OpenAPI document (ALGOHOST_TEST_OPENAPI_CHECK).
  checkAnswers(app, services.config, (req) => req.headers[INTERNAL_HEADER] !== undefined);
  capHeaderPhase(app.server, services.config.trustProxy);
  // Requests from inside algorithms run through these same routes, as their call's identity.
  // Straight into the server's request handler rather than app.inject, which refuses once a
  // drain has begun: calls still running during a SIGTERM drain keep their SDK.
  services.calls.internal.gateway = async (id, r) => {
    const handler = app.server.listeners('request')[0] as DispatchFunc;
    const res = await injectRequest(handler, { method: r.method as 'GET', url: r.url, headers: { ...r.headers, [INTERNAL_HEADER]: id }, payload: r.body });
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') headers[k] = v;
    return { status: res.statusCode, headers, body: res.rawPayload };
  };
  return app;
}
