import { AppError } from '../errors.ts';
import type { Limits } from '../limits/limits.ts';
import type { Principal } from '../auth/principal.ts';
import { isOwner } from '../data/acl.ts';
import { BuildMissingError, ExecutorBusyError, targetKey, WorkerLostError, WorkerStartError, type ContentType, type Executor, type Outcome, type RunTarget } from '../runtime/contract.ts';
import type { CallTarget, ReleaseService } from './releases.ts';
import { InternalRequests, MAX_CALL_DEPTH, type CallContext } from './hostRequests.ts';
import type { CallLog } from './callLog.ts';
import type { UsageRecorder } from './usage.ts';
import { SESSION_KEY_PREFIX } from '../auth/sessions.ts';
import { NO_METRICS, type Metrics } from '../metrics.ts';
import { NO_TRACING, traceparentOf, type Span, type Tracer } from '../tracing.ts';

export const DEFAULT_TIMEOUT_S = 300;
export const MAX_TIMEOUT_S = 3000;
/** `output=void` calls under way at once, server-wide. */
export const MAX_DETACHED = 32;


export interface CallRequest {
  owner: string;
  name: string;
  /** The version segment as sent (undefined when there was none). */
  version: string | undefined;
  contentType: ContentType;
  input: Buffer;
  timeoutS: number;
  /** `stdout=true`: honoured for the owner only. */
  stdout: boolean;
  /** Set when an algorithm makes this call through the SDK. */
  parent?: CallContext | undefined;
  /** The span the call is made in (its request's, its async run's, its trigger run's): the job's trace (docs/traces.md). */
  trace?: Span | undefined;
  /**
   * Not a request of its own to the limits (docs/limits.md): an async call run from its queue
   * (its rate was taken when it was accepted). No token is taken, and it holds none of the
   * caller's concurrent calls.
   */
  admitted?: boolean;
  /**
   * A run taken from a queue that its caller's limits hold as a request (a trigger's run): it
   * takes a token and holds one of the caller's calls at once, and a LimitError sends it back to
   * its queue; the owner's cap on the algorithm makes it wait rather than be refused.
   */
  queued?: boolean;
}

/** What the HTTP layer needs to answer a call. */
export interface CallResult {
  outcome: Outcome;
  /** Null when the algorithm could not be resolved (the outcome then says why). */
  target: CallTarget | null;
  /** The caller may see stdout (owner who asked). */
  showStdout: boolean;
  /** The node running the call was lost mid-call (cluster): an async call may be run again. */
  workerLost?: boolean;
  /** The caller may see stack traces (owner, or the source is open). */
  showTrace: boolean;
  /**
   * The RateLimit-Policy and RateLimit fields of the caller's calls-per-minute limit as the
   * call was admitted (docs/limits.md), for the answer; absent without a rate limit.
   */
  rateLimit?: [string, string][] | undefined;
}

/** Whether a key's `algo_acl` admits `owner/name` (entries compare without regard to case). */
export function aclAdmits(acl: readonly string[], owner: string, name: string): boolean {
  const o = owner.toLowerCase();
  const n = name.toLowerCase();
  return acl.some((entry) => {
    const e = entry.toLowerCase();
    return e === 'algo://*' || e === `algo://${o}/*` || e === `algo://${o}/${n}/*`;
  });
}

function result(outcome: Outcome, target: CallTarget, mine: boolean, req: CallRequest): CallResult {
  return { outcome, target, showStdout: mine && req.stdout, showTrace: mine || target.settings.source_visibility === 'open' };
}

/**
 * Who the algorithm acts as during a call (CallContext): the caller through this algorithm.
 * The principal is made when first asked for: most calls make no request through the SDK.
 */
class CallScope implements CallContext {
  private acting: Principal | undefined;

  constructor(
    private readonly caller: Principal,
    private readonly algorithm: { owner: string; name: string },
    readonly depth: number,
    readonly deadline: number,
    readonly pipelineEnabled: boolean,
  ) {}

