import { WorkerPool, DEFAULT_POOL, type PoolOptions } from './pool.ts';
import { SpareLoadError, Worker } from './worker.ts';
import { DEFAULT_LIMITS, type SandboxLimits } from './sandbox.ts';
import type { FencePolicy } from './egressFence.ts';
import type { GvisorOptions } from './gvisor.ts';
import { NO_METRICS, type Metrics } from '../metrics.ts';
import { Spares, type SpareLog, type SpareOptions } from './spares.ts';
import { NO_TRACING, parseTraceparent, traceparentOf, type Span, type Tracer } from '../tracing.ts';
import { BuildMissingError, WorkerStartError, type BuildRef, type Executor, type HostHandler, type Job, type Outcome, type RunTarget } from './contract.ts';

/** Where an executor finds a build's files on this machine (algorithms/artifacts.ts). */
export interface BuildFiles {
  /** The build's directory here, whether or not it is present. */
  dir(algorithmId: number, kind: 'build', hash: string): string;
  /** Whether it is on this disk (a set lookup: asked on every call). */
  isPresent(algorithmId: number, kind: 'build', hash: string): boolean;
  /** Fetches it from the shared file store if another server made it; false if nowhere. */
  ensure(algorithmId: number, kind: 'build', hash: string): Promise<boolean>;
}

export interface RuntimeOptions {
  pool: PoolOptions;
  limits: SandboxLimits;
  /** Run workers without bubblewrap (only where none works and the operator allowed it). */
  unsandboxed: boolean;
  /** What a call's stdout may hold before it is cut off and marked truncated. */
  maxStdoutBytes: number;
  /** Longest a worker may take to start and load its algorithm. */
  startTimeoutMs: number;
  /** The bubblewrap binary (ALGOHOST_BWRAP). */
  bwrapPath?: string | undefined;
  /** Workers under gVisor instead of bubblewrap (ALGOHOST_SANDBOX=gvisor). */
  gvisor?: GvisorOptions | undefined;
  /**
   * The egress fence a worker with the network runs behind (SandboxNetwork.algorithmFence);
   * without one, a worker with the network has the host's (ALGOHOST_ALGORITHM_NETWORK=host).
   */
  fence?: (() => FencePolicy | undefined) | undefined;
  /** Cold starts, waits for a worker (docs/metrics.md). */
  metrics?: Metrics | undefined;
  /**
   * Pre-started workers (spares.ts), under bubblewrap only (gVisor's gofer may keep what it saw
   * of a spare's empty /algo); none when unset or `perRunner` is 0.
   */
  spares?: SpareOptions | undefined;
  /** Where a spare that failed to start is reported. */
  log?: SpareLog | undefined;
  /** The run's span (docs/traces.md): the wait for a worker, the algorithm's run. */
  tracing?: Tracer | undefined;
  /**
   * Whether each run has a span of its own (a worker node's, a child of the API node's call
   * span); otherwise the span the call runs in takes the wait's attributes.
   */
  runSpans?: boolean | undefined;
}

export const DEFAULT_RUNTIME: RuntimeOptions = {
  pool: DEFAULT_POOL,
  limits: DEFAULT_LIMITS,
  unsandboxed: false,
  maxStdoutBytes: 1024 * 1024,
  startTimeoutMs: 30_000,
};

/**
 * The local executor: runs calls on warm sandboxed workers of this machine. Takes one from the
 * pool (starting it if need be) and hands it the input. A build made by another server sharing
 * the file store is fetched once; a warm call only looks it up in a set. The call's timeout
 * covers starting the worker too; `durationMs` in the outcome is the algorithm's own execution
 * time.
 */
export class AlgorithmRuntime implements Executor {
  readonly pool: WorkerPool;
  /** Pre-started workers, when on (RuntimeOptions.spares). */
  readonly spares: Spares | undefined;

  constructor(
    private readonly builds: BuildFiles,
    readonly options: RuntimeOptions = DEFAULT_RUNTIME,
  ) {
    this.pool = new WorkerPool(options.pool, options.metrics);
    const spares = options.spares;
    if (spares !== undefined && spares.perRunner > 0 && !options.unsandboxed && options.gvisor === undefined) {
      const limits = options.limits;
      const started = { startTimeoutMs: options.startTimeoutMs, maxStdoutBytes: options.maxStdoutBytes };
      this.spares = new Spares((runner, algoDir) => Worker.spare({ runner, algoDir, entry: '', network: false, limits, bwrap: options.bwrapPath, spare: true }, started), spares, options.log);
    }
  }

  run(job: Job, host?: HostHandler, within?: Span): Promise<Outcome> {
    const tracing = this.options.tracing ?? NO_TRACING;
    // Not exporting, or no span of its own: the job's traceparent goes on to the runner as it
    // came, and the wait's attributes go on the span the call runs in (given by the caller).
    if (!tracing.exporting) return this.runJob(job, host, undefined);
    if (!this.options.runSpans) return this.runJob(job, host, within?.recording ? within : undefined, job.traceparent);
    const span = tracing.start('run', 'server', parseTraceparent(job.traceparent), {
      'algohost.algorithm_id': job.target.build.algorithmId,
      'algohost.build': job.target.build.hash,
      'algohost.runner': job.target.runner,
      'algohost.timeout_ms': job.timeoutMs,
      'algohost.depth': job.nesting + 1,
    });
    return this.runJob(job, host, span).then(
      (outcome) => {
        span.set('algohost.outcome', outcome.kind);
        span.set('algohost.duration_ms', outcome.durationMs);
        if (outcome.kind !== 'result' && outcome.kind !== 'algorithm_error') span.fail(outcome.kind);
        span.end();
        return outcome;
      },
      (err: unknown) => {
        span.fail(err instanceof Error ? `${err.constructor.name}: ${err.message}` : String(err));
        span.end();
        throw err;
      },
    );
  }

