import crypto from 'node:crypto';
import { AppError } from '../errors.ts';
import { errorDocument, toAppError } from '../http/answers.ts';
import type { Principal, TriggerOrigin } from '../auth/principal.ts';
import type { KeyService } from '../auth/keyService.ts';
import type { Db, MetadataStore } from '../store/db.ts';
import type { AsyncRequestsTable } from '../store/schema.ts';
import type { Selectable } from 'kysely';
import { envelope } from './envelope.ts';
import { MAX_DETACHED, type CallRequest, type CallResult, type CallService } from './calls.ts';
import type { CallLog } from './callLog.ts';
import type { AsyncRequest } from '../../client/src/types.ts';
import { appendEvent, type NewEvent } from '../events/outbox.ts';
import { FairQueue } from '../fairQueue.ts';
import { NO_TRACING, parseTraceparent, traceparentOf, type Span, type Tracer } from '../tracing.ts';

/**
 * How a queue runs an accepted request: 'done' once its answer is stored (or it was done
 * already), 'retry' when the queue should give it again later (its worker node was lost, no
 * worker was free, another node is running it now).
 */
export type AsyncRun = (id: string) => Promise<'done' | 'retry'>;

/** How long an accepted async call may keep finding no worker free before that is its answer (503). */
export const BUSY_GIVE_UP_MS = 15 * 60_000;

/** Where accepted requests wait to be run: this process (LocalQueue) or JetStream (cluster/asyncQueue.ts). */
export interface AsyncQueue {
  /**
   * Resolves once request `id` is queued as durably as this queue can: the caller is then told it
   * was accepted. `caller` (the user's id) is whose turn it waits for, where the queue keeps turns,
   * and `weight` their share of those turns (docs/limits.md, "Shares"; 1 when not said).
   */
  enqueue(id: string, caller?: string, weight?: number): Promise<void>;
  /** Starts running what is queued, through `run`. */
  start(run: AsyncRun): void;
  /**
   * Whether the queue itself survives this process (JetStream): if not, requests a process left
   * unfinished are found in the store and queued again (AsyncCalls.recover).
   */
  readonly durable: boolean;
  /** Calls waiting and running (docs/metrics.md): the whole queue's where it is shared (JetStream). */
  depth?(): Promise<{ pending: number; running: number }>;
  close(): Promise<void>;
}

export interface AsyncOptions {
  /** How long an answer is kept after the call ends (ALGOHOST_ASYNC_RESULT_TTL_S). */
  resultTtlMs: number;
  /** Attempts at most, each start of the call counting (ALGOHOST_ASYNC_ATTEMPTS). */
  maxAttempts: number;
  /** Each run's span, in the trace of the request that made the call (docs/traces.md). */
  tracing?: Tracer | undefined;
}

export const DEFAULT_ASYNC: AsyncOptions = { resultTtlMs: 24 * 3600_000, maxAttempts: 3 };

/**
 * What is written in the transaction that stores an accepted request, and in the one that
 * withdraws it when it could not be queued: an `Idempotency-Key`'s answer
 * (http/idempotency.ts), so that the key and the request exist together or not at all.
 */
export interface AcceptedWith {
  accepted(trx: Db, id: string): Promise<void>;
  withdrawn(trx: Db, id: string): Promise<void>;
}

/**
 * Calls with `output=void`. Checked like any call before they are accepted (a key that may not
 * call, an algorithm that is not there: answered at once, as before); then the request, input
 * and all, is written to the store, queued, and only then is the caller given its
 * `request_id`. A queue runs it through the same CallService as a sync call, as the caller's
 * key stands at that moment, and its answer (the envelope a sync call would have had, or the
 * HTTP error) is stored and kept for `resultTtlMs`, for `GET /v1/requests/:id`.
 *
 * A request may be run more than once (a node lost mid-call: at-least-once); the first answer
 * stored is the one kept, so a caller sees exactly one.
 */