  get principal(): Principal {
    if (this.acting === undefined) {
      const { algorithm: _outer, ...caller } = this.caller;
      // A console session holds every permission, and its user has no key to narrow: someone
      // else's algorithm tried from the console may read the user's data (as the contract's
      // algorithms do) but not change or delete it, nor manage anything (docs/console.md).
      if (caller.keyId.startsWith(SESSION_KEY_PREFIX) && !isOwner(caller, this.algorithm.owner)) {
        caller.permissions = { ...caller.permissions, allow_data_write: false, allow_algo_management: false };
      }
      this.acting = { ...caller, algorithm: { owner: this.algorithm.owner, name: this.algorithm.name } };
    }
    return this.acting;
  }
}

/** A call's result with the RateLimit fields of its admission, when there are some. */
function rated(r: CallResult, rateLimit: [string, string][] | undefined): CallResult {
  if (rateLimit !== undefined) r.rateLimit = rateLimit;
  return r;
}

/**
 * 429 `queue_full`: the caller's own calls fill their share of the workers' queue (docs/limits.md,
 * "Fair shares"); the calls they have waiting go on.
 */
function callerQueueFull(): AppError {
  const e = new AppError('queue_full', 'you have as many calls waiting for a worker as one caller may; wait for some of them to end', { scope: 'caller' });
  e.headers = [['retry-after', '1']];
  return e;
}

/** A call that ran out of time before its algorithm could answer. */
const TIMED_OUT: Outcome = { kind: 'timeout', stdout: '', stdoutTruncated: false, durationMs: 0 };

/** A call's attributes, set on its span (one by one: an object of them to copy from cost more). */
function callAttributes(span: Span, target: CallTarget, req: CallRequest, depth: number): void {
  span.set('algohost.algorithm', `${target.algorithm.owner}/${target.algorithm.name}`);
  span.set('algohost.version', target.version ?? undefined);
  span.set('algohost.build', target.build.hash);
  span.set('algohost.depth', depth);
  span.set('algohost.input_bytes', req.input.length);
}

/** What a call came to, on its span: an outcome other than a result marks it failed. */
function spanOutcome(span: Span, outcome: Outcome): void {
  span.set('algohost.outcome', outcome.kind);
  span.set('algohost.duration_ms', outcome.durationMs);
  if (outcome.kind === 'algorithm_error') span.fail(`${outcome.error.error_type}: ${outcome.error.message.slice(0, 200)}`);
  else if (outcome.kind !== 'result') span.fail(outcome.kind);
}

function failure(error_type: string, message: string): Outcome {
  return { kind: 'algorithm_error', error: { error_type, message, stacktrace: '' }, stdout: '', stdoutTruncated: false, durationMs: 0 };
}

/**
 * Calls: checks the key, resolves the version, runs it on a warm worker. Everything the
 * algorithm does, and an algorithm or version that is not there, is an outcome (HTTP 200 with
 * an error envelope, spec 7); only a key that may not call, or a server out of workers, is an
 * HTTP error.
 */
export class CallService {
  /** Requests from inside running algorithms (the SDK). */
  readonly internal = new InternalRequests();

  constructor(
    private readonly releases: ReleaseService,
    private readonly executor: Executor,
    /** ALGOHOST_ALGORITHM_NETWORK=host; otherwise even a version published with network runs without. */
    private readonly allowNetwork = false,
    /** Counts every call that ran (run() below, the one place every call goes through). */
    private readonly usage?: UsageRecorder,
    /** The call limits (docs/limits.md); none without. */
    private readonly limits?: Limits,
    /** Calls counted by outcome for Prometheus (docs/metrics.md). */
    private readonly metrics: Metrics = NO_METRICS,
    /** The call's span (docs/traces.md), child of the request's (or async call's, trigger run's). */
    private readonly tracing: Tracer = NO_TRACING,
    /** Whether calls are sent to other nodes (an API node's NatsExecutor): each then has a client span of its own. */
    private readonly dispatchSpans = false,
  ) {}

