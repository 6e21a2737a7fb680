import { TokenBucket } from './bucket.ts';
import { weightOf } from '../fairQueue.ts';
import type { KeyLimits } from '../../client/src/types.ts';
import { monthBounds, type ComputeMeter } from './compute.ts';
import { AlgorithmSlots } from './algorithmSlots.ts';
import type { SharedLimitStore } from './shared.ts';
import { LimitError, type CallLimits } from './refusal.ts';

export { LimitError, type CallLimits, type LimitCode } from './refusal.ts';

/**
 * Call limits (docs/limits.md): how many calls a minute (a token bucket with a burst) and how
 * many at once, per user and per key. The operator sets defaults (ALGOHOST_LIMIT_*), and
 * values per user (`algohost user limits`); 0 means no limit.
 *
 * This module is below the domain: CallService asks it to admit each call, synchronously (the
 * warm call's path awaits nothing), and it answers with a release or a LimitError.
 */

/** A user's own values, as stored (null: the operator's default). */
export interface LimitSettings {
  calls_per_min: number | null;
  burst: number | null;
  concurrency: number | null;
  compute_seconds_per_month: number | null;
  storage_bytes: number | null;
  /** Their share of the workers while calls wait (docs/limits.md, "Shares"): calls of theirs served a turn. */
  share: number | null;
  /** Authenticated requests of every kind a minute (docs/limits.md, "Requests"), and their burst. */
  requests_per_min: number | null;
  request_burst: number | null;
}

/** Quotas in force for one user (docs/limits.md); 0 is none. */
export interface Quotas {
  /** Compute seconds a calendar month (UTC). */
  computeSecondsPerMonth: number;
  /** Bytes of hosted files. */
  storageBytes: number;
}

export const NO_QUOTAS: Quotas = Object.freeze({ computeSecondsPerMonth: 0, storageBytes: 0 });

/** No rate, no concurrency: nothing limited. */
export const NO_RATE: CallLimits = Object.freeze({ callsPerMin: 0, burst: 0, concurrency: 0 });

/** The quotas in force for a user: their own values over the operator's defaults. */
export function resolveQuotas(operator: Quotas, own: LimitSettings | null | undefined): Quotas {
  return {
    computeSecondsPerMonth: own?.compute_seconds_per_month ?? operator.computeSecondsPerMonth,
    storageBytes: own?.storage_bytes ?? operator.storageBytes,
  };
}

/** The burst when none is set: three seconds' worth of the rate, at least 1. */
export function defaultBurst(callsPerMin: number): number {
  return Math.max(1, Math.ceil(callsPerMin / 20));
}

/** The limits in force for a user: their own values over the operator's defaults. */
export function resolveLimits(operator: CallLimits, own: Pick<LimitSettings, 'calls_per_min' | 'burst' | 'concurrency'> | null | undefined): CallLimits {
  const callsPerMin = own?.calls_per_min ?? operator.callsPerMin;
  const burst = own?.burst ?? (own?.calls_per_min != null ? 0 : operator.burst);
  return {
    callsPerMin,
    burst: callsPerMin === 0 ? 0 : burst > 0 ? burst : defaultBurst(callsPerMin),
    concurrency: own?.concurrency ?? operator.concurrency,
  };
}

/** Tokens this process took from a shared bucket (SharedLimitStore.take). */
interface Lease {
  /** Left to spend here. */
  tokens: number;
  /** Spent by then, or dropped (ms). */
  until: number;
  /** What the database's bucket held after the take, and when (for the RateLimit fields). */
  left: number;
  at: number;
  perMin: number;
  burst: number;
}

interface Scope {
  bucket: TokenBucket | undefined;
  /** With shared limits, instead of the bucket. */
  lease?: Lease;
  inFlight: number;
  /** When it was last used (ms): idle scopes are forgotten. */
  used: number;
  /** With shared limits, the take from the database on its way: calls that find no token wait for it. */
  taking?: Promise<void> | undefined;
}