  /** `span`: where the wait's attributes go; `traceparent`: what the runner gives SDK requests (the span's own by default). */
  private runJob(job: Job, host: HostHandler | undefined, span: Span | undefined, traceparent = span === undefined ? job.traceparent : traceparentOf(span)): Promise<Outcome> {
    const { build } = job.target;
    if (this.builds.isPresent(build.algorithmId, 'build', build.hash)) return this.runPresent(job, host, span, traceparent);
    span?.set('algohost.build_fetched', true);
    return this.builds.ensure(build.algorithmId, 'build', build.hash).then((found) => {
      if (!found) throw new BuildMissingError(build);
      return this.runPresent(job, host, span, traceparent);
    });
  }

  /**
   * On the pool. With a span: the wait for a worker (`algohost.worker_wait_ms`, a cold start
   * included: `algohost.cold_start`) set on it. The runner is given `traceparent` for the SDK
   * requests. An outcome of a call that had a worker started for it says so (`coldStart`).
   */
  private async runPresent(job: Job, host: HostHandler | undefined, span: Span | undefined, traceparent: string | undefined): Promise<Outcome> {
    try {
      return await this.onPool(job, host, span, traceparent, true);
    } catch (err) {
      if (!(err instanceof SpareLoadError)) throw err;
      // The spare hung or died loading the build (before the call began): as if no spare had been free.
      this.options.log?.warn({ err, runner: job.target.runner }, 'a pre-started worker could not load a build; starting one for it instead');
      return this.onPool(job, host, span, traceparent, false);
    }
  }

  private async onPool(job: Job, host: HostHandler | undefined, span: Span | undefined, traceparent: string | undefined, spares: boolean): Promise<Outcome> {
    const deadline = performance.now() + job.timeoutMs;
    const asked = span === undefined ? 0 : performance.now();
    // Whether this call had a worker started for it (a cold start), rather than a warm one.
    let cold = false;
    let began = 0;
    const outcome = await this.pool.with(
      job.target.key,
      () => {
        cold = true;
        began = performance.now();
        span?.set('algohost.cold_start', true);
        return this.start(job.target, deadline, spares);
      },
      async (worker) => {
        span?.set('algohost.worker_wait_ms', performance.now() - asked);
        const o = await worker.call(job.contentType, job.input, Math.max(1, deadline - performance.now()), host, traceparent);
        // Only a spare given its build for this call (Spares.take, loadAhead) has a loadedAt on a cold start: loaded once its `ready` came.
        if (cold && worker.loadedAt !== undefined) (this.options.metrics ?? NO_METRICS).coldStart(job.target.runner, (worker.loadedAt - began) / 1000, true);
        return o;
      },
      job.nesting,
      job.timeoutMs,
      job.caller,
      job.weight,
    );
    if (cold) outcome.coldStart = true;
    return outcome;
  }

  /**
   * Starts a worker for a version just published where the version it follows (`after`, a key)
   * has one here and the pool has room (WorkerPool.prewarm): a worker started for its build,
   * not a spare (a spare's load is paired with the call that takes it), built in the background.
   * Not counted as a cold start: no call waited for it.
   */
  warm(target: RunTarget, after: string): void {
    this.pool.prewarm(target.key, after, async () => {
      try {
        const { build } = target;
        if (!this.builds.isPresent(build.algorithmId, 'build', build.hash) && !(await this.builds.ensure(build.algorithmId, 'build', build.hash))) throw new BuildMissingError(build);
        return await this.start(target, performance.now() + this.options.startTimeoutMs, false, false);
      } catch (err) {
        this.options.log?.warn({ err, build: target.build.hash }, 'a worker for a version just published could not be started ahead of its first call; that call starts one');
        throw err;
      }
    });
  }

  /**
   * A worker for the job's build, given until `deadline` (the call's) to be ready: a spare given
   * the build (loading it: Worker.loadAhead), where one is ready and the build can go into one
   * and `spares` allows; else one started for it.
   */
  private async start(target: RunTarget, deadline: number, spares: boolean, counted = true): Promise<Worker> {
    const metrics = this.options.metrics ?? NO_METRICS;
    const began = performance.now();
    const left = () => Math.max(1, Math.min(this.options.startTimeoutMs, deadline - performance.now()));
    if (spares && this.spares !== undefined && !target.network) {
      // Given the build, loading it: the call goes right behind (its cold start is counted once loaded, in onPool).
      const spare = await this.spares.take(target.runner, this.dir(target.build), target.entry, left());
      if (spare !== undefined) return spare;
    }
    try {
      const worker = await Worker.start(
        {
          runner: target.runner,
          algoDir: this.dir(target.build),
          entry: target.entry,
          network: target.network,
          fence: target.network ? this.options.fence?.() : undefined,
          limits: this.options.limits,
          unsandboxed: this.options.unsandboxed,
          bwrap: this.options.bwrapPath,
          gvisor: this.options.gvisor,
        },
        { startTimeoutMs: left(), maxStdoutBytes: this.options.maxStdoutBytes },
      );
      if (counted) metrics.coldStart(target.runner, (performance.now() - began) / 1000, true);
      return worker;
    } catch (err) {
      if (counted) metrics.coldStart(target.runner, 0, false);
      throw new WorkerStartError((err as Error).message);
    }
  }

  private dir(build: BuildRef): string {
    return this.builds.dir(build.algorithmId, 'build', build.hash);
  }

  async close(): Promise<void> {
    await Promise.all([this.pool.close(), this.spares?.close()]);
  }
}
