import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Config } from '../../config.ts';
import { openapiDocument } from './document.ts';
import { AnswerCheck } from './check.ts';

/** A route as the app registered it: what the route-set test compares with the document. */
export interface RegisteredRoute {
  method: string;
  url: string;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Every route registered, as its `onRoute` hook saw it (test/openapi.test.ts holds the document to it). */
    registeredRoutes: RegisteredRoute[];
    /** The answer check, when ALGOHOST_TEST_OPENAPI_CHECK is on (check.ts). */
    answerCheck: AnswerCheck | undefined;
  }
}

/** The hook that records every route, added before any route is. */
export function collectRoutes(app: FastifyInstance): void {
  const routes: RegisteredRoute[] = [];
  app.decorate('registeredRoutes', routes);
  app.addHook('onRoute', (r) => {
    for (const method of [r.method].flat()) routes.push({ method, url: r.url });
  });
}

/** `GET /v1/openapi.json` (no key needed): the document, made once. */
export function openapiRoutes(app: FastifyInstance, config: Config): void {
  let text: string | undefined;
  app.get('/v1/openapi.json', async (_req, reply) => {
    text ??= JSON.stringify(openapiDocument({ metrics: config.metricsToken !== undefined }));
    return reply.type('application/json; charset=utf-8').header('cache-control', 'no-cache').send(text);
  });
}

/** Where the check writes what it found (the test helpers read it): in the server's home. */
export const VIOLATIONS_FILE = 'openapi-violations.jsonl';

/**
 * With ALGOHOST_TEST_OPENAPI_CHECK, the server's request listener wrapped so every answer is
 * checked (check.ts). Called once the listener is final (buildApp's last step). Requests the
 * server makes to itself for running algorithms (`skip`) are answered to no client: not checked.
 */
export function checkAnswers(app: FastifyInstance, config: Config, skip: (req: IncomingMessage) => boolean): void {
  if (!config.testOpenapiCheck) {
    app.decorate('answerCheck', undefined);
    return;
  }
  const metrics = config.metricsToken !== undefined;
  const check = new AnswerCheck(openapiDocument({ metrics }), { metrics, file: path.join(config.home, VIOLATIONS_FILE), log: app.log });
  app.decorate('answerCheck', check);
  const [listener] = app.server.listeners('request') as ((req: IncomingMessage, res: ServerResponse) => void)[];
  app.server.removeListener('request', listener!);
  app.server.on('request', check.wrap(listener!, skip));
}
