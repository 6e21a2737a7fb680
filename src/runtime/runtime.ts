import { WorkerPool, DEFAULT_POOL, type PoolOptions } from './pool.ts';
import { Worker, type ContentType, type HostHandler, type Outcome } from './worker.ts';
import { DEFAULT_LIMITS, type RunnerKind, type SandboxLimits } from './sandbox.ts';

/** One runnable build: where its files are and how to start it. */
export interface RunTarget {
  /** Pool key: workers are never shared between builds. */
  key: string;
  dir: string;
  runner: RunnerKind;
  entry: string;
  network: boolean;
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
}

export const DEFAULT_RUNTIME: RuntimeOptions = {
  pool: DEFAULT_POOL,
  limits: DEFAULT_LIMITS,
  unsandboxed: false,
  maxStdoutBytes: 1024 * 1024,
  startTimeoutMs: 30_000,
};

/** A worker could not be started (it hung or died before it was ready). */
export class WorkerStartError extends Error {}

/**
 * Runs calls on warm workers: takes one from the pool (starting it if need be) and hands it
 * the input. The call's timeout covers starting the worker too; `durationMs` in the outcome
 * is the algorithm's own execution time.
 */
export class AlgorithmRuntime {
  readonly pool: WorkerPool;

  constructor(readonly options: RuntimeOptions = DEFAULT_RUNTIME) {
    this.pool = new WorkerPool(options.pool);
  }

  /** `nesting`: how many calls up the chain hold workers while they wait for this one. */
  run(target: RunTarget, contentType: ContentType, input: Buffer, timeoutMs: number, host?: HostHandler, nesting = 0): Promise<Outcome> {
    const deadline = performance.now() + timeoutMs;
    return this.pool.with(
      target.key,
      () => this.start(target, deadline),
      (worker) => worker.call(contentType, input, Math.max(1, deadline - performance.now()), host),
      nesting,
      timeoutMs,
    );
  }

  /** A worker for `target`, given until `deadline` (the call's) to be ready. */
  private async start(target: RunTarget, deadline: number): Promise<Worker> {
    try {
      return await Worker.start(
        {
          runner: target.runner,
          algoDir: target.dir,
          entry: target.entry,
          network: target.network,
          limits: this.options.limits,
          unsandboxed: this.options.unsandboxed,
          bwrap: this.options.bwrapPath,
        },
        { startTimeoutMs: Math.max(1, Math.min(this.options.startTimeoutMs, deadline - performance.now())), maxStdoutBytes: this.options.maxStdoutBytes },
      );
    } catch (err) {
      throw new WorkerStartError((err as Error).message);
    }
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}