/** The state of one user's calls, for GET /v1/users/:user/limits. */
export interface CallsState {
  limits: CallLimits;
  /** Calls that may be made now before the rate limit answers 429 (null: no rate limit). */
  remaining: number | null;
  /** Seconds until the bucket is full again (null: no rate limit). */
  reset_s: number | null;
  in_flight: number;
}

/**
 * What a limiter counts: calls (scopes `u<user>`, `k<key>`; policy "calls") or every
 * authenticated request (`ru<user>`, `rk<key>`; policy "requests"), each in buckets of its own.
 */
export interface RateKind {
  prefix: '' | 'r';
  noun: 'calls' | 'requests';
}
export const CALLS: RateKind = Object.freeze({ prefix: '', noun: 'calls' });
export const REQUESTS: RateKind = Object.freeze({ prefix: 'r', noun: 'requests' });

/**
 * The buckets and counts of one process. A scope whose bucket is full and with no call under
 * way holds nothing worth keeping: scopes idle that long are dropped, so memory follows the
 * callers active lately, not every caller ever seen.
 */
export class CallLimiter {
  private readonly scopes = new Map<string, Scope>();
  private sweptAt = 0;

  constructor(
    private readonly now: () => number = Date.now,
    /**
     * With several API nodes on one database (PostgreSQL): the buckets and the counts of calls
     * under way are the database's (SharedLimitStore), this process holds only the tokens it took.
     */
    private readonly shared?: { store: SharedLimitStore; instance: string; log?: (err: unknown) => void },
    /** Calls, or every request (a second limiter, with buckets of its own). */
    readonly kind: RateKind = CALLS,
  ) {}

  private scope(id: string, limits: CallLimits, now: number): Scope {
    let s = this.scopes.get(id);
    if (s === undefined) {
      s = { bucket: undefined, inFlight: 0, used: now };
      this.scopes.set(id, s);
    }
    s.bucket = bucketFor(s.bucket, limits, now);
    s.used = now;
    return s;
  }

