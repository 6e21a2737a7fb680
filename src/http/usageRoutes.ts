import { ownBusiness } from './ownBusiness.ts';
import type { FastifyInstance } from 'fastify';
import type { UserService } from '../auth/users.ts';
import { usageRange, type UsageRecorder } from '../algorithms/usage.ts';

interface UserParams {
  username: string;
}

/**
 * `GET /v1/users/:username/usage?from=YYYY-MM-DD&to=YYYY-MM-DD` (docs/usage.md): compute
 * seconds, calls and bytes per UTC day and algorithm version, as a caller and as an owner.
 * Like keys and connected accounts, the user's own business: the user only, with a key that
 * may manage (`allow_algo_management`); another user's name, whether it exists or not, is
 * `forbidden`.
 */
export async function usageRoutes(app: FastifyInstance, opts: { usage: UsageRecorder; users: UserService }): Promise<void> {
  const { usage, users } = opts;
  // A flush that fails on the timer is logged with the server's log.
  usage.logTo(app.log);

  app.get<{ Params: UserParams; Querystring: Record<string, unknown> }>('/v1/users/:username/usage', async (req) => {
    const user = await ownBusiness(req, users, 'read', 'usage');
    const { from, to } = usageRange(req.query);
    return usage.report({ id: user.id, username: user.username }, from, to);
  });
}
