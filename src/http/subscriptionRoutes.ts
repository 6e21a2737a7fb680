import { ownBusiness } from './ownBusiness.ts';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AppError } from '../errors.ts';
import type { UserService } from '../auth/users.ts';
import type { Webhooks } from '../events/webhooks.ts';

interface UserParams {
  username: string;
}
interface SubParams extends UserParams {
  id: string;
}
interface DeliveryParams extends SubParams {
  delivery: string;
}

/**
 * A user's webhook subscriptions (docs/events.md): create (201, with its secret shown once),
 * list, read, change, delete, rotate the secret, send a test event, list the deliveries with
 * their attempts, send one again. Like keys, the user's own business: the user only, with a key
 * that may manage (`allow_algo_management`).
 */
export async function subscriptionRoutes(app: FastifyInstance, opts: { webhooks: Webhooks; users: UserService }): Promise<void> {
  const { webhooks, users } = opts;
  const owner = async (req: FastifyRequest<{ Params: UserParams }>) => {
    const { id, username } = await ownBusiness(req, users, 'manage', 'subscriptions');
    return { id, username };
  };
  const base = '/v1/users/:username/subscriptions';

  app.post<{ Params: UserParams }>(base, async (req, reply) => {
    const user = await owner(req);
    const { subscription, secret } = await webhooks.create(user, req.body);
    reply.code(201);
    return { ...subscription, secret };
  });
  app.get<{ Params: UserParams }>(base, async (req) => {
    const user = await owner(req);
    return { results: await webhooks.list(user.id) };
  });
  app.get<{ Params: SubParams }>(`${base}/:id`, async (req) => webhooks.get((await owner(req)).id, req.params.id));
  app.patch<{ Params: SubParams }>(`${base}/:id`, async (req) => webhooks.update(await owner(req), req.params.id, req.body));
  app.delete<{ Params: SubParams }>(`${base}/:id`, async (req, reply) => {
    await webhooks.remove((await owner(req)).id, req.params.id);
    reply.code(204);
  });
  app.post<{ Params: SubParams }>(`${base}/:id/secret`, async (req) => {
    const { subscription, secret } = await webhooks.rotate((await owner(req)).id, req.params.id);
    return { ...subscription, secret };
  });
  app.post<{ Params: SubParams }>(`${base}/:id/test`, async (req, reply) => {
    reply.code(202);
    // Its delivery continues the request's trace (docs/traces.md).
    return webhooks.test(await owner(req), req.params.id, req.principal?.traceparent);
  });
  app.get<{ Params: SubParams; Querystring: Record<string, unknown> }>(`${base}/:id/deliveries`, async (req) => {
    const limit = req.query.limit === undefined ? 50 : Number(req.query.limit);
    if (!Number.isInteger(limit) || limit < 1 || limit > 200) throw new AppError('invalid_query', 'limit: a whole number from 1 to 200');
    return { results: await webhooks.deliveries((await owner(req)).id, req.params.id, limit) };
  });
  app.post<{ Params: DeliveryParams }>(`${base}/:id/deliveries/:delivery/redeliver`, async (req, reply) => {
    reply.code(202);
    return webhooks.redeliver((await owner(req)).id, req.params.id, req.params.delivery);
  });
}