  /**
   * Admits one call of user `userId` under `limits` (and, when the call's key has limits of its
   * own, under those too): takes a token from each bucket and, unless `concurrent` is false,
   * holds one of the calls at once of each until the release given back is called (once).
   * Throws LimitError, taking nothing, when a limit is reached.
   */
  admit(userId: number, limits: CallLimits, concurrent = true, key?: { id: string; limits: CallLimits }): (() => void) | Promise<() => void> {
    const quiet = (l: CallLimits) => l.callsPerMin === 0 && (l.concurrency === 0 || !concurrent);
    if (quiet(limits) && (key === undefined || quiet(key.limits))) return NOTHING;
    const now = this.now();
    this.sweep(now);
    const p = this.kind.prefix;
    const scopes: { s: Scope; limits: CallLimits; who: string; id: string }[] = [{ s: this.scope(`${p}u${userId}`, limits, now), limits, who: 'you', id: `${p}u${userId}` }];
    if (key !== undefined && !quiet(key.limits)) scopes.push({ s: this.scope(`${p}k${key.id}`, key.limits, now), limits: key.limits, who: 'this key', id: `${p}k${key.id}` });
    if (this.shared !== undefined) {
      // The tokens this process holds may do, with no call under way to count: nothing to wait for.
      if (!(concurrent && scopes.some((x) => x.limits.concurrency > 0)) && scopes.every((x) => x.limits.callsPerMin === 0 || leased(x.s, now))) {
        for (const x of scopes) if (x.limits.callsPerMin > 0) x.s.lease!.tokens--;
        return NOTHING;
      }
      return this.admitShared(scopes, concurrent, now);
    }
    // Every limit is looked at before anything is taken: a refusal takes nothing.
    for (const { s, limits: l, who } of scopes) {
      if (concurrent && l.concurrency > 0 && s.inFlight >= l.concurrency) throw concurrencyError(who, s.inFlight, l);
      if (s.bucket !== undefined && !s.bucket.has(now)) throw rateError(who, l, s.bucket.retryAfterS(now), this.kind.noun);
    }
    const held: Scope[] = [];
    for (const { s, limits: l } of scopes) {
      s.bucket?.take(now);
      if (concurrent && l.concurrency > 0) {
        s.inFlight++;
        held.push(s);
      }
    }
    if (held.length === 0) return NOTHING;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const s of held) s.inFlight--;
    };
  }

  /**
   * admit() with the database's buckets and counts: tokens are taken from a scope's row a few
   * at a time (LEASE_S of its rate, within its burst) and spent here for LEASE_MS at most; a
   * call under way is counted in the row (each scope in turn; a refusal by a later scope gives
   * back what an earlier one held). A refusal spends no token.
   */
  private async admitShared(scopes: { s: Scope; limits: CallLimits; who: string; id: string }[], concurrent: boolean, now: number): Promise<() => void> {
    const { store, instance } = this.shared!;
    // A token is spent as soon as it is found (between finding it and spending it other calls
    // would find the same one while this one waits for the database), and given back on a refusal.
    const spent: Lease[] = [];
    const held: string[] = [];
    const giveBack = () => {
      for (const id of held.splice(0)) this.releaseShared(id);
      for (const lease of spent.splice(0)) lease.tokens++;
    };
    try {
      for (const x of scopes) {
        if (x.limits.callsPerMin === 0) continue;
        spent.push(await this.leaseOf(x, now));
      }
      if (concurrent) {
        for (const x of scopes) {
          if (x.limits.concurrency === 0) continue;
          if (!(await store.hold(x.id, x.limits.concurrency, instance))) throw concurrencyError(x.who, x.limits.concurrency, x.limits);
          held.push(x.id);
          x.s.inFlight++;
        }
      }
    } catch (err) {
      for (const x of scopes) if (held.includes(x.id)) x.s.inFlight--;
      giveBack();
      throw err;
    }
    if (held.length === 0) return NOTHING;
    const mine = scopes.filter((x) => held.includes(x.id));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const x of mine) x.s.inFlight--;
      for (const id of held.splice(0)) this.releaseShared(id);
    };
  }

  /**
   * A token of the scope's, spent (given back by the caller on a refusal: `tokens++` on the lease
   * answered): from this node's lease, or from one taken from the database (one
   * take at a time per scope: a call that finds the tokens spent while a take is on its way
   * waits for that take, then takes again if the bucket had more than it brought, and is
   * refused without asking again if the bucket was empty). A new lease keeps the tokens of the
   * one it replaces that have not expired.
   */
  private async leaseOf(x: { s: Scope; limits: CallLimits; who: string; id: string }, now: number): Promise<Lease> {
    const l = x.limits;
    const refused = (left: number) => rateError(x.who, l, Math.max(1, Math.ceil(((1 - left) * 60) / l.callsPerMin)), this.kind.noun);
    // Found and spent in one step (no turn of the event loop between): two calls never spend one token.
    const spend = (): Lease | undefined => {
      if (!leased(x.s, this.now())) return undefined;
      x.s.lease!.tokens--;
      return x.s.lease!;
    };
    const here = spend();
    if (here !== undefined) return here;
    if (x.s.taking !== undefined) {
      await x.s.taking.catch(() => undefined);
      const after = spend();
      if (after !== undefined) return after;
      // Its tokens went to the calls before this one: another take if the bucket had more.
      const left = x.s.lease?.left ?? 0;
      if (left >= 1) return this.leaseOf(x, now);
      throw refused(left);
    }
    const want = Math.max(1, Math.min(l.burst, Math.ceil((l.callsPerMin / 60) * LEASE_S)));
    let left = 0;
    const taking = this.shared!.store.take(x.id, want, l, now).then((got) => {
      const at = this.now();
      const old = x.s.lease;
      const kept = old !== undefined && at < old.until ? Math.max(0, old.tokens) : 0;
      left = got.tokens;
      x.s.lease = { tokens: kept + got.granted, until: at + LEASE_MS, left: got.tokens, perMin: l.callsPerMin, burst: l.burst, at };
    });
    x.s.taking = taking;
    try {
      await taking;
    } finally {
      if (x.s.taking === taking) x.s.taking = undefined;
    }
    const got = spend();
    if (got === undefined) throw refused(left);
    return got;
  }

  /** Gives a call under way back to the database (SharedLimitStore.releaseSoon: retried). */
  private releaseShared(id: string): void {
    const { store, instance, log } = this.shared!;
    store.releaseSoon(id, instance, log);
  }

  /** Gives back the calls held by nodes that are gone (SharedLimitStore.forgetDead); 0 without a shared store. */
  async forgetDead(): Promise<number> {
    return this.shared ? this.shared.store.forgetDead() : 0;
  }

  /**
   * The RateLimit-Policy and RateLimit fields of an admitted call: of the user's bucket, or the
   * key's when it has fewer calls left (undefined: no rate limit). Read from the buckets in
   * memory, nothing else: `r` the whole calls left, `t` the seconds until the bucket is full
   * again (until the next call may be made, when none is left).
   */
  fields(userId: number, limits: CallLimits, key?: { id: string; limits: CallLimits }): [string, string][] | undefined {
    const now = this.now();
    let best: { l: CallLimits; r: number; b: TokenBucket } | undefined;
    const consider = (id: string, l: CallLimits) => {
      const scope = l.callsPerMin === 0 ? undefined : this.scopes.get(id);
      // Shared: the bucket as the database last said, with what this process took since.
      const b = this.shared ? scope?.lease && leaseBucket(scope.lease) : scope?.bucket;
      if (b === undefined) return;
      const r = b.remaining(now);
      if (best === undefined || r < best.r) best = { l, r, b };
    };
    consider(`${this.kind.prefix}u${userId}`, limits);
    if (key !== undefined) consider(`${this.kind.prefix}k${key.id}`, key.limits);
    if (best === undefined) return undefined;
    const { l, r, b } = best;
    return rateFields(l, r, r > 0 ? b.fullInS(now) : b.retryAfterS(now), this.kind.noun);
  }

  /** The state of a scope's calls now (`u<user id>`, `k<key id>`; nothing is taken). */
  async state(scope: string, limits: CallLimits): Promise<CallsState> {
    const now = this.now();
    const s = this.scopes.get(scope);
    if (this.shared !== undefined) {
      // Every node's: the bucket's row (a take of nothing refills it to now) and the count.
      const [bucket, inFlight] = await Promise.all([limits.callsPerMin > 0 ? this.shared.store.peek(scope, limits, now) : undefined, this.shared.store.inFlight(scope)]);
      const b = bucket === undefined ? undefined : new TokenBucket(limits.callsPerMin, limits.burst, now, bucket);
      return { limits, remaining: b?.remaining(now) ?? null, reset_s: b?.fullInS(now) ?? null, in_flight: inFlight };
    }
    const bucket = bucketFor(s?.bucket, limits, now);
    return { limits, remaining: bucket?.remaining(now) ?? null, reset_s: bucket?.fullInS(now) ?? null, in_flight: s?.inFlight ?? 0 };
  }

  /** Forgets scopes idle for a minute with nothing under way (a bucket refills in at most that). */
  private sweep(now: number): void {
    if (now - this.sweptAt < 60_000) return;
    this.sweptAt = now;
    for (const [id, s] of this.scopes) if (s.inFlight === 0 && now - s.used > 60_000 + (s.bucket ? (s.bucket.burst * 60_000) / s.bucket.perMin : 0)) this.scopes.delete(id);
  }
}