  /** `at`: the store's version the request read its key against (VersionedCache). */
  async call(principal: Principal, req: CallRequest, log?: CallLog, at?: string): Promise<CallResult> {
    // A warm call (its target cached, a worker idle) has its frame written to the worker
    // before this returns: nothing on the way awaits (see docs/performance.md).
    this.admit(principal, req);
    // The caller's month of compute, read once a month here when a compute quota holds them
    // (docs/limits.md); a warm path awaits nothing.
    if (!req.admitted && this.limits?.needsLoad(principal)) await this.limits.ready(principal);
    // A nested call holds none of the caller's concurrent calls: its parent holds one already.
    let release = req.admitted || this.limits === undefined ? undefined : this.limits.admit(principal, req.parent === undefined);
    // Shared limits (several API nodes) may wait for the database; one node's never do.
    if (release instanceof Promise) release = await release;
    // What is left of the caller's rate as the call was admitted, for the answer's RateLimit fields.
    const rateLimit = release === undefined || req.parent !== undefined ? undefined : this.limits!.rateFields(principal);
    try {
      const target = this.releases.cachedCall(principal, req.owner, req.name, req.version, at) ?? (await this.target(principal, req, at));
      if ('outcome' in target) return rated(target, rateLimit);
      // The owner's cap on the algorithm's calls under way (the algorithm's settings as they
      // are now, not the version's): a request past it is refused, an accepted run waits.
      const max = target.algorithm.settings.max_concurrency;
      if (max !== undefined && this.limits !== undefined) {
        const slots = this.limits.algorithms;
        const slot = req.admitted || req.queued ? await slots.wait(target.algorithm.id, max) : await slots.take(target.algorithm.id, max, `${target.algorithm.owner}/${target.algorithm.name}`);
        try {
          return rated(await this.run(principal, req, target, log), rateLimit);
        } finally {
          slot();
        }
      }
      // Awaited rather than returned: an async function that returns a promise takes two more
      // microtask turns to settle, and this is every call's way back.
      return rated(await this.run(principal, req, target, log), rateLimit);
    } finally {
      release?.();
    }
  }

  /**
   * Every check a call gets before it runs (the key, the nesting, the resolution): throws the
   * HTTP error, or gives the finished result of a call that cannot run (not found), or
   * undefined when it would run. How an async call is judged before it is accepted.
   */
  async check(principal: Principal, req: CallRequest): Promise<CallResult | undefined> {
    this.admit(principal, req);
    if (this.limits?.needsLoad(principal)) await this.limits.ready(principal);
    // Accepted to its queue: it takes a token now, and holds no concurrent call.
    await this.limits?.admit(principal, false);
    const target = await this.target(principal, req);
    return 'outcome' in target ? target : undefined;
  }

  /** Nested calls running with nobody waiting for them (`output=void` from inside an algorithm). */
  private detached = 0;

  /**
   * `output=void`: every check and the resolution happen before the answer (a refused key or a
   * bad selector is still its HTTP error); then the call runs on. Detached calls hold their
   * input while they wait for a worker, so only so many may be under way.
   */
  async callDetached(principal: Principal, req: CallRequest, log?: CallLog): Promise<CallResult | undefined> {
    this.admit(principal, req);
    if (this.limits?.needsLoad(principal)) await this.limits.ready(principal);
    await this.limits?.admit(principal, false);
    const target = await this.target(principal, req);
    if ('outcome' in target) return target;
    if (this.detached >= MAX_DETACHED) throw new AppError('server_busy', `${MAX_DETACHED} calls with output=void are already running; retry shortly`);
    const max = target.algorithm.settings.max_concurrency;
    const slot = max !== undefined && this.limits !== undefined ? await this.limits.algorithms.take(target.algorithm.id, max, `${target.algorithm.owner}/${target.algorithm.name}`) : undefined;
    this.detached++;
    this.run(principal, req, target, log)
      .catch((err: unknown) => log?.warn({ err }, 'a call with output=void failed'))
      .finally(() => {
        this.detached--;
        slot?.();
      });
    return undefined;
  }

