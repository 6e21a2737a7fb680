import type { ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { FrameDecoder, encodeCall, encodeFrame, type Frame } from './protocol.ts';
import { cgroupOf, sandboxFailure, spawnSandbox, type SandboxSpec } from './sandbox.ts';
import type { AlgorithmErrorInfo, ContentType, HostAnswer, HostHandler, Outcome } from './contract.ts';

/**
 * Requests one call may have in flight at once. A request counts until its answer has been
 * written to the channel: an algorithm that stops reading cannot make the server queue answers.
 */
const MAX_HOST_REQUESTS = 8;

export interface WorkerOptions {
  startTimeoutMs?: number;
  maxStdoutBytes?: number;
}

const STDERR_KEEP = 16 * 1024;
/** Longest wait for stdout a runner says it wrote before answering. */
const STDOUT_WAIT_MS = 1000;
const RESULT_TYPES = new Set(['json', 'text', 'binary', 'void']);

/** The error types of the original runtimes (compat.md); anything else is an AlgorithmError. */
const ERROR_TYPES = new Set([
  'AlgorithmError', 'InputError', 'UnsupportedError', 'InitializationError', 'LoadingError', 'OutOfMemoryError',
  'TooLargeError', 'ParsingError', 'EntityNotFoundError', 'TimeoutError', 'SystemExit',
]);

function errorInfo(raw: unknown): AlgorithmErrorInfo {
  const e = (typeof raw === 'object' && raw !== null ? raw : {}) as Record<string, unknown>;
  const str = (v: unknown, max: number) => (typeof v === 'string' ? v : v === undefined ? '' : String(v)).slice(0, max);
  const type = str(e.error_type, 64);
  return { message: str(e.message, 64 * 1024) || 'the algorithm failed', stacktrace: str(e.stacktrace, 256 * 1024), error_type: ERROR_TYPES.has(type) ? type : 'AlgorithmError' };
}

/**
 * One timer for the deadlines of every worker's wait (a call's answer, a start's `ready`),
 * armed for the earliest: a call costs a Set entry, not a timer of its own. Waits with the
 * same timeout end in the order they began, so the timer mostly stays armed as it is.
 */
class Deadlines {
  private readonly waiting = new Set<Worker>();
  private timer: NodeJS.Timeout | undefined;
  /** performance.now() the timer fires at. */
  private armedAt = Infinity;

  add(w: Worker, at: number): void {
    this.waiting.add(w);
    if (at < this.armedAt) this.arm(at);
  }

  delete(w: Worker): void {
    this.waiting.delete(w);
  }

  private arm(at: number): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.armedAt = at;
    this.timer = setTimeout(() => this.fire(), Math.max(0, at - performance.now()));
    // Whatever waits keeps the event loop alive by its own channel; the timer need not.
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    this.armedAt = Infinity;
    const now = performance.now();
    let next = Infinity;
    for (const w of this.waiting) {
      if (w.deadline <= now) {
        this.waiting.delete(w);
        w.settle('timeout');
      } else if (w.deadline < next) next = w.deadline;
    }
    if (next < Infinity) this.arm(next);
  }
}

const deadlines = new Deadlines();

const NO_STDOUT: Buffer[] = [];

/** A spare given its build by loadAhead did not load it (it hung or died): start a worker for the build instead. */
export class SpareLoadError extends Error {}

/**
 * One sandboxed process running one algorithm version, answering one call at a time. A
 * worker whose call timed out or whose process died is dead: the pool replaces it.
 */
export class Worker {
  private readonly decoder = new FrameDecoder();
  private readonly channel: Readable & Writable;
  private readonly exited: Promise<{ code: number | null; signal: string | null }>;
  /** Set while next() waits for a frame: settled by the frame, the exit, or the deadline. */
  private waiting: ((r: Frame | 'timeout' | 'exited') => void) | undefined;
  /** performance.now() by which the frame waited for must have come (Deadlines). */
  deadline = Infinity;
  private stdout: Buffer[] = NO_STDOUT;
  private stdoutBytes = 0;
  private stdoutTotal = 0;
  private stderrTail = '';
  /** Set while waiting for output the runner says it wrote before answering. */
  private stdoutWanted: { bytes: number; resolve: () => void } | undefined;
  private nextId = 1;
  private busy = false;
  private host: HostHandler | undefined;
  private hostInFlight = 0;
  /** The call whose requests are being served; answers to an earlier call's are dropped. */
  private callId = 0;
  dead = false;
  loadError: AlgorithmErrorInfo | undefined;