const NOTHING = () => undefined;

/** Shared limits: a node takes LEASE_S of a scope's rate at a time (within its burst), and drops what it has not spent within LEASE_MS. */
const LEASE_S = 0.25;
const LEASE_MS = 1000;

/** Whether the scope holds a token taken from the database that may still be spent. */
function leased(s: Scope, now: number): boolean {
  return s.lease !== undefined && s.lease.tokens >= 1 && now < s.lease.until;
}

/** The bucket as the database last said (`left` after the take) with this process's tokens in it, refilled since. */
function leaseBucket(lease: Lease): TokenBucket {
  return new TokenBucket(lease.perMin, lease.burst, lease.at, Math.min(lease.burst, lease.left + Math.max(0, lease.tokens)));
}

function concurrencyError(who: string, inFlight: number, l: CallLimits): LimitError {
  return new LimitError('concurrency_limited', `${who === 'you' ? 'you have' : 'this key has'} ${inFlight} calls under way, the most ${who === 'you' ? 'you' : 'it'} may have at once; wait for one to end`, [['retry-after', '1']], { limit: 'concurrency', scope: who === 'you' ? 'user' : 'key', concurrency: l.concurrency });
}

function rateError(who: string, l: CallLimits, retry: number, noun: RateKind['noun'] = 'calls'): LimitError {
  const extra =
    noun === 'calls'
      ? { limit: 'calls_per_min', scope: who === 'you' ? 'user' : 'key', calls_per_min: l.callsPerMin, burst: l.burst, retry_after_s: retry }
      : { limit: 'requests_per_min', scope: who === 'you' ? 'user' : 'key', requests_per_min: l.callsPerMin, request_burst: l.burst, retry_after_s: retry };
  return new LimitError('rate_limited', `${who} may make ${l.callsPerMin} ${noun} a minute (${l.burst} at once); the next may be made in ${retry} s`, [['retry-after', String(retry)], ...rateFields(l, 0, retry, noun)], extra);
}