  /** Whether this caller may make this call at all (its key, the nesting); throws if not. */
  private admit(principal: Principal, req: CallRequest): void {
    const parent = req.parent;
    if (parent) {
      if (!parent.pipelineEnabled) throw new AppError('nested_call_refused', 'this algorithm may not call other algorithms (its pipeline_enabled setting is off)');
      if (parent.depth + 1 > MAX_CALL_DEPTH) throw new AppError('call_depth_exceeded', `algorithms may call each other at most ${MAX_CALL_DEPTH} deep`);
    }
    const p = principal.permissions;
    if (!p.allow_algo) throw new AppError('algo_not_allowed', 'this API key may not call algorithms (allow_algo is off)');
    if (!aclAdmits(p.algo_acl, req.owner, req.name)) {
      throw new AppError('algo_not_allowed', `this API key may not call algo://${req.owner}/${req.name} (its algo_acl allows ${p.algo_acl.join(', ') || 'nothing'})`);
    }
  }

  /** The resolution of an admitted call: what to run, or the finished result (not found). */
  private async target(principal: Principal, req: CallRequest, at?: string): Promise<CallTarget | CallResult> {
    try {
      return await this.releases.resolveCall(principal, req.owner, req.name, req.version, at);
    } catch (err) {
      if (err instanceof AppError && err.code === 'algorithm_not_found') {
        return { outcome: failure('EntityNotFoundError', err.message), target: null, showStdout: false, showTrace: false };
      }
      throw err;
    }
  }

  /** What the executor runs for a target: made once per target (targets are cached, VersionedCache). */
  private runTarget(target: CallTarget): RunTarget {
    let t = this.runTargets.get(target);
    if (t === undefined) {
      const build = { algorithmId: target.algorithm.id, hash: target.build.hash };
      const network = this.allowNetwork && target.settings.network_access === 'full';
      t = { build, key: targetKey(build, network), runner: target.build.runner!, entry: target.build.entry!, network };
      this.runTargets.set(target, t);
    }
    return t;
  }

  private readonly runTargets = new WeakMap<CallTarget, RunTarget>();

  /** A call's result, counted in usage (a method, not a closure: no allocation per call). */
  private done(principal: Principal, req: CallRequest, target: CallTarget, mine: boolean, outcome: Outcome): CallResult {
    // Charged to the caller, and to their key (a console session has none of its own).
    this.usage?.record(principal.userId, target, outcome, req.input.length, principal.keyId.startsWith(SESSION_KEY_PREFIX) ? undefined : principal.keyId);
    this.metrics.call(outcome.kind === 'result' ? 'success' : outcome.kind, outcome.durationMs / 1000);
    return result(outcome, target, mine, req);
  }

  /**
   * A version just published (docs/limits.md, "Cold starts"); `after`: the version a call without
   * a version went to before it. Where such calls now go to the new one (it is public, or the
   * algorithm has no public version), `after`'s callers are likely to come to it, so where
   * `after` has a warm worker the executor starts one for the new version ahead of its first
   * call, if it has room (Executor.warm). `principal`: the publisher (the owner).
   */
  async warmPublished(principal: Principal, owner: string, name: string, version: string, after: string): Promise<void> {
    if (this.executor.warm === undefined) return;
    const [next, now, before] = await Promise.all([
      this.releases.resolveCall(principal, owner, name, version),
      this.releases.resolveCall(principal, owner, name, undefined),
      this.releases.resolveCall(principal, owner, name, after),
    ]);
    if (now.build.hash !== next.build.hash) return;
    this.executor.warm(this.runTarget(next), this.runTarget(before).key);
  }

  /** The caller's share of the workers while calls wait for one (docs/limits.md, "Shares"). */
  shareOf(principal: Principal): number {
    return this.limits?.shareOf(principal) ?? 1;
  }