export class AsyncCalls {
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly store: MetadataStore,
    private readonly calls: CallService,
    private readonly keys: KeyService,
    private readonly queue: AsyncQueue,
    private readonly options: AsyncOptions = DEFAULT_ASYNC,
    private readonly log?: CallLog,
  ) {
    queue.start((id) => this.run(id));
    this.timer = setInterval(() => void this.expire().catch((err: unknown) => log?.warn({ err }, 'expiring async answers failed')), Math.min(60_000, Math.max(1000, options.resultTtlMs / 4)));
    this.timer.unref();
  }

  /**
   * Accepts `req`: its immediate answer (`early`) when it cannot run (checked now), else the
   * request id it was queued under.
   */
  async accept(principal: Principal, req: CallRequest, log?: CallLog, along?: AcceptedWith): Promise<{ early: CallResult } | { id: string }> {
    if (req.parent) {
      // From inside a running algorithm: runs beside its caller, in this process, untracked.
      const early = await this.calls.callDetached(principal, req, log);
      return early ? { early } : { id: newRequestId() };
    }
    const early = await this.calls.check(principal, req);
    if (early) return { early };
    const id = newRequestId();
    const row = {
      id,
      user_id: principal.userId,
      key_id: principal.keyId,
      owner: req.owner,
      name: req.name,
      version: req.version ?? null,
      content_type: req.contentType,
      input: req.input,
      timeout_s: req.timeoutS,
      stdout: req.stdout ? 1 : 0,
      status: 'queued' as const,
      attempts: 0,
      holder: this.store.instance,
      response_status: null,
      response: null,
      created_at: Date.now(),
      started_at: null,
      finished_at: null,
      // Its run continues the request's trace, on whichever node runs it (docs/traces.md).
      traceparent: req.trace === undefined ? (principal.traceparent ?? null) : traceparentOf(req.trace),
    };
    if (along) {
      await this.store.write(async (trx) => {
        await trx.insertInto('async_requests').values(row).execute();
        await along.accepted(trx, id);
      });
    } else {
      await this.store.db.insertInto('async_requests').values(row).execute();
    }
    try {
      await this.queue.enqueue(id, String(principal.userId), this.calls.shareOf(principal));
    } catch (err) {
      if (along) {
        await this.store.write(async (trx) => {
          await trx.deleteFrom('async_requests').where('id', '=', id).execute();
          await along.withdrawn(trx, id);
        });
      } else {
        await this.store.db.deleteFrom('async_requests').where('id', '=', id).execute();
      }
      if (err instanceof AppError) throw err;
      throw new AppError('server_busy', `the call could not be queued (${(err as Error).message}); retry shortly`, undefined, err);
    }
    return { id };
  }

  /**
   * Queues request `id` again if it is still waiting and the process that accepted it is gone:
   * one that died between storing the request and queueing it (what an `Idempotency-Key`'s
   * replay names must run). A request that is in the queue after all is only run once: a second
   * delivery finds it claimed or done (run). Whether it was queued again.
   */
  async requeueOrphan(id: string): Promise<boolean> {
    const row = await this.store.db.selectFrom('async_requests').select(['status', 'holder', 'user_id']).where('id', '=', id).executeTakeFirst();
    if (!row || row.status !== 'queued' || row.holder === null || (await this.store.isLive(row.holder))) return false;
    const took = await this.store.db
      .updateTable('async_requests')
      .set({ holder: this.store.instance })
      .where('id', '=', id)
      .where('status', '=', 'queued')
      .where('holder', '=', row.holder)
      .executeTakeFirst();
    if (Number(took.numUpdatedRows) === 0) return false;
    try {
      await this.queue.enqueue(id, String(row.user_id));
      return true;
    } catch {
      // No room now: recovery (a restart, a shared store's sweeper) or the next replay takes it.
      await this.store.db.updateTable('async_requests').set({ holder: row.holder }).where('id', '=', id).where('holder', '=', this.store.instance).execute();
      return false;
    }
  }

  /** Requests this process is running now (a second delivery of one of them waits its turn). */
  private readonly running = new Set<string>();

  /**
   * Runs request `id` (a queue's AsyncRun). The row is claimed first (only as it was read, so two
   * nodes never both start it); a request another live process is running is left to it
   * ('retry'). Only a real start counts as an attempt: a call whose node was lost counts, one
   * that found no worker free (503) does not, and is retried for up to BUSY_GIVE_UP_MS.
   */
  async run(id: string): Promise<'done' | 'retry'> {
    if (this.running.has(id)) return 'retry';
    const row = await this.store.db.selectFrom('async_requests').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row || row.status === 'done') return 'done';
    if (row.status === 'running' && row.holder !== null && row.holder !== this.store.instance && (await this.store.isLive(row.holder))) return 'retry';
    if (row.attempts >= this.options.maxAttempts) {
      // Started that many times and never finished: each time, the node running it was lost.
      await this.finish(
        row,
        200,
        JSON.stringify({
          error: { message: `the call was started ${row.attempts} times and each time the node running it was lost; it is not tried again`, error_type: 'WorkerLostError' },
          metadata: { duration: 0 },
        }),
        row.traceparent,
      );
      return 'done';
    }
    const tracing = this.options.tracing ?? NO_TRACING;
    const attributes = tracing.exporting
      ? { 'algohost.request_id': id, 'algohost.algorithm': `${row.owner}/${row.name}`, 'algohost.attempt': row.attempts + 1, 'algohost.queue_wait_ms': Date.now() - Number(row.created_at) }
      : undefined;
    const span = tracing.start(`async ${row.owner}/${row.name}`, 'consumer', parseTraceparent(row.traceparent), attributes);
    try {
      return await this.runRow(id, row, span);
    } finally {
      span.end();
    }
  }

  /** A request read from the store, not yet done: claimed, run, and its answer stored. */
  private async runRow(id: string, row: Selectable<AsyncRequestsTable>, span: Span): Promise<'done' | 'retry'> {
    const n = row.attempts + 1;
    // A queue that cannot give a request back (one process) makes every attempt the last.
    const last = !this.queue.durable || n >= this.options.maxAttempts;
    const claimed = await this.store.db
      .updateTable('async_requests')
      .set({ status: 'running', attempts: n, started_at: Date.now(), holder: this.store.instance })
      .where('id', '=', id)
      .where('status', '=', row.status)
      .where('attempts', '=', row.attempts)
      .executeTakeFirst();
    if (Number(claimed.numUpdatedRows) === 0) return 'retry';
    this.running.add(id);
    let status: number;
    let body: string;
    try {
      const principal = await this.keys.principalById(row.key_id, row.user_id);
      const req: CallRequest = {
        owner: row.owner,
        name: row.name,
        version: row.version ?? undefined,
        contentType: row.content_type,
        input: row.input ?? Buffer.alloc(0),
        timeoutS: row.timeout_s,
        stdout: row.stdout === 1,
        // Its token was taken when it was accepted (CallService.check).
        admitted: true,
        trace: span,
      };
      const result = await this.calls.call(principal, req, this.log);
      if (!last && result.workerLost) return await this.giveBack(id, n);
      status = 200;
      body = envelope(result, row.timeout_s);
    } catch (err) {
      const e = toAppError(err);
      // Short of something another attempt may find (a worker, the store): not a start.
      // A worker node's queue full of this caller's own calls (429 queue_full) is such a moment too.
      if (this.queue.durable && (e.status === 503 || e.code === 'queue_full') && Date.now() - Number(row.created_at) < BUSY_GIVE_UP_MS) return await this.giveBack(id, n - 1);
      if (e.status >= 500) this.log?.warn({ err, request: id }, 'an async call failed');
      status = e.status;
      body = errorDocument(e.code, e.message);
    } finally {
      this.running.delete(id);
    }
    await this.finish(row, status, body, traceparentOf(span));
    return 'done';
  }

  /** Puts a claimed request back in the queue's hands, counted as `attempts` starts. */
  private async giveBack(id: string, attempts: number): Promise<'retry'> {
    await this.store.db
      .updateTable('async_requests')
      .set({ status: 'queued', attempts, holder: null })
      .where('id', '=', id)
      .where('status', '=', 'running')
      .where('holder', '=', this.store.instance)
      .execute();
    return 'retry';
  }

  /**
   * Stores the answer, unless another run stored one first (that one stands), and tells the
   * caller with `call.completed`, in the same transaction (events/outbox.ts): once per request.
   */
  private async finish(row: { id: string; user_id: number; owner: string; name: string; version: string | null; created_at: number }, status: number, body: string, traceparent: string | null): Promise<void> {
    await this.store.write(async (trx) => {
      const now = Date.now();
      const done = await trx
        .updateTable('async_requests')
        .set({ status: 'done', response_status: status, response: body, input: null, holder: null, finished_at: now })
        .where('id', '=', row.id)
        .where('status', '<>', 'done')
        .executeTakeFirst();
      if (Number(done.numUpdatedRows) !== 1) return;
      await appendEvent(trx, { ...callCompleted(row, status, body, now), traceparent });
    });
  }

  /** `GET /v1/requests/:id`: the request's state and, once done, its answer; only its caller's key's user sees it. */
  async get(principal: Principal, id: string): Promise<string> {
    const row = await this.store.db
      .selectFrom('async_requests')
      .select(['id', 'owner', 'name', 'version', 'status', 'attempts', 'response_status', 'response', 'created_at', 'started_at', 'finished_at'])
      .where('id', '=', id)
      .where('user_id', '=', principal.userId)
      .executeTakeFirst();
    if (!row) throw new AppError('request_not_found', `no request "${id.slice(0, 60)}" of yours (answers are kept for ${Math.round(this.options.resultTtlMs / 1000)} s after the call ends)`);
    return describe(row);
  }

  /** Requests a process of this store left unfinished when it stopped: queued again (a non-durable queue only). */
  async recover(): Promise<number> {
    if (this.queue.durable) return 0;
    const open = await this.store.db.selectFrom('async_requests').select(['id', 'holder', 'user_id']).where('status', '<>', 'done').execute();
    let queued = 0;
    for (const r of open) {
      // This process's own rows are its calls in flight (at start it has none).
      if (r.holder === this.store.instance || (await this.store.isLive(r.holder))) continue;
      // Taken by whichever server gets here first.
      const took = await this.store.db
        .updateTable('async_requests')
        .set({ holder: this.store.instance, status: 'queued' })
        .where('id', '=', r.id)
        .where('status', '<>', 'done')
        .where((eb) => (r.holder === null ? eb('holder', 'is', null) : eb('holder', '=', r.holder)))
        .executeTakeFirst();
      if (Number(took.numUpdatedRows) === 0) continue;
      try {
        await this.queue.enqueue(r.id, String(r.user_id));
        queued++;
      } catch {
        // No room now: the next recovery (restart, or the sweeper of a shared store) takes it.
        await this.store.db.updateTable('async_requests').set({ holder: null }).where('id', '=', r.id).execute();
      }
    }
    return queued;
  }

  /** Drops answers older than their keeping time. */
  async expire(now = Date.now()): Promise<number> {
    const r = await this.store.db.deleteFrom('async_requests').where('finished_at', '<', now - this.options.resultTtlMs).executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.queue.close();
  }
}