/** A scope's bucket under `limits`: the one it has while they are the same; a changed limit starts a fresh one (full, as a new caller's). */
function bucketFor(bucket: TokenBucket | undefined, limits: CallLimits, now: number): TokenBucket | undefined {
  if (limits.callsPerMin === 0) return undefined;
  return bucket !== undefined && bucket.perMin === limits.callsPerMin && bucket.burst === limits.burst ? bucket : new TokenBucket(limits.callsPerMin, limits.burst, now);
}

/** The RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers) of a rate. */
export function rateFields(limits: CallLimits, remaining: number, resetS: number, noun: RateKind['noun'] = 'calls'): [string, string][] {
  return [
    ['ratelimit-policy', `"${noun}";q=${limits.callsPerMin};w=60`],
    ['ratelimit', `"${noun}";r=${remaining};t=${resetS}`],
  ];
}

/** Who a call is made by, as the limits see it (a Principal). */
export interface LimitedCaller {
  userId: number;
  /** The user's own values (user_limits), read with their key; undefined or null: none. */
  limits?: LimitSettings | null | undefined;
  keyId?: string;
  /** The key's own limits, in its permissions (`limits`). */
  permissions?: { limits?: KeyLimits | null | undefined };
}

/** A key's own limits as limits in force (0: the key adds none; the user's still hold). */
export function keyLimits(own: KeyLimits): CallLimits {
  const callsPerMin = own.calls_per_min ?? 0;
  return { callsPerMin, burst: callsPerMin === 0 ? 0 : (own.burst ?? defaultBurst(callsPerMin)), concurrency: own.concurrency ?? 0 };
}

/** What the compute quota says of a caller now (GET /v1/users/:user/limits). */
export interface ComputeState {
  /** The quota in seconds (0: none). */
  quota: number;
  /** Seconds used this month. */
  used_s: number;
  /** The month's first instant and the next's (ms, UTC). */
  start: number;
  end: number;
}

