import { ownBusiness } from './ownBusiness.ts';
import type { FastifyInstance } from 'fastify';
import type { UserService } from '../auth/users.ts';
import { usageRange, type UsageRecorder } from '../algorithms/usage.ts';
import { AppError } from '../errors.ts';
import { isOwner } from '../data/acl.ts';
import type { CallsState, ComputeState, Limits } from '../limits/limits.ts';
import type { CallLimitsState, ComputeQuotaState, RequestLimitsState, StorageQuotaState, UserLimits } from '../../client/src/types.ts';

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
export async function usageRoutes(app: FastifyInstance, opts: { usage: UsageRecorder; users: UserService; limits: Limits; storedBytes?: (userId: number) => Promise<number> }): Promise<void> {
  const { usage, users } = opts;
  // A flush that fails on the timer is logged with the server's log.
  usage.logTo(app.log);

  app.get<{ Params: UserParams; Querystring: Record<string, unknown> }>('/v1/users/:username/usage', async (req) => {
    const user = await ownBusiness(req, users, 'read', 'usage');
    const { from, to } = usageRange(req.query);
    return usage.report({ id: user.id, username: user.username }, from, to);
  });

  /**
   * `GET /v1/users/:username/limits` (docs/limits.md): the call limits and quotas in force for
   * the user and what is left of them now, and the asking key's own (`key`, null when it has
   * none); null is no limit. Any key of the user's may ask (a key that may only call should
   * see what it is held to); another user's name is `forbidden`.
   */
  app.get<{ Params: UserParams }>('/v1/users/:username/limits', async (req) => {
    const principal = req.principal!;
    if (!isOwner(principal, req.params.username)) throw new AppError('forbidden', `you can only read your own limits (you are ${principal.username})`);
    const none = (n: number) => (n === 0 ? null : n);
    const calls = (s: CallsState): CallLimitsState => ({
      calls_per_min: none(s.limits.callsPerMin),
      burst: none(s.limits.burst),
      concurrency: none(s.limits.concurrency),
      remaining: s.remaining,
      reset_s: s.reset_s,
      in_flight: s.in_flight,
    });
    const compute = (c: ComputeState): ComputeQuotaState => ({
      seconds_per_month: none(c.quota),
      used_s: c.used_s,
      remaining_s: c.quota === 0 ? null : Math.max(0, Math.round((c.quota - c.used_s) * 1000) / 1000),
      period_start: new Date(c.start).toISOString(),
      resets_at: new Date(c.end).toISOString(),
      reset_s: Math.max(0, Math.ceil((c.end - opts.limits.now()) / 1000)),
    });
    const usedBytes = (await opts.storedBytes?.(principal.userId)) ?? 0;
    const storage = (quota: number): StorageQuotaState => ({ bytes: none(quota), used_bytes: usedBytes, remaining_bytes: quota === 0 ? null : Math.max(0, quota - usedBytes) });
    const requests = (s: CallsState): RequestLimitsState => ({ requests_per_min: none(s.limits.callsPerMin), request_burst: none(s.limits.burst), remaining: s.remaining, reset_s: s.reset_s });
    const key = await opts.limits.keyState(principal);
    const own = principal.permissions.limits;
    // The user's, and the asking key's own when it has some (calls with it are held to both).
    return {
      ...calls(await opts.limits.state(principal)),
      share: opts.limits.shareOf(principal),
      compute: compute(await opts.limits.computeState(principal)),
      storage: storage(opts.limits.quotasOf(principal).storageBytes),
      requests: requests(await opts.limits.requestState(principal)),
      key: key && { ...calls(key), compute: compute(await opts.limits.computeState(principal, true)), storage: storage(own?.storage_bytes ?? 0), requests: requests(await opts.limits.requestState(principal, true)) },
    } satisfies UserLimits;
  });
}
