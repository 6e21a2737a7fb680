import { ownBusiness } from './ownBusiness.ts';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { KeyService } from '../auth/keyService.ts';
import type { UserService } from '../auth/users.ts';
import type { Principal } from '../auth/principal.ts';
import { checkObject } from './body.ts';
import type { CreatedKey, KeyRecord, Page, WhoAmI } from '../../client/src/types.ts';

interface UserParams {
  username: string;
}
interface KeyParams extends UserParams {
  id: string;
}

/**
 * A user's own API keys. Managing keys needs a key with `allow_algo_management` (the default
 * key has it), and a key can only grant permissions it holds itself.
 */
export async function keyRoutes(app: FastifyInstance, opts: { keys: KeyService; users: UserService }): Promise<void> {
  const { keys, users } = opts;

  async function owner(req: FastifyRequest<{ Params: UserParams }>): Promise<{ userId: number; principal: Principal }> {
    const { id, principal } = await ownBusiness(req, users, 'manage', 'keys');
    return { userId: id, principal };
  }

  const body = (req: FastifyRequest) => checkObject(req.body, ['name', 'permissions']);

  // Who this key belongs to and what it may do: clients (the algo CLI) need the user name for
  // the /v1/users/<you>/... routes. Any valid key may ask; it learns nothing it did not hold.
  app.get('/v1/user', async (req) => {
    const principal = req.principal!;
    return { username: principal.username, key_id: principal.keyId, permissions: principal.permissions } satisfies WhoAmI;
  });

  app.get<{ Params: UserParams }>('/v1/users/:username/keys', async (req) => {
    const { userId } = await owner(req);
    return { results: await keys.list(userId), marker: null, next_link: null } satisfies Page<KeyRecord>;
  });

  app.post<{ Params: UserParams }>('/v1/users/:username/keys', async (req, reply) => {
    const { userId, principal } = await owner(req);
    const { record, apiKey } = await keys.create(userId, body(req), principal.permissions);
    return reply.code(201).send({ ...record, api_key: apiKey } satisfies CreatedKey);
  });

  app.get<{ Params: KeyParams }>('/v1/users/:username/keys/:id', async (req): Promise<KeyRecord> => {
    const { userId } = await owner(req);
    return keys.get(userId, req.params.id);
  });

  app.patch<{ Params: KeyParams }>('/v1/users/:username/keys/:id', async (req): Promise<KeyRecord> => {
    const { userId, principal } = await owner(req);
    return keys.update(userId, req.params.id, body(req), principal.permissions);
  });

  app.delete<{ Params: KeyParams }>('/v1/users/:username/keys/:id', async (req, reply) => {
    const { userId, principal } = await owner(req);
    await keys.revoke(userId, req.params.id, principal.permissions);
    return reply.code(204).send();
  });
}