type Described = Pick<AsyncRequestsTable, 'id' | 'owner' | 'name' | 'version' | 'status' | 'attempts' | 'response_status' | 'response' | 'created_at' | 'started_at' | 'finished_at'>;

/** The wire's AsyncRequest, as JSON text. */
function describe(row: Described): string {
  const iso = (t: number | null) => (t === null ? null : new Date(Number(t)).toISOString());
  const fields: Omit<AsyncRequest, 'response'> = {
    request_id: row.id,
    status: row.status,
    algorithm: `${row.owner}/${row.name}${row.version ? `/${row.version}` : ''}`,
    attempts: row.attempts,
    created_at: new Date(Number(row.created_at)).toISOString(),
    started_at: iso(row.started_at),
    finished_at: iso(row.finished_at),
    http_status: row.response_status,
  };
  const head = JSON.stringify(fields);
  // The stored answer is JSON text already: written into the document as it stands.
  return `${head.slice(0, -1)},"response":${row.response ?? 'null'}}`;
}

function newRequestId(): string {
  return `req-${crypto.randomBytes(12).toString('hex')}`;
}

/**
 * The queue of one process: requests wait here per caller and run in turns across callers
 * (FairQueue), at most `max` at a time, beside the calls of this server (each then waits for a
 * worker in the pool's turns like any call). One user's thousands of queued calls do not hold
 * another's behind them: the next free run goes to the caller whose turn it is. Bounded per
 * caller (`perCaller`: 429 `queue_full`) and in all (`maxWaiting`: 503 `server_busy`), before
 * the request is accepted. Not durable: what a stopped process left is found in the store and
 * run again by the next start (AsyncCalls.recover).
 */