/** The operator's defaults and this process's limiter: what CallService admits calls by. */
export class Limits {
  constructor(
    readonly defaults: CallLimits,
    readonly limiter = new CallLimiter(),
    /** The operator's default quotas (ALGOHOST_LIMIT_COMPUTE_SECONDS_PER_MONTH, _STORAGE_BYTES). */
    readonly quotaDefaults: Quotas = NO_QUOTAS,
    /** Compute used per month (fed by the usage recorder); no compute quota is enforced without. */
    readonly meter?: ComputeMeter,
    /** Owners' caps on their algorithms' calls under way (`settings.max_concurrency`). */
    readonly algorithms = new AlgorithmSlots(),
    /** The operator's default share of the workers (ALGOHOST_LIMIT_SHARE). */
    readonly shareDefault = 1,
    /** The operator's default rate of every authenticated request (ALGOHOST_LIMIT_REQUESTS_PER_MIN; concurrency unused). */
    readonly requestDefaults: CallLimits = NO_RATE,
    /** The buckets of requests: a limiter of their own (scopes `ru…`, `rk…`). */
    readonly requests = new CallLimiter(undefined, undefined, REQUESTS),
  ) {}

  /** The request rate in force for a caller: their own over the operator's, as the call rate is (resolveLimits). */
  requestLimitsOf(caller: LimitedCaller): CallLimits {
    const own = caller.limits;
    if (!own || (own.requests_per_min === null && own.request_burst === null)) return this.requestDefaults;
    return resolveLimits(this.requestDefaults, { calls_per_min: own.requests_per_min, burst: own.request_burst, concurrency: null });
  }

  /** The request rate of the caller's key of its own (`requests_per_min`; 0: none): a burst of three seconds' worth. */
  private keyRequestLimits(caller: LimitedCaller): CallLimits {
    const perMin = caller.permissions?.limits?.requests_per_min ?? 0;
    return { callsPerMin: perMin, burst: perMin === 0 ? 0 : defaultBurst(perMin), concurrency: 0 };
  }

  /**
   * Admits one authenticated request (docs/limits.md, "Requests"): a token from the user's
   * bucket of requests, and their key's when it has a rate of its own (`requests_per_min`).
   * Throws 429 `rate_limited` (policy "requests"), taking nothing; on one node it awaits nothing.
   */
  admitRequest(caller: LimitedCaller): void | Promise<void> {
    const user = this.requestLimitsOf(caller);
    const own = caller.permissions?.limits?.requests_per_min;
    const key = own && caller.keyId !== undefined ? { id: caller.keyId, limits: this.keyRequestLimits(caller) } : undefined;
    if (user.callsPerMin === 0 && key === undefined) return;
    const r = this.requests.admit(caller.userId, user, false, key);
    if (r instanceof Promise) return r.then(() => undefined);
  }

  /** The state of a caller's requests (GET /v1/users/:user/limits); with `key`, of their key's own rate (0: none). */
  requestState(caller: LimitedCaller, key = false): Promise<CallsState> {
    if (!key) return this.requests.state(`ru${caller.userId}`, this.requestLimitsOf(caller));
    return this.requests.state(`rk${caller.keyId}`, this.keyRequestLimits(caller));
  }

  /** A caller's share of the workers while calls wait for one: their own, else the operator's (1 to MAX_WEIGHT, whatever the store holds). */
  shareOf(caller: LimitedCaller): number {
    return weightOf(caller.limits?.share ?? this.shareDefault);
  }

  /** The limits' clock. */
  now(): number {
    return this.meter?.now() ?? Date.now();
  }

  /** The limits in force for a caller. */
  of(caller: LimitedCaller): CallLimits {
    return caller.limits ? resolveLimits(this.defaults, caller.limits) : this.defaults;
  }