  /**
   * Runs a resolved call: every call that reaches its version comes through here (sync, direct,
   * output=void, nested), and each is counted in usage as the user it runs as (whatever its
   * outcome, a timeout waiting for a worker included). A call refused before (its key, not
   * found, a busy server: thrown) is not counted.
   */
  private async run(principal: Principal, req: CallRequest, target: CallTarget, log?: CallLog): Promise<CallResult> {
    const parent = req.parent;
    const mine = isOwner(principal, target.algorithm.owner);
    // A nested call gets at most what is left of its parent's time.
    const timeoutMs = Math.min(req.timeoutS * 1000, parent ? parent.deadline - Date.now() : Infinity);
    if (timeoutMs <= 0) return this.done(principal, req, target, mine, TIMED_OUT);
    const started = performance.now();
    const context = new CallScope(principal, target.algorithm, (parent?.depth ?? 0) + 1, Date.now() + timeoutMs, target.settings.pipeline_enabled);
    // The call's span (docs/traces.md): where calls are sent to worker nodes (an API node), a
    // client span of its own, the dispatch; elsewhere the span the call runs in (its request's,
    // its async run's, its trigger run's) takes its attributes, and is what its SDK requests'
    // spans are children of: a warm call makes one span on one machine, not three.
    const own = this.tracing.exporting && this.dispatchSpans;
    const within = req.trace;
    const span = own ? this.tracing.start(`call ${target.algorithm.owner}/${target.algorithm.name}`, 'client', within) : (within ?? NO_TRACING.start('', 'client', undefined));
    if (span.recording) callAttributes(span, target, req, context.depth);
    try {
      // `weight`: the caller's share of the workers while calls wait (docs/limits.md, "Shares").
      const job = { target: this.runTarget(target), contentType: req.contentType, input: req.input, timeoutMs, nesting: context.depth - 1, caller: String(principal.userId), weight: this.shareOf(principal), traceparent: traceparentOf(span) };
      const outcome = await this.executor.run(job, this.internal.handler(context, span), span);
      if (span.recording) spanOutcome(span, outcome);
      return this.done(principal, req, target, mine, outcome);
    } catch (err) {
      if (span.recording) span.fail(err instanceof Error ? err.constructor.name : 'error');
      if (err instanceof BuildMissingError) {
        log?.warn({ algorithm: `${target.algorithm.owner}/${target.algorithm.name}`, build: target.build.hash }, 'the build is neither on this disk nor in the file store');
        return this.done(principal, req, target, mine, failure('InitializationError', 'the algorithm could not be started: its build is missing on this server; its owner can compile and publish again'));
      }
      if (err instanceof ExecutorBusyError) {
        // Waiting for a worker used up the call's own time: that is its timeout, not a busy server.
        if (performance.now() - started >= timeoutMs) return this.done(principal, req, target, mine, TIMED_OUT);
        this.metrics.call('busy', 0);
        if (err.reason === 'caller_queue_full') throw callerQueueFull();
        throw new AppError('server_busy', `${err.message}; retry shortly`);
      }
      if (err instanceof WorkerLostError) {
        log?.warn({ algorithm: `${target.algorithm.owner}/${target.algorithm.name}`, err: err.message }, 'the worker node running a call was lost');
        return {
          ...this.done(principal, req, target, mine, failure('WorkerLostError', `the worker node running this call stopped answering (${err.message}); it may or may not have run to its end: call again if that is safe`)),
          workerLost: true,
        };
      }
      if (err instanceof WorkerStartError) {
        log?.warn({ algorithm: `${target.algorithm.owner}/${target.algorithm.name}`, build: target.build.hash, err: err.message }, 'worker failed to start');
        if (performance.now() - started >= timeoutMs) return this.done(principal, req, target, mine, TIMED_OUT);
        return this.done(principal, req, target, mine, failure('InitializationError', 'the algorithm could not be started; if this persists, its owner should check that it loads'));
      }
      throw err;
    } finally {
      if (own) span.end();
    }
  }
}
