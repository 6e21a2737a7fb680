import { ownBusiness } from './ownBusiness.ts';
import type { FastifyInstance } from 'fastify';
import type { UserService } from '../auth/users.ts';
import { usageRange, type UsageRecorder } from '../algorithms/usage.ts';
import { AppError } from '../errors.ts';
import { isOwner } from '../data/acl.ts';
import type { CallsState, Limits } from '../limits/limits.ts';

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
export async function usageRoutes(app: FastifyInstance, opts: { usage: UsageRecorder; users: UserService; limits: Limits }): Promise<void> {
  const { usage, users } = opts;
  // A flush that fails on the timer is logged with the server's log.
  usage.logTo(app.log);

  app.get<{ Params: UserParams; Querystring: Record<string, unknown> }>('/v1/users/:username/usage', async (req) => {
    const user = await ownBusiness(req, users, 'read', 'usage');
    const { from, to } = usageRange(req.query);
    return usage.report({ id: user.id, username: user.username }, from, to);
  });

  /**
   * `GET /v1/users/:username/limits` (docs/limits.md): the call limits in force for the user
   * and what is left of them now, and the asking key's own (`key`, null when it has none);
   * null is no limit. Any key of the user's may ask (a key that
   * may only call should see what it is held to); another user's name is `forbidden`.
   */
  app.get<{ Params: UserParams }>('/v1/users/:username/limits', async (req) => {
    const principal = req.principal!;
    if (!isOwner(principal, req.params.username)) throw new AppError('forbidden', `you can only read your own limits (you are ${principal.username})`);
    const none = (n: number) => (n === 0 ? null : n);
    const shown = (s: CallsState) => ({
      calls_per_min: none(s.limits.callsPerMin),
      burst: none(s.limits.burst),
      concurrency: none(s.limits.concurrency),
      remaining: s.remaining,
      reset_s: s.reset_s,
      in_flight: s.in_flight,
    });
    const key = opts.limits.keyState(principal);
    // The user's, and the asking key's own when it has some (calls with it are held to both).
    return { ...shown(opts.limits.state(principal)), key: key && shown(key) };
  });
}
