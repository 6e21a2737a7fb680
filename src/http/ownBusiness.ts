import type { FastifyRequest } from 'fastify';
import { AppError } from '../errors.ts';
import type { UserService } from '../auth/users.ts';
import { isOwner } from '../data/acl.ts';
import type { Principal } from '../auth/principal.ts';

/**
 * A user's own business (keys, connected accounts, usage, events, subscriptions): the user
 * named in the path only, with a key that may manage (`allow_algo_management`). Another
 * user's name, whether it exists or not, is `forbidden`. Returns the user and the principal.
 */
export async function ownBusiness(
  req: FastifyRequest<{ Params: { username: string } }>,
  users: UserService,
  doing: 'manage' | 'read',
  what: string,
): Promise<{ id: number; username: string; principal: Principal }> {
  const principal = req.principal!;
  if (!isOwner(principal, req.params.username)) {
    throw new AppError('forbidden', `you can only ${doing} your own ${what} (you are ${principal.username})`);
  }
  if (!principal.permissions.allow_algo_management) {
    throw new AppError('key_permission_denied', `this API key may not ${doing} ${what} (allow_algo_management is off)`);
  }
  const user = await users.require(principal.username);
  return { id: user.id, username: user.username, principal };
}