  private constructor(
    private readonly child: ChildProcess,
    private readonly maxStdout: number,
  ) {
    this.channel = child.stdio[3] as Readable & Writable;
    this.channel.on('data', (chunk: Buffer) => {
      try {
        for (const frame of this.decoder.push(chunk)) {
          if (frame.header.type === 'request') this.hostRequest(frame);
          else if (this.readyWanted !== undefined && frame.header.type === 'ready') this.onReady(frame);
          else this.settle(frame);
        }
      } catch {
        this.kill();
      }
    });
    this.channel.on('error', () => undefined);
    child.stdout!.on('data', (chunk: Buffer) => this.onStdout(chunk));
    child.stderr!.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_KEEP);
    });
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.dead = true;
        resolve({ code, signal });
        this.settle('exited');
      });
    });
  }

  private onStdout(chunk: Buffer): void {
    // Before the `ready` of a loadAhead, held: `ready` says how many bytes the build printed
    // while loading, which are no caller's (as for a worker started for its build); the call's
    // may come before the `ready` is read (stdout and the channel are separate pipes).
    if (this.loadPending !== undefined || this.readyWanted !== undefined) {
      if (this.loadHeldBytes <= this.maxStdout + 65536) this.loadHeld.push(chunk);
      this.loadHeldBytes += chunk.length;
      return;
    }
    if (this.stdoutSkip > 0) {
      const k = Math.min(this.stdoutSkip, chunk.length);
      this.stdoutSkip -= k;
      chunk = chunk.subarray(k);
      if (chunk.length === 0) return;
    }
    // Output between calls (a timer firing after an answer) belongs to no caller.
    if (!this.busy) return;
    this.stdoutTotal += chunk.length;
    if (this.stdoutWanted !== undefined && this.stdoutTotal >= this.stdoutWanted.bytes) this.stdoutWanted.resolve();
    if (this.stdoutBytes < this.maxStdout) {
      const keep = chunk.subarray(0, this.maxStdout - this.stdoutBytes);
      if (this.stdout === NO_STDOUT) this.stdout = [];
      this.stdout.push(keep);
      this.stdoutBytes += keep.length;
    }
  }

  /** Starts a worker and waits until its algorithm is loaded (or failed to load). */
  static async start(spec: SandboxSpec, options: WorkerOptions = {}): Promise<Worker> {
    const worker = new Worker(spawnSandbox(spec), options.maxStdoutBytes ?? 1024 * 1024);
    const ready = await worker.expect('ready', options.startTimeoutMs ?? 30_000);
    worker.loadError = ready.header.load_error === undefined ? undefined : errorInfo(ready.header.load_error);
    return worker;
  }

  /**
   * Starts a pre-started worker (`spec.spare`: spares.ts), ready once its runner is up in
   * its sandbox, before it has any build; `loadAhead` gives it the one build it will ever run.
   */
  static async spare(spec: SandboxSpec, options: WorkerOptions = {}): Promise<Worker> {
    const worker = new Worker(spawnSandbox(spec), options.maxStdoutBytes ?? 1024 * 1024);
    await worker.expect('spare', options.startTimeoutMs ?? 30_000);
    return worker;
  }

  /**
   * Has a spare load its build, whose files are now in its /algo (spares.ts), from `entry`,
   * without waiting: the next `call` is written right behind the `load` frame (the runner takes
   * it once loaded) and waits for `ready` before its answer, so a cold call on a spare costs one
   * round trip to the runner. A build that fails to load is the algorithm's (`loadError`, as for
   * a worker started for it). If the runner does not answer `ready` within `timeoutMs`, or exits
   * first, that `call` kills it and throws SpareLoadError (the caller starts a worker for the
   * build instead).
   */
  loadAhead(entry: string, timeoutMs: number): void {
    if (this.dead) throw new Error('the pre-started worker has exited');
    this.channel.write(encodeFrame({ type: 'load', entry }));
    this.loadPending = timeoutMs;
  }

  /** When the build was loaded (performance.now()), for a worker given its build by loadAhead: the runtime's cold-start time. */
  loadedAt: number | undefined;
  /** A loadAhead's time for `ready`, until the next call is written. */
  private loadPending: number | undefined;
  /** Stdout read before the `ready` of a loadAhead (onReady sorts it), and how much of what follows is still the load's. */
  private loadHeld: Buffer[] = [];
  private loadHeldBytes = 0;
  private stdoutSkip = 0;
  /** Set while a call written behind a loadAhead waits for its `ready`: the call's own timeout and start. */
  private readyWanted: { timeoutMs: number; started: number } | undefined;

  /**
   * The `ready` of a loadAhead, read in the same chunk as the answer behind it as often as not:
   * taken here, not as the call's answer, and the call's deadline becomes its own from now.
   */
  private onReady(frame: Frame): void {
    const { timeoutMs, started } = this.readyWanted!;
    this.readyWanted = undefined;
    this.loadError = frame.header.load_error === undefined ? undefined : errorInfo(frame.header.load_error);
    const now = performance.now();
    this.loadedAt = now;
    // The first `stdout_bytes` of what came and comes are the load's: skipped; the rest is the call's.
    const printed = frame.header.stdout_bytes;
    this.stdoutSkip = typeof printed === 'number' && printed > 0 ? Math.min(printed, 1 << 40) : 0;
    const held = this.loadHeld;
    this.loadHeld = [];
    this.loadHeldBytes = 0;
    for (const c of held) this.onStdout(c);
    // The deadlines' timer reads it when it fires, and waits on for a later one.
    this.deadline = now + Math.max(1, timeoutMs - (now - started));
  }

  /** The next frame, which must be of `type`; otherwise the worker is killed and this throws why. */
  private async expect(type: 'ready' | 'spare', timeoutMs: number): Promise<Frame> {
    const frame = await this.next(timeoutMs);
    if (frame === 'timeout' || frame === 'exited' || frame.header.type !== type) {
      const why = frame === 'timeout' ? 'did not start in time' : `exited while starting: ${sandboxFailure(this.child) ?? this.stderrTail.trim().slice(-2000)}`;
      this.kill();
      throw new Error(`worker ${why}`);
    }
    return frame;
  }

  /** The next frame, or why none came. */
  private next(timeoutMs: number): Promise<Frame | 'timeout' | 'exited'> {
    if (this.dead) return Promise.resolve('exited');
    return new Promise((resolve) => {
      this.waiting = resolve;
      this.deadline = performance.now() + timeoutMs;
      deadlines.add(this, this.deadline);
    });
  }

  /** Ends next()'s wait, if one is under way (Deadlines calls it with 'timeout'). */
  settle(r: Frame | 'timeout' | 'exited'): void {
    const waiting = this.waiting;
    if (waiting === undefined) return;
    this.waiting = undefined;
    deadlines.delete(this);
    waiting(r);
  }

  /** Runs one call. Never throws for anything the algorithm does. */
  /** `traceparent`: the run's, which the runner gives the algorithm's SDK requests (docs/traces.md). */
  async call(contentType: ContentType, input: Buffer, timeoutMs: number, host?: HostHandler, traceparent?: string): Promise<Outcome> {
    if (this.busy || this.dead) throw new Error('worker is busy or dead');
    this.busy = true;
    this.host = host;
    this.stdout = NO_STDOUT;
    this.stdoutBytes = 0;
    this.stdoutTotal = 0;
    let started = performance.now();
    const id = this.nextId++;
    this.callId = id;
    try {
      this.channel.write(encodeCall(id, contentType, input, traceparent));
      const ahead = this.loadPending;
      if (ahead !== undefined) {
        // Behind a loadAhead: its `ready` comes first (taken by the channel's reader: onReady).
        this.loadPending = undefined;
        this.readyWanted = { timeoutMs, started };
      }
      const answer = await this.next(ahead === undefined ? timeoutMs : Math.min(ahead, timeoutMs));
      if (this.readyWanted !== undefined) {
        this.readyWanted = undefined;
        const why = answer === 'timeout' ? 'did not load its build in time' : answer === 'exited' ? `exited while loading its build: ${this.stderrTail.trim().slice(-2000)}` : `answered ${String(answer.header.type)} before ready`;
        this.kill();
        throw new SpareLoadError(`pre-started worker ${why}`);
      }
      if (ahead !== undefined) started = this.loadedAt!;
      const elapsed = performance.now() - started;
      if (answer === 'timeout') {
        this.kill();
        return { kind: 'timeout', stdout: this.stdoutText(), stdoutTruncated: this.truncated(), durationMs: elapsed };
      }
      if (answer === 'exited') {
        const { code, signal } = await this.exited;
        // Two ways to run out: V8 stops at its heap cap (and says so on stderr) before the
        // cgroup limit; memory outside the heap meets the cgroup's OOM killer (a bare SIGKILL).
        if (cgroupOf(this.child)?.oomKilled() || /heap out of memory|Allocation failed/i.test(this.stderrTail)) {
          return { kind: 'out_of_memory', stdout: this.stdoutText(), stdoutTruncated: this.truncated(), durationMs: elapsed };
        }
        return { kind: 'crashed', exitCode: code, signal, stdout: this.stdoutText(), stdoutTruncated: this.truncated(), durationMs: elapsed };
      }
      // The channel and stdout are separate pipes: what the algorithm printed before answering
      // may arrive after the answer. Runners say how much they wrote; wait for it, briefly.
      const h = answer.header;
      const wait = this.stdoutArrived(typeof h.stdout_bytes === 'number' ? h.stdout_bytes : undefined);
      if (wait !== undefined) await wait;
      // The algorithm shares the runner's process and could write frames itself: accept only
      // a well-formed answer to this call, and never a duration longer than we measured.
      const durationMs = typeof h.duration_ms === 'number' && h.duration_ms >= 0 ? Math.min(h.duration_ms, elapsed) : elapsed;
      if (h.id !== id || (h.type !== 'result' && h.type !== 'error')) return this.violation(elapsed);
      if (h.type === 'result') {
        if (!RESULT_TYPES.has(h.content_type as string)) return this.violation(elapsed);
        return { kind: 'result', contentType: h.content_type as ContentType | 'void', body: answer.body, stdout: this.stdoutText(), stdoutTruncated: this.truncated(), durationMs };
      }
      return { kind: 'algorithm_error', error: errorInfo(h.error), stdout: this.stdoutText(), stdoutTruncated: this.truncated(), durationMs };
    } finally {
      this.busy = false;
      this.host = undefined;
      this.hostInFlight = 0;
    }
  }

  /** A request from the algorithm: served for the call in progress only, a few at a time. */
  private hostRequest(frame: Frame): void {
    const rid = frame.header.rid;
    if (typeof rid !== 'number' && typeof rid !== 'string') return void this.kill();
    const call = this.callId;
    const reply = (answer: HostAnswer, counted: boolean) => {
      const finished = () => {
        answer.done?.();
        if (counted && call === this.callId) this.hostInFlight--;
      };
      if (this.dead || call !== this.callId || !this.busy) return finished();
      this.channel.write(encodeFrame({ ...answer.header, type: 'response', rid }, answer.body), finished);
    };
    const refuse = (error: string) => reply({ header: { status: 0, error }, body: Buffer.alloc(0) }, false);
    const host = this.host;
    // A build loading behind a loadAhead is not in a call yet: its load() gets no caller's
    // requests served, as on a worker started for its build.
    if (!this.busy || !host || this.readyWanted !== undefined) return refuse('no call is in progress');
    if (this.hostInFlight >= MAX_HOST_REQUESTS) return refuse(`at most ${MAX_HOST_REQUESTS} requests at once`);
    this.hostInFlight++;
    host(frame.header, frame.body).then(
      (answer) => reply(answer, true),
      (err: unknown) => reply({ header: { status: 0, error: err instanceof Error ? err.message : String(err) }, body: Buffer.alloc(0) }, true),
    );
  }

  /**
   * Until `bytes` of stdout arrived this call (bounded: the count comes from the sandbox);
   * undefined when they already have.
   */
  private stdoutArrived(bytes: number | undefined): Promise<void> | undefined {
    // A runner that does not count: let what is already on its way arrive, and no more.
    if (bytes === undefined) return new Promise((r) => setImmediate(r));
    const wanted = Math.min(bytes, this.maxStdout + 1);
    if (this.stdoutTotal >= wanted) return undefined;
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.stdoutWanted = undefined;
        resolve();
      }, STDOUT_WAIT_MS);
      this.stdoutWanted = {
        bytes: wanted,
        resolve: () => {
          clearTimeout(timer);
          this.stdoutWanted = undefined;
          resolve();
        },
      };
    });
  }

  /** A malformed answer: the worker cannot be trusted with another call. */
  private violation(elapsed: number): Outcome {
    this.kill();
    return { kind: 'crashed', exitCode: null, signal: null, stdout: this.stdoutText(), stdoutTruncated: this.truncated(), durationMs: elapsed };
  }

  /** What the algorithm printed this call, as far as it is kept. */
  private stdoutText(): string {
    const s = this.stdout;
    return s.length === 0 ? '' : s.length === 1 ? s[0]!.toString('utf8') : Buffer.concat(s).toString('utf8');
  }

  private truncated(): boolean {
    return this.stdoutTotal > this.stdoutBytes;
  }

  /** Kills the whole sandbox at once (its process group; bwrap takes its pid namespace along). */
  kill(): void {
    if (this.child.pid !== undefined && !this.dead) {
      try {
        process.kill(-this.child.pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
    // Dead from now on, not only once the exit is reaped: nobody may hand it another call.
    this.dead = true;
  }

  /** Stops in stages: close the channel (the runner exits), then SIGTERM, then SIGKILL. */
  async stop(graceMs = 1000): Promise<void> {
    if (this.dead) {
      await this.exited;
      return;
    }
    this.channel.end();
    const gone = (ms: number) => Promise.race([this.exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);
    if (await gone(graceMs)) return;
    try {
      process.kill(-this.child.pid!, 'SIGTERM');
    } catch {
      /* already gone */
    }
    if (await gone(graceMs)) return;
    this.kill();
    await this.exited;
  }

  /** Resolves when the worker's process has exited and been reaped. */
  get done(): Promise<unknown> {
    return this.exited;
  }
}
