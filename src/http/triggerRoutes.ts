import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AppError } from '../errors.ts';
import type { UserService } from '../auth/users.ts';
import type { Triggers } from '../events/triggers.ts';
import { ownBusiness } from './ownBusiness.ts';

interface UserParams {
  username: string;
}
interface TriggerParams extends UserParams {
  id: string;
}

/**
 * A user's triggers (docs/events.md): create (201), list, read, change, delete, and list a
 * trigger's runs. The user's own business, like keys and subscriptions: the user only, with a
 * key that may manage (`allow_algo_management`).
 */
export async function triggerRoutes(app: FastifyInstance, opts: { triggers: Triggers; users: UserService }): Promise<void> {
  const { triggers, users } = opts;
  const owner = (req: FastifyRequest<{ Params: UserParams }>) => ownBusiness(req, users, 'manage', 'triggers');
  const base = '/v1/users/:username/triggers';

  app.post<{ Params: UserParams }>(base, async (req, reply) => {
    const { principal, ...user } = await owner(req);
    reply.code(201);
    return triggers.create(principal, user, req.body);
  });
  app.get<{ Params: UserParams }>(base, async (req) => ({ results: await triggers.list((await owner(req)).id) }));
  app.get<{ Params: TriggerParams }>(`${base}/:id`, async (req) => triggers.get((await owner(req)).id, req.params.id));
  app.patch<{ Params: TriggerParams }>(`${base}/:id`, async (req) => {
    const { principal, ...user } = await owner(req);
    return triggers.update(principal, user, req.params.id, req.body);
  });
  app.delete<{ Params: TriggerParams }>(`${base}/:id`, async (req, reply) => {
    await triggers.remove((await owner(req)).id, req.params.id);
    reply.code(204);
  });
  app.get<{ Params: TriggerParams; Querystring: Record<string, unknown> }>(`${base}/:id/runs`, async (req) => {
    const limit = req.query.limit === undefined ? 50 : Number(req.query.limit);
    if (!Number.isInteger(limit) || limit < 1 || limit > 200) throw new AppError('invalid_query', 'limit: a whole number from 1 to 200');
    return { results: await triggers.runs((await owner(req)).id, req.params.id, limit) };
  });
}
