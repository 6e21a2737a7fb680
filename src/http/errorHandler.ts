import type { FastifyReply, FastifyRequest } from 'fastify';
import { errorAnswer } from './answers.ts';

/** Fastify's error handler: the answer answers.ts makes of the error, sent through the reply. */
export function sendError(err: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const a = errorAnswer(err, request.id, reply.hasHeader('www-authenticate'));
  if (a.logged !== undefined) request.log.error({ err: a.logged }, 'request failed');
  reply.code(a.status);
  for (const [name, value] of a.headers) reply.header(name, value);
  return reply.type('application/json').send(request.method === 'HEAD' ? undefined : a.body);
}