export class LocalQueue implements AsyncQueue {
  readonly durable = false;
  private run: AsyncRun | undefined;
  private running = 0;
  private readonly waiting: FairQueue<{ caller: string; id: string; weight?: number; settled?: boolean }>;
  /** Runs under way per caller: a caller runs at most `perCaller` at once (and `max` in all). */
  private readonly runs = new Map<string, number>();
  private readonly settled = new Set<Promise<unknown>>();

  constructor(
    private readonly log?: CallLog,
    private readonly max = MAX_DETACHED,
    maxWaiting = 1000,
    /**
     * A caller's requests waiting at most, and running at most (then no more than the worker
     * pool lets one caller wait for a worker: their runs never overflow it).
     */
    private readonly perCaller = 100,
  ) {
    this.waiting = new FairQueue(maxWaiting, perCaller);
  }

  start(run: AsyncRun): void {
    this.run = run;
    this.pump();
  }

  /** Waiting: requests accepted and not yet running; running: this process's async calls under way. */
  depth(): Promise<{ pending: number; running: number }> {
    return Promise.resolve({ pending: this.waiting.length, running: this.running });
  }

  /** Requests waiting to run, and running (tests). */
  stats(): { waiting: number; running: number } {
    return { waiting: this.waiting.length, running: this.running };
  }

