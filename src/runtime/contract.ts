/**
 * What runs algorithms, as the rest of the server sees it (docs/architecture.md, "Executors").
 * The call path (algorithms/calls.ts, http/callRoutes.ts) imports these types and nothing else
 * of src/runtime: an executor may be this process's pool of sandboxed workers (runtime.ts) or,
 * in a cluster, workers on other machines. Everything here is data that can cross a process
 * boundary: a target names a build (any node can fetch it), never a directory of this one.
 */

import type { Span } from '../tracing.ts';

export type ContentType = 'json' | 'text' | 'binary';

/** The language runtime a build runs on. */
export type RunnerKind = 'node' | 'python';

export interface AlgorithmErrorInfo {
  message: string;
  stacktrace: string;
  error_type: string;
}

interface Output {
  /** What the algorithm printed during the call, at most the runtime's stdout limit. */
  stdout: string;
  stdoutTruncated: boolean;
  /** Algorithm execution time (not waiting), ms. */
  durationMs: number;
  /** Set when a worker was started for this call (a cold start): the answer says so (`X-Cold-Start`). */
  coldStart?: boolean;
}

/**
 * Everything a call can come to. Algorithm faults are outcomes, never exceptions: the caller
 * handles each kind in an exhaustive switch.
 */
export type Outcome =
  | ({ kind: 'result'; contentType: ContentType | 'void'; body: Buffer } & Output)
  | ({ kind: 'algorithm_error'; error: AlgorithmErrorInfo } & Output)
  | ({ kind: 'timeout' } & Output)
  | ({ kind: 'out_of_memory' } & Output)
  | ({ kind: 'crashed'; exitCode: number | null; signal: string | null } & Output);

/**
 * Serves what an algorithm asks of the platform during a call (the in-algorithm SDK: data,
 * nested calls): a request in, an answer out, as the call's identity.
 */
export type HostHandler = (header: Record<string, unknown>, body: Buffer) => Promise<HostAnswer>;

export interface HostAnswer {
  header: Record<string, unknown>;
  body: Buffer;
  /** Called once the answer has been delivered (or dropped): frees what it held. */
  done?: () => void;
}

/** A build, by name: the algorithm's id and the build's content hash. */
export interface BuildRef {
  algorithmId: number;
  hash: string;
}

/** One runnable build and how to start it. */
export interface RunTarget {
  build: BuildRef;
  /** targetKey(build, network): warm workers are kept per key and never shared between builds. */
  key: string;
  runner: RunnerKind;
  entry: string;
  /** Whether the algorithm may reach the network. */
  network: boolean;
}

/**
 * The key warm workers of a build are kept under: its algorithm and content hash, and whether
 * it has the network (a worker started with it never serves a call without). Always derived,
 * never taken from a message (a worker node computes it from the job's build itself).
 */
export function targetKey(build: BuildRef, network: boolean): string {
  return network ? `${build.algorithmId}:${build.hash}:net` : `${build.algorithmId}:${build.hash}`;
}

/** One call to run. */
export interface Job {
  target: RunTarget;
  contentType: ContentType;
  input: Buffer;
  /** The whole call's time, starting a worker included. */
  timeoutMs: number;
  /** How many calls up the chain hold workers while they wait for this one. */
  nesting: number;
  /**
   * Who pays for the call (opaque: the user's id): calls waiting for a worker wait per caller
   * and are served in turns across callers (docs/limits.md, "Fair shares"). None: one shared line.
   */
  caller?: string | undefined;
  /** The caller's share of the workers when calls wait (docs/limits.md, "Shares"): calls of theirs served a turn; none: 1. */
  weight?: number | undefined;
  /**
   * The W3C traceparent of the span that sent the job (docs/traces.md): the run's span on the
   * worker is its child, and the algorithm's SDK requests carry the run's on.
   */
  traceparent?: string | undefined;
}

export interface Executor {
  /**
   * Runs `job`; `host` answers the algorithm's requests. Resolves with the outcome, whatever the
   * algorithm did; rejects with one of the errors below when the job could not be run at all.
   * `span`: the span the call runs in on this node (its request's, its async run's, its trigger
   * run's; docs/traces.md), for an executor that runs it here and records no span of its own
   * to put the wait's attributes on. An executor that sends the job elsewhere ignores it (the
   * job's `traceparent` is what crosses).
   */
  run(job: Job, host?: HostHandler, span?: Span): Promise<Outcome>;
  /**
   * A version just published (`target`) follows the version whose key is `after` (docs/limits.md,
   * "Cold starts": warming a new version): where that one has a worker, start one for `target`
   * ahead of its first call, if there is room. Best effort: it returns at once, and nothing it
   * fails to do is anyone's error.
   */
  warm?(target: RunTarget, after: string): void;
  close(): Promise<void>;
}

const BUSY = {
  queue_full: 'too many calls are waiting for a worker',
  caller_queue_full: 'you have too many calls waiting for a worker',
  queue_timeout: 'no worker became free in time',
  no_workers: 'no worker node is running',
} as const;

/**
 * No worker could be had: too many calls are waiting (the caller's own: `caller_queue_full`; all
 * callers': `queue_full`), the wait ran out, or there is none.
 */
export class ExecutorBusyError extends Error {
  constructor(readonly reason: keyof typeof BUSY) {
    super(BUSY[reason]);
  }
}

/** A worker could not be started (it hung or died before it was ready). */
export class WorkerStartError extends Error {}

/** The build is neither where this executor runs nor in the shared file store. */
export class BuildMissingError extends Error {
  constructor(readonly build: BuildRef) {
    super(`build ${build.hash} of algorithm ${build.algorithmId} is missing`);
  }
}

/**
 * The machine running the job stopped answering while the job ran (a worker node of a cluster
 * died or was cut off): whether the algorithm ran to its end is unknown.
 */
export class WorkerLostError extends Error {}