  /**
   * The RateLimit fields of the calls-per-minute policy for a call just admitted (see
   * CallLimiter.fields); undefined when neither the user nor the key has a rate limit.
   */
  rateFields(caller: LimitedCaller): [string, string][] | undefined {
    const user = this.of(caller);
    const own = caller.permissions?.limits;
    const key = own?.calls_per_min !== undefined && caller.keyId !== undefined ? { id: caller.keyId, limits: keyLimits(own) } : undefined;
    if (user.callsPerMin === 0 && key === undefined) return undefined;
    return this.limiter.fields(caller.userId, user, key);
  }

  /** The quotas in force for a caller's user. */
  quotasOf(caller: LimitedCaller): Quotas {
    return caller.limits ? resolveQuotas(this.quotaDefaults, caller.limits) : this.quotaDefaults;
  }

  /**
   * The storage quota an upload by this caller is held to: the lower of their user's and their
   * key's own (`storage_bytes`), and whose; undefined when neither has one.
   */
  storageQuota(caller: LimitedCaller): { bytes: number; scope: 'user' | 'key' } | undefined {
    const user = this.quotasOf(caller).storageBytes;
    const key = caller.permissions?.limits?.storage_bytes ?? 0;
    if (key > 0 && (user === 0 || key < user)) return { bytes: key, scope: 'key' };
    return user > 0 ? { bytes: user, scope: 'user' } : undefined;
  }

  /** Whether any compute quota may hold this caller (no allocation: asked on every call). */
  private computeHolds(caller: LimitedCaller): boolean {
    const own = caller.limits?.compute_seconds_per_month;
    return (own != null ? own > 0 : this.quotaDefaults.computeSecondsPerMonth > 0) || (caller.permissions?.limits?.compute_seconds_per_month ?? 0) > 0;
  }

  /** The compute quotas a call of this caller is held to: the user's and the key's own (0: none). */
  private computeQuotas(caller: LimitedCaller): { user: number; key: number } {
    const user = caller.limits ? (caller.limits.compute_seconds_per_month ?? this.quotaDefaults.computeSecondsPerMonth) : this.quotaDefaults.computeSecondsPerMonth;
    return { user, key: caller.keyId !== undefined ? (caller.permissions?.limits?.compute_seconds_per_month ?? 0) : 0 };
  }

  /**
   * Whether the caller's month of compute must be read before admit() can hold them to a
   * compute quota (their first call of the month here, with one in force): then await ready().
   * False on a warm path.
   */
  needsLoad(caller: LimitedCaller): boolean {
    return this.meter !== undefined && this.computeHolds(caller) && this.meter.needsLoad(caller.userId);
  }

  ready(caller: LimitedCaller): Promise<void> {
    return this.meter!.load(caller.userId);
  }

  /**
   * Admits one call (see CallLimiter.admit); `concurrent`: it holds one of the calls at once.
   * First the compute quota: a user (or key) whose month's compute has reached it is refused
   * until the first of next month (UTC), taking nothing. Calls under way are not cut off, so
   * the month may end a little over the quota.
   */
  admit(caller: LimitedCaller, concurrent: boolean): (() => void) | Promise<() => void> {
    if (this.meter !== undefined) this.checkCompute(caller);
    const own = caller.permissions?.limits;
    return this.limiter.admit(caller.userId, this.of(caller), concurrent, own && caller.keyId !== undefined ? { id: caller.keyId, limits: keyLimits(own) } : undefined);
  }

  /** Throws compute_quota_exceeded when the caller's user or key has used their month's compute. */
  checkCompute(caller: LimitedCaller): void {
    if (this.meter === undefined || !this.computeHolds(caller)) return;
    const q = this.computeQuotas(caller);
    const used = this.meter!.used(caller.userId, caller.keyId);
    // Not read yet (a caller that did not wait for ready()): admitted, and the read started.
    if (used === undefined) {
      this.meter!.load(caller.userId).catch(() => undefined);
      return;
    }
    for (const [scope, quota, ms] of [['user', q.user, used.user], ['key', q.key, used.key]] as const) {
      if (quota > 0 && ms >= quota * 1000) throw this.computeError(scope, quota, ms);
    }
  }