  async enqueue(id: string, caller = '', weight?: number): Promise<void> {
    if (!this.run) throw new AppError('server_busy', 'this server is not running async calls yet; retry shortly');
    const refused = this.waiting.push({ caller, id, weight });
    if (refused === 'caller_queue_full') {
      const e = new AppError('queue_full', `you have ${this.waiting.maxPerCaller} calls with output=void waiting to run on this server, as many as one caller may; wait for some of them to end`, { scope: 'caller' });
      e.headers = [['retry-after', '1']];
      throw e;
    }
    if (refused) throw new AppError('server_busy', `${this.waiting.maxTotal} calls with output=void are already waiting to run; retry shortly`);
    this.pump();
  }

  /** Runs waiting requests, in turns, while fewer than `max` run. */
  private pump(): void {
    while (this.run && this.running < this.max) {
      const next = this.waiting.take((r) => (this.runs.get(r.caller) ?? 0) < this.perCaller);
      if (next === undefined) return;
      this.running++;
      this.runs.set(next.caller, (this.runs.get(next.caller) ?? 0) + 1);
      const p = this.attempt(next.id).finally(() => {
        this.running--;
        const n = this.runs.get(next.caller)! - 1;
        if (n > 0) this.runs.set(next.caller, n);
        else this.runs.delete(next.caller);
        this.settled.delete(p);
        this.pump();
      });
      this.settled.add(p);
    }
  }

  private async attempt(id: string): Promise<void> {
    // One process has no other node to retry on: an attempt is the last.
    try {
      await this.run!(id);
    } catch (err) {
      this.log?.warn({ err, request: id }, 'an async call could not be run or its answer stored; it is run again at the next start');
    }
  }

  async close(): Promise<void> {
    // What waits is left in the store, queued: the next start runs it (recover).
    this.waiting.drain();
    while (this.settled.size > 0) await Promise.allSettled([...this.settled]);
  }
}

/** The largest envelope a `call.completed` event carries inline; a bigger one is linked. */
export const INLINE_ENVELOPE_BYTES = 64 * 1024;

/**
 * `call.completed` for an async call's caller (or a trigger's owner, for its run: `origin`):
 * how it ended, and its envelope (or where to get it).
 */
export function callCompleted(
  row: { id: string; user_id: number; owner: string; name: string; version: string | null; created_at: number },
  status: number,
  body: string,
  now: number,
  origin?: TriggerOrigin,
): NewEvent {
  let answer: Record<string, unknown> | undefined;
  try {
    answer = JSON.parse(body) as Record<string, unknown>;
  } catch {
    answer = undefined;
  }
  const failed = status !== 200 || (answer !== undefined && 'error' in answer);
  const inline = Buffer.byteLength(body) <= INLINE_ENVELOPE_BYTES && answer !== undefined;
  return {
    userId: row.user_id,
    type: 'call.completed',
    subject: `algo://${row.owner}/${row.name}${row.version ? `/${row.version}` : ''}`,
    data: {
      request_id: row.id,
      algorithm: `${row.owner}/${row.name}`,
      version: row.version,
      status: failed ? 'failed' : 'succeeded',
      http_status: status,
      duration_ms: Math.max(0, now - Number(row.created_at)),
      ...(inline ? { envelope: answer } : { envelope_url: `/v1/requests/${row.id}` }),
      ...(origin ? { trigger: origin } : {}),
    },
    time: now,
  };
}
