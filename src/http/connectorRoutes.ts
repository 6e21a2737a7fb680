import { ownBusiness } from './ownBusiness.ts';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { UserService } from '../auth/users.ts';
import type { ConnectedAccounts } from '../data/accounts/accounts.ts';
import { checkObject } from './body.ts';
import type { ConnectedAccount, Page } from '../../client/src/types.ts';

interface UserParams {
  username: string;
}
interface LabelParams extends UserParams {
  label: string;
}

const FIELDS = ['label', 'protocol', 'provider', 'is_default', 'cred_data', 'path', 'writeable'] as const;

/**
 * A user's connected accounts (issue 4). Like keys, they are the user's own business: the
 * user only, with a key that may manage (`allow_algo_management`). Credentials are accepted
 * and never shown.
 */
export async function connectorRoutes(app: FastifyInstance, opts: { accounts: ConnectedAccounts; users: UserService }): Promise<void> {
  const { accounts, users } = opts;

  async function owner(req: FastifyRequest<{ Params: UserParams }>): Promise<number> {
    return (await ownBusiness(req, users, 'manage', 'connected accounts')).id;
  }

  app.get<{ Params: UserParams }>('/v1/users/:username/connectors', async (req) => ({
    results: await accounts.list(await owner(req)),
    marker: null,
    next_link: null,
  }) satisfies Page<ConnectedAccount>);

  app.post<{ Params: UserParams }>('/v1/users/:username/connectors', async (req, reply) => {
    const userId = await owner(req);
    return reply.code(201).send((await accounts.create(userId, checkObject(req.body, FIELDS))) satisfies ConnectedAccount);
  });

  app.get<{ Params: LabelParams }>('/v1/users/:username/connectors/:label', async (req): Promise<ConnectedAccount> => accounts.get(await owner(req), req.params.label));

  app.patch<{ Params: LabelParams }>('/v1/users/:username/connectors/:label', async (req): Promise<ConnectedAccount> =>
    accounts.update(await owner(req), req.params.label, checkObject(req.body, FIELDS)),
  );

  app.delete<{ Params: LabelParams }>('/v1/users/:username/connectors/:label', async (req, reply) => {
    await accounts.delete(await owner(req), req.params.label);
    return reply.code(204).send();
  });
}