  private computeError(scope: 'user' | 'key', quota: number, ms: number): LimitError {
    const now = this.meter!.now();
    const { start, end } = monthBounds(now);
    const retry = Math.max(1, Math.ceil((end - now) / 1000));
    const resets = new Date(end).toISOString();
    return new LimitError(
      'compute_quota_exceeded',
      `${scope === 'user' ? 'your calls have' : 'calls with this key have'} used ${round(ms / 1000)} of the ${quota} compute seconds ${scope === 'user' ? 'you' : 'it'} may use this month; more from ${resets}`,
      [['retry-after', String(retry)], ...computeFields(quota, Math.round((end - start) / 1000), 0, retry)],
      { limit: 'compute_seconds_per_month', scope, compute_seconds_per_month: quota, used_s: round(ms / 1000), resets_at: resets, retry_after_s: retry },
    );
  }

  /** The compute quota of the caller's user (or, with `key`, of their key) and what is used of it this month. */
  async computeState(caller: LimitedCaller, key = false): Promise<ComputeState> {
    const q = this.computeQuotas(caller);
    const now = this.meter?.now() ?? Date.now();
    const { start, end } = monthBounds(now);
    if (this.meter === undefined) return { quota: key ? q.key : q.user, used_s: 0, start, end };
    if (this.meter.needsLoad(caller.userId)) await this.meter.load(caller.userId);
    const used = this.meter.used(caller.userId, caller.keyId) ?? { user: 0, key: 0 };
    return { quota: key ? q.key : q.user, used_s: round((key ? used.key : used.user) / 1000), start, end };
  }

  state(caller: LimitedCaller): Promise<CallsState> {
    return this.limiter.state(`u${caller.userId}`, this.of(caller));
  }

  /** The state of the calls of the caller's key, when it has limits of its own (else null). */
  async keyState(caller: LimitedCaller): Promise<CallsState | null> {
    const own = caller.permissions?.limits;
    return own && caller.keyId !== undefined ? this.limiter.state(`k${caller.keyId}`, keyLimits(own)) : null;
  }
}

/** Seconds to the millisecond. */
function round(s: number): number {
  return Math.round(s * 1000) / 1000;
}

/** The RateLimit-Policy and RateLimit fields of the compute quota: q seconds in a window of w (the month's seconds); r left, t seconds until the month ends. */
export function computeFields(quota: number, windowS: number, remaining: number, resetS: number): [string, string][] {
  return [
    ['ratelimit-policy', `"compute";q=${quota};w=${windowS}`],
    ['ratelimit', `"compute";r=${remaining};t=${resetS}`],
  ];
}

/** Every field of a user's own values, as user_limits' columns. */
export const LIMIT_FIELDS = ['calls_per_min', 'burst', 'concurrency', 'compute_seconds_per_month', 'storage_bytes', 'share', 'requests_per_min', 'request_burst'] as const satisfies readonly (keyof LimitSettings)[];

/** A user's own values as a row of user_limits (left-joined: all null when the user has none). */
export function ownLimits(row: Record<(typeof LIMIT_FIELDS)[number], number | string | null>): LimitSettings | null {
  if (LIMIT_FIELDS.every((f) => row[f] === null)) return null;
  const own = {} as LimitSettings;
  for (const f of LIMIT_FIELDS) own[f] = row[f] === null ? null : Number(row[f]);
  return own;
}

/** The columns of user_limits a principal is read with (KeyService, sessions). */
export const LIMIT_COLUMNS = [
  'user_limits.calls_per_min',
  'user_limits.burst',
  'user_limits.concurrency',
  'user_limits.compute_seconds_per_month',
  'user_limits.storage_bytes',
  'user_limits.share',
  'user_limits.requests_per_min',
  'user_limits.request_burst',
] as const satisfies readonly `user_limits.${(typeof LIMIT_FIELDS)[number]}`[];
