import crypto from 'node:crypto';
import { Readable } from 'node:stream';
import { AppError } from '../errors.ts';
import { LimitError } from '../limits/limits.ts';
import type { Db, MetadataStore } from '../store/db.ts';
import { Pacer, type Pressure } from '../concurrency.ts';
import type { Principal, TriggerOrigin } from '../auth/principal.ts';
import type { KeyService } from '../auth/keyService.ts';
import { exceedingPermission } from '../auth/permissions.ts';
import type { KeyPermissions } from '../auth/permissions.ts';
import { SESSION_KEY_PREFIX } from '../auth/sessions.ts';
import type { CallService } from '../algorithms/calls.ts';
import { MAX_TIMEOUT_S } from '../algorithms/calls.ts';
import { callCompleted } from '../algorithms/asyncCalls.ts';
import { envelope } from '../algorithms/envelope.ts';
import { parseSelector } from '../algorithms/versions.ts';
import { errorDocument, toAppError } from '../http/answers.ts';
import type { DataService } from '../data/dataService.ts';
import { parseDataPath } from '../data/paths.ts';
import { parseFilter, type EventFilter } from './filter.ts';
import { appendEvent, cloudEvent, DISPATCH_CURSORS, eventsAfter, lastEventId, type NamedEvent } from './outbox.ts';
import { checkTemplate, render, renderText } from './template.ts';
import type { Schema, TriggerRunsTable, TriggersTable } from '../store/schema.ts';
import type { ExpressionBuilder, Selectable } from 'kysely';
import type { Trigger, TriggerRun } from '../../client/src/types.ts';
import { NO_TRACING, parseTraceparent, traceparentOf, type Span, type Tracer } from '../tracing.ts';
import { checkStoredCap } from '../limits/held.ts';

/**
 * Triggers (docs/events.md): a user's rules that run an algorithm version on each of their
 * events a filter wants, with an input made from the event, and write the result to a path
 * made from it. The processing half of "notify an application as data is processed".
 *
 * How events become runs, as webhooks' deliveries do (webhooks.ts): each API node runs a
 * dispatcher; under the store's write lock it reads the outbox past the cursor in `meta`
 * (`triggers.cursor`), writes a run row for each event and trigger that wants it (UNIQUE per
 * trigger and event), and moves the cursor, in one transaction: each event fires each trigger
 * once, whichever node does it and whatever is killed when. Then a node claims queued runs
 * under a lease (`claimed_until`: the call's timeout and a minute), runs the call as the
 * trigger's key, writes the output, and records the end with its `call.completed` (and
 * `trigger.failed`) events in one transaction. A node killed mid-run leaves its lease to run
 * out; the run is started again (at most MAX_ATTEMPTS starts), its output written again to
 * the same path.
 *
 * Loops: every write a run makes, its algorithm's own writes through the SDK included, raises
 * events that say so (`data.trigger`: Principal.origin, outbox.ts `writtenBy`), and so do the
 * run's own `call.completed` and `trigger.failed`. An event made by a chain of runs never fires
 * a trigger already in that chain, and a chain stops at MAX_DEPTH: the run that would go deeper
 * is recorded as failed, with `trigger.failed`, and not started.
 *
 * Budgets: depth alone bounds which runs execute, not how many are recorded (K triggers that
 * fire each other make K!/(K-d)! runs at depth d). So the event that began a chain (its `root`,
 * carried in every origin) may cause at most `runsPerEvent` runs in all, every depth and status
 * counted in `trigger_chains`; past it one `trigger.failed` names the budget and nothing more is
 * recorded. And the `trigger.failed` of a run that never started (`not_run`) fires nothing.
 */

/** How deep a chain of triggers may go: a run fired by an event no trigger made is depth 1. */
export const MAX_DEPTH = 3;
/** Triggers one user may have, by default. */
export const MAX_TRIGGERS = 50;
/** Runs one event may cause across its whole chain, by default: as many as a user may have triggers. */
export const RUNS_PER_EVENT = MAX_TRIGGERS;
/** Runs one user's triggers may have queued, by default. */
export const MAX_QUEUED = 1_000;
/** Starts of one run at most (a node lost mid-run is a start). */
export const MAX_ATTEMPTS = 3;
/** Runs one node has under way at once. */
const IN_FLIGHT = 8;
/** Runs of one trigger one node has under way at once: one trigger's backlog leaves room for others'. */
export const PER_TRIGGER = 4;
/** The dispatcher's pace without commits to wake it (other nodes' events, leases running out). */
const POLL_MS = 1_000;
/**
 * Beyond a run's timeout, how long its lease lasts (to write its output and record its end).
 * A node killed mid-run leaves the run to be started again this long after its timeout; a run
 * still writing when its lease runs out is started again, and only the first end is kept.
 */
const LEASE_MARGIN_MS = 15_000;
/** Finished runs are kept this long for `GET …/runs`. */
export const RUN_KEEP_MS = 7 * 24 * 3_600_000;
const CURSOR_KEY = DISPATCH_CURSORS.triggers;
const DEFAULT_TIMEOUT_S = 300;

/** A trigger and a run as their owner sees them: the wire's types (client/src/types.ts). */
export type TriggerView = Trigger;
export type RunView = TriggerRun;

export interface TriggerOptions {
  now?: () => number;
  /** This process's load from requests: while it is saturated, the dispatcher paces itself (Pacer) */
  pressure?: Pressure;
  /** Runs one node has under way at once (IN_FLIGHT). */
  inFlight?: number;
  /** Each run's span (docs/traces.md). */
  tracing?: Tracer;
  /** Runs one event may cause across its whole chain (ALGOHOST_TRIGGER_RUNS_PER_EVENT; RUNS_PER_EVENT). */
  runsPerEvent?: number;
  /** Runs one user's triggers may have queued (ALGOHOST_TRIGGER_MAX_QUEUED; MAX_QUEUED). */
  maxQueued?: number;
  /** Triggers one user may have (ALGOHOST_MAX_TRIGGERS_PER_USER; 0: no cap); MAX_TRIGGERS unless said. */
  maxTriggers?: number;
}

interface Log {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

type TriggerRow = TriggersTable;
type RunRow = Selectable<TriggerRunsTable>;

const iso = (ms: number | null) => (ms === null ? null : new Date(Number(ms)).toISOString());
const newId = (prefix: string) => `${prefix}_${crypto.randomBytes(12).toString('hex')}`;
const newRequestId = () => `req-${crypto.randomBytes(12).toString('hex')}`;

export class Triggers {
  private readonly now: () => number;
  private readonly inFlightMax: number;
  private readonly pacer: Pacer;
  private readonly tracing: Tracer;
  private readonly runsPerEvent: number;
  private readonly maxQueued: number;
  private readonly maxTriggers: number;

  constructor(
    private readonly store: MetadataStore,
    private readonly calls: CallService,
    private readonly keys: KeyService,
    private readonly data: DataService,
    options: TriggerOptions = {},
  ) {
    this.now = options.now ?? Date.now;
    this.inFlightMax = options.inFlight ?? IN_FLIGHT;
    this.pacer = new Pacer(options.pressure);
    this.tracing = options.tracing ?? NO_TRACING;
    this.runsPerEvent = options.runsPerEvent ?? RUNS_PER_EVENT;
    this.maxQueued = options.maxQueued ?? MAX_QUEUED;
    this.maxTriggers = options.maxTriggers ?? MAX_TRIGGERS;
  }

  // ---- the owner's rules ------------------------------------------------------------------

  async create(principal: Principal, user: { id: number; username: string }, input: unknown): Promise<TriggerView> {
    const body = object(input);
    unknownFields(body);
    const t = await this.checked(principal, user, {
      types: body.types ?? [],
      path: body.path ?? null,
      algorithm: body.algorithm,
      input: body.input === undefined ? '{{subject}}' : body.input,
      output: body.output ?? null,
      key: body.key === undefined ? principal.keyId : body.key,
      timeout: body.timeout ?? DEFAULT_TIMEOUT_S,
      enabled: body.enabled ?? true,
    });
    const id = newId('trg');
    const now = this.now();
    await this.store.write(async (trx) => {
      const n = await trx.selectFrom('triggers').select((eb) => eb.fn.countAll().as('n')).where('user_id', '=', user.id).executeTakeFirst();
      checkStoredCap({ code: 'too_many_triggers', what: 'triggers', setting: 'ALGOHOST_MAX_TRIGGERS_PER_USER', advice: 'delete one first' }, n?.n, this.maxTriggers);
      await trx.insertInto('triggers').values({ id, user_id: user.id, ...t, disabled_reason: null, created_at: now, updated_at: now }).execute();
    });
    return this.get(user.id, id);
  }

  async list(userId: number): Promise<TriggerView[]> {
    const rows = await this.store.db.selectFrom('triggers').selectAll().where('user_id', '=', userId).orderBy('created_at').orderBy('id').execute();
    return rows.map(view);
  }

  async get(userId: number, id: string): Promise<TriggerView> {
    return view(await this.row(this.store.db, userId, id));
  }

  async update(principal: Principal, user: { id: number; username: string }, id: string, input: unknown): Promise<TriggerView> {
    const body = object(input);
    unknownFields(body);
    const current = await this.row(this.store.db, user.id, id);
    const merged = {
      types: body.types === undefined ? (JSON.parse(current.types) as unknown) : body.types,
      path: body.path === undefined ? current.path : body.path,
      algorithm: body.algorithm ?? current.algorithm,
      input: body.input === undefined ? (JSON.parse(current.input) as unknown) : body.input,
      output: body.output === undefined ? current.output : body.output,
      key: body.key === undefined ? current.key_id : body.key,
      timeout: body.timeout ?? current.timeout_s,
      enabled: body.enabled === undefined ? current.enabled === 1 : body.enabled,
    };
    // A key already on the trigger stays (a restricted key may change a trigger's path
    // without holding the key it names); a newly named one is checked.
    const t = await this.checked(principal, user, merged, body.key === undefined ? current.key_id : undefined);
    await this.store.write(async (trx) => {
      await this.row(trx, user.id, id);
      // Turned on again by its owner: whatever turned it off is forgotten.
      await trx
        .updateTable('triggers')
        .set({ ...t, ...(t.enabled === 1 ? { disabled_reason: null } : {}), updated_at: this.now() })
        .where('id', '=', id)
        .execute();
    });
    return this.get(user.id, id);
  }

  async remove(userId: number, id: string): Promise<void> {
    await this.store.write(async (trx) => {
      await this.row(trx, userId, id);
      await trx.deleteFrom('triggers').where('id', '=', id).execute();
    });
  }

  /** A trigger's runs, newest first. */
  async runs(userId: number, id: string, limit = 50): Promise<RunView[]> {
    await this.row(this.store.db, userId, id);
    const rows = await this.store.db
      .selectFrom('trigger_runs')
      .selectAll()
      .where('trigger_id', '=', id)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(Math.min(Math.max(limit, 1), 200))
      .execute();
    return rows.map(runView);
  }

  // ---- the dispatcher -----------------------------------------------------------------------

  private running = false;
  private stopped = true;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  private readonly inFlight = new Set<Promise<void>>();
  private stopCommits: (() => void) | undefined;
  private log: Log | undefined;

  /** Starts this node's dispatcher; `stop` waits for the runs under way. */
  start(log: Log): { stop(): Promise<void> } {
    this.log = log;
    this.stopped = false;
    this.stopCommits = this.store.onCommit(() => this.wake());
    this.wake(true);
    const sweep = () => void this.sweep().catch((err: unknown) => log.warn({ err }, 'could not remove old trigger runs; trying again later'));
    this.sweeper = setInterval(sweep, 10 * 60_000);
    this.sweeper.unref();
    return {
      stop: async () => {
        this.stopped = true;
        this.stopCommits?.();
        clearTimeout(this.timer);
        clearInterval(this.sweeper);
        await Promise.all([...this.inFlight]);
      },
    };
  }

  /**
   * Whether a run may be due that no claim has looked for yet (webhooks.ts has the same): set
   * by new runs, a slot freed, the poll's tick (lost leases); cleared when a claim that began
   * after the last of those finds fewer than it had room for. A round woken by a commit that
   * made no run (an upload no trigger wants) then does not scan for due runs.
   */
  private dueAsked = 1;
  private dueLooked = 0;

  /** Runs a round soon; `due`: a run may have come due. */
  private wake(due = false): void {
    if (due) this.dueAsked++;
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.running = true;
    setImmediate(() => void this.round());
  }

  private async round(): Promise<void> {
    let next = POLL_MS;
    try {
      do {
        if (this.stopped) return;
        // While requests saturate the process, one round per PACE_MS, as webhooks do.
        const { paced, wait } = this.pacer.next();
        if (wait > 0) {
          next = wait;
          return;
        }
        this.again = false;
        await this.fanOut(paced);
        await this.startDue();
      } while (this.again && !this.stopped);
    } catch (err) {
      this.log?.warn({ err }, 'the trigger dispatcher failed a round; trying again shortly');
    } finally {
      this.running = false;
      if (!this.stopped) {
        this.timer = setTimeout(() => this.wake(true), next);
        this.timer.unref();
      }
    }
  }

  /**
   * How far this node has read the outbox and found nothing for anyone: events of users with no
   * enabled triggers (the usual case) need no write. The cursor in the store moves with the
   * next round that has work (which reads them again, and finds nothing for them).
   */
  private passed = 0;

  /** Whether the events after `from` concern no user with an enabled trigger; if so, passed. */
  private async nothingFor(from: number): Promise<boolean> {
    for (;;) {
      const events = await eventsAfter(this.store.db, from, 500);
      if (events.length === 0) return true;
      const users = [...new Set(events.map((e) => e.user_id))];
      const any = await this.store.db.selectFrom('triggers').select('id').where('user_id', 'in', users).where('enabled', '=', 1).limit(1).executeTakeFirst();
      if (any) return false;
      from = this.passed = events[events.length - 1]!.id;
      if (events.length < 500) return true;
    }
  }

  /** Turns new outbox events into runs, once each, whichever node does it; `paced`: one slice of events at most. */
  async fanOut(paced = false): Promise<number> {
    const [cursorRow, last] = await Promise.all([this.store.db.selectFrom('meta').select('value').where('key', '=', CURSOR_KEY).executeTakeFirst(), lastEventId(this.store.db)]);
    if (cursorRow && last <= Math.max(Number(cursorRow.value), this.passed)) return 0;
    if (cursorRow && (await this.nothingFor(Math.max(Number(cursorRow.value), this.passed)))) return 0;
    let made = 0;
    for (;;) {
      const { count, more } = await this.store.write(async (trx) => {
        const cursorRow = await trx.selectFrom('meta').select('value').where('key', '=', CURSOR_KEY).executeTakeFirst();
        if (!cursorRow) {
          // The first dispatcher ever: from now on.
          await trx.insertInto('meta').values({ key: CURSOR_KEY, value: String(await lastEventId(trx)) }).execute();
          return { count: 0, more: false };
        }
        // What this node passed (nobody's) need not be read again.
        const events = await eventsAfter(trx, Math.max(Number(cursorRow.value), this.passed), 500);
        if (events.length === 0) return { count: 0, more: false };
        const users = [...new Set(events.map((e) => e.user_id))];
        const triggers = await trx.selectFrom('triggers').selectAll().where('user_id', 'in', users).where('enabled', '=', 1).execute();
        let n = 0;
        if (triggers.length > 0) {
          // Each user's runs waiting, counted once a slice and kept as runs are queued.
          const queued = new Map<number, number>();
          const filters = new Map<string, EventFilter>();
          for (const t of triggers) {
            try {
              filters.set(t.id, parseFilter(events.find((e) => e.user_id === t.user_id)!.username, JSON.parse(t.types), t.path));
            } catch {
              // Stored by a version with other types: matches nothing until its owner fixes it.
            }
          }
          for (const e of events) {
            for (const t of triggers) {
              if (t.user_id !== e.user_id || e.time < t.created_at || !filters.get(t.id)?.matches(e.type, e.subject)) continue;
              if (await this.fire(trx, t, e, queued)) n++;
            }
          }
        }
        await trx.updateTable('meta').set({ value: String(events[events.length - 1]!.id) }).where('key', '=', CURSOR_KEY).execute();
        return { count: n, more: events.length === 500 };
      });
      made += count;
      if (count > 0) this.dueAsked++;
      if (!more) return made;
      if (paced) {
        // The rest in the next round.
        this.again = true;
        return made;
      }
    }
  }

  /**
   * The run of trigger `t` for event `e`, written (queued, or failed at once); false when the
   * event fires nothing: the trigger's own chain made it, a run that never started made it, or
   * the chain's budget is spent.
   */
  private async fire(trx: Db, t: TriggerRow, e: NamedEvent, queued: Map<number, number>): Promise<boolean> {
    const event = cloudEvent(e, e.username);
    // The record of a run that never started (too deep, over budget, a template error) tells;
    // it causes nothing. Were it to fire triggers, each refusal would make more refusals.
    if (e.type === 'trigger.failed' && event.data.not_run === true) return false;
    const from = originOf(event.data);
    // A write its own chain made: never fires it again.
    if (from?.chain.includes(t.id)) return false;
    const depth = (from?.depth ?? 0) + 1;
    const chain = [...(from?.chain ?? []), t.id];
    const root = from === undefined ? e.event_id : (from.root ?? from.run);
    const id = newId('run');
    const now = this.now();
    if (!(await this.spend(trx, root, t, e, { depth, chain, now }))) return false;
    const base = { id, trigger_id: t.id, event_id: e.event_id, event_type: e.type, subject: e.subject, depth, chain: JSON.stringify(chain), root, waiting: null, attempts: 0, claimed_until: 0, request_id: newRequestId(), http_status: null, created_at: now, started_at: null, traceparent: e.traceparent };
    let error: string | null = null;
    let rendered: { contentType: 'json' | 'text'; input: Buffer; output: string | null } | undefined;
    if (depth > MAX_DEPTH) {
      error = `not run: a chain of triggers may be at most ${MAX_DEPTH} deep, and this event was made by ${from!.chain.join(' → ')}`;
    } else {
      try {
        const ctx = { event, trigger: t.id, run: id };
        const template = JSON.parse(t.input) as unknown;
        const value = render(template, ctx);
        rendered = {
          contentType: typeof template === 'string' ? 'text' : 'json',
          input: Buffer.from(typeof template === 'string' ? (value as string) : JSON.stringify(value)),
          // Written out as the canonical URI, as events name it (`.my` is the owner).
          output: t.output === null ? null : renderText(t.output, ctx).replace(/^data:\/\/\.my(?=\/|$)/i, `data://${e.username}`),
        };
      } catch (err) {
        error = `not run: ${err instanceof AppError ? err.message : String(err)}`;
      }
    }
    if (rendered) {
      // What one user may have waiting: a backlog past it is refused, not grown.
      const waiting = queued.get(t.user_id) ?? (await this.queuedOf(trx, t.user_id));
      if (waiting >= this.maxQueued) {
        error = `not run: ${waiting} runs of your triggers are already queued, the most one user may have (ALGOHOST_TRIGGER_MAX_QUEUED); this one is dropped`;
        rendered = undefined;
      }
      queued.set(t.user_id, rendered ? waiting + 1 : waiting);
    }
    const inserted = await trx
      .insertInto('trigger_runs')
      .values(
        rendered
          ? { ...base, status: 'queued', content_type: rendered.contentType, input: rendered.input, output: rendered.output, error: null, finished_at: null }
          : { ...base, status: 'failed', content_type: 'text', input: null, output: null, error, finished_at: now },
      )
      .onConflict((oc) => oc.columns(['trigger_id', 'event_id']).doNothing())
      .executeTakeFirst();
    if (Number(inserted.numInsertedOrUpdatedRows ?? 0) === 0) {
      // Fired once already (the UNIQUE pair; the cursor moves in this transaction, so an event is
      // not read twice): what this run counted is given back.
      await trx.updateTable('trigger_chains').set((eb) => ({ runs: eb('runs', '-', 1) })).where('root', '=', root).execute();
      if (rendered) queued.set(t.user_id, (queued.get(t.user_id) ?? 1) - 1);
      return false;
    }
    if (!rendered) await appendEvent(trx, { ...triggerFailed(t, base, error!, { trigger: t.id, run: id, depth, chain, root }, now, true), traceparent: e.traceparent });
    return true;
  }

  /**
   * Counts one more run against the budget of the chain `root` began (one event causes at most
   * `runsPerEvent` runs, every depth and status counted, whoever's triggers they are); false
   * when it is spent. The first run refused raises one `trigger.failed` that names the budget,
   * and that event fires nothing; later ones are not recorded at all.
   */
  private async spend(trx: Db, root: string, t: TriggerRow, e: NamedEvent, at: { depth: number; chain: string[]; now: number }): Promise<boolean> {
    const row = await trx.selectFrom('trigger_chains').select(['runs', 'spent']).where('root', '=', root).executeTakeFirst();
    if (row === undefined) {
      await trx.insertInto('trigger_chains').values({ root, user_id: e.user_id, runs: 1, spent: 0, created_at: at.now }).execute();
      return true;
    }
    if (Number(row.runs) < this.runsPerEvent) {
      await trx.updateTable('trigger_chains').set({ runs: Number(row.runs) + 1 }).where('root', '=', root).execute();
      return true;
    }
    if (Number(row.spent) === 1) return false;
    await trx.updateTable('trigger_chains').set({ spent: 1 }).where('root', '=', root).execute();
    const error = `not run: one event may cause at most ${this.runsPerEvent} trigger runs across its whole chain (ALGOHOST_TRIGGER_RUNS_PER_EVENT), and event ${root} has caused ${this.runsPerEvent}; no more of its chain is run or recorded`;
    // Of no run: none was made.
    const origin = { trigger: t.id, depth: at.depth, chain: at.chain, root };
    const failed = triggerFailed(t, { id: null, event_id: e.event_id, event_type: e.type, subject: e.subject, request_id: null, depth: at.depth }, error, origin, at.now, true);
    await appendEvent(trx, { ...failed, data: { ...failed.data, budget: this.runsPerEvent }, traceparent: e.traceparent });
    this.log?.warn({ trigger: t.id, root, budget: this.runsPerEvent }, 'a chain of trigger runs reached its budget; the rest of it is not run');
    return false;
  }

  /** How many runs of the user's triggers are queued now. */
  private async queuedOf(trx: Db, userId: number): Promise<number> {
    const row = await trx
      .selectFrom('trigger_runs')
      .innerJoin('triggers', 'triggers.id', 'trigger_runs.trigger_id')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('triggers.user_id', '=', userId)
      .where('trigger_runs.status', '=', 'queued')
      .executeTakeFirst();
    return Number(row?.n ?? 0);
  }

  /** Claims the runs due and starts them, up to the node's share at once. */
  private async startDue(): Promise<void> {
    while (!this.stopped) {
      const room = this.inFlightMax - this.inFlight.size;
      if (room <= 0) return;
      const claimed = await this.claim(room);
      if (claimed.length === 0) return;
      for (const c of claimed) {
        const p = this.execute(c)
          .catch((err: unknown) => this.log?.warn({ err, run: c.run.id }, 'a trigger run could not be recorded; it is run again when its lease runs out'))
          .finally(() => {
            this.inFlight.delete(p);
            const k = (this.busy.get(c.trigger.id) ?? 1) - 1;
            if (k > 0) this.busy.set(c.trigger.id, k);
            else this.busy.delete(c.trigger.id);
            // A slot is free: more may be waiting.
            this.wake(true);
          });
        this.inFlight.add(p);
      }
      if (claimed.length < room) return;
    }
  }

  /** Runs this node has under way, per trigger. */
  private readonly busy = new Map<string, number>();

  /**
   * Claims up to `n` runs that are due (queued, or under a lease that ran out): triggers in the
   * order their oldest due run has waited, at most PER_TRIGGER of each under way on this node,
   * so that one trigger's backlog does not hold every other trigger's runs behind it.
   */
  private async claim(n: number): Promise<{ run: RunRow; trigger: TriggerRow; username: string; lease: number }[]> {
    // A queued run is due once its owner's limits let it (claimed_until: 0, or Retry-After); a running one once its lease ran out.
    const due = (eb: ExpressionBuilder<Schema, 'trigger_runs'>, now: number) => eb.and([eb('status', 'in', ['queued', 'running']), eb('claimed_until', '<=', now)]);
    const waiting = (db: Db, now: number) =>
      db
        .selectFrom('trigger_runs')
        .select((eb) => ['trigger_id', eb.fn.min('created_at').as('first')])
        .where((eb) => due(eb, now))
        .groupBy('trigger_id')
        .orderBy('first')
        .limit(64)
        .execute();
    // Looked at without the write lock first: a write that claims nothing would wake this
    // dispatcher again (every commit does), and again.
    const hasRoom = (rows: { trigger_id: string }[]) => rows.some((r) => (this.busy.get(r.trigger_id) ?? 0) < PER_TRIGGER);
    const asked = this.dueAsked;
    if (asked === this.dueLooked) return [];
    if (!hasRoom(await waiting(this.store.db, this.now()))) {
      this.dueLooked = asked;
      return [];
    }
    const { claimed, given } = await this.store.write(async (trx) => {
      const now = this.now();
      const claimed: { run: RunRow; trigger: TriggerRow; username: string; lease: number }[] = [];
      const given: { run: RunRow; trigger: TriggerRow }[] = [];
      for (const { trigger_id: id } of await waiting(trx, now)) {
        const room = Math.min(PER_TRIGGER - (this.busy.get(id) ?? 0), n - claimed.length);
        if (room <= 0) continue;
        const t = await trx.selectFrom('triggers').selectAll().where('id', '=', id).executeTakeFirst();
        const user = t && (await trx.selectFrom('users').select('username').where('id', '=', t.user_id).executeTakeFirst());
        if (!t || !user) continue;
        const runs = await trx.selectFrom('trigger_runs').selectAll().where('trigger_id', '=', id).where((eb) => due(eb, now)).orderBy('created_at').orderBy('id').limit(room).execute();
        for (const r of runs) {
          if (r.attempts >= MAX_ATTEMPTS) {
            given.push({ run: r, trigger: t });
            continue;
          }
          const lease = now + t.timeout_s * 1000 + LEASE_MARGIN_MS;
          await trx.updateTable('trigger_runs').set({ status: 'running', attempts: r.attempts + 1, claimed_until: lease, started_at: now, waiting: null }).where('id', '=', r.id).execute();
          claimed.push({ run: { ...r, attempts: r.attempts + 1, claimed_until: lease, started_at: now, waiting: null }, trigger: t, username: user.username, lease });
        }
        if (claimed.length >= n) break;
      }
      return { claimed, given };
    });
    if (claimed.length + given.length < n) this.dueLooked = asked;
    for (const c of claimed) this.busy.set(c.trigger.id, (this.busy.get(c.trigger.id) ?? 0) + 1);
    for (const g of given) {
      const error = `started ${g.run.attempts} times and each time the node running it was lost; not tried again`;
      await this.finish(g.run, g.trigger, g.run.claimed_until, 200, JSON.stringify({ error: { message: error, error_type: 'WorkerLostError' }, metadata: { duration: 0 } }), error, g.run.traceparent);
    }
    return claimed;
  }

  /**
   * One run, in its span: a child of the span that made the event (an upload's request, say),
   * so the run and its call are in the change's trace (docs/traces.md).
   */
  private execute(c: { run: RunRow; trigger: TriggerRow; username: string; lease: number }): Promise<void> {
    const tracing = this.tracing;
    const attributes = tracing.exporting ? { 'algohost.trigger': c.trigger.id, 'algohost.trigger_run': c.run.id, 'algohost.event_type': c.run.event_type, 'algohost.attempt': c.run.attempts } : undefined;
    const span = tracing.start('trigger run', 'consumer', parseTraceparent(c.run.traceparent), attributes);
    return this.executeRun(c, span).finally(() => span.end());
  }

  /** One run: the call as the trigger's key, its output written, its end recorded. */
  private async executeRun(c: { run: RunRow; trigger: TriggerRow; username: string; lease: number }, span: Span): Promise<void> {
    const { run, trigger: t } = c;
    const chain = JSON.parse(run.chain) as string[];
    const origin: TriggerOrigin = { trigger: t.id, run: run.id, depth: run.depth, chain, ...(run.root === null ? {} : { root: run.root }) };
    let status = 200;
    let body: string;
    let error: string | null = null;
    try {
      let principal: Principal;
      try {
        // Its writes' events continue the run's trace (docs/traces.md).
        principal = { ...(await this.keys.principalById(t.key_id, t.user_id)), origin, traceparent: traceparentOf(span) };
      } catch (err) {
        const e = toAppError(err);
        if (e.code === 'invalid_api_key' || e.code === 'api_key_revoked' || e.code === 'unknown_user') await this.turnOff(t.id, `turned off ${iso(this.now())}: its key ${t.key_id} was revoked or deleted; name another key (PATCH {"key": "…", "enabled": true})`);
        throw e;
      }
      const ref = splitAlgorithm(t.algorithm);
      let result;
      try {
        // A call of its owner's like any other: their calls a minute, at once and compute quota.
        result = await this.calls.call(principal, { owner: ref.owner, name: ref.name, version: ref.version, contentType: run.content_type, input: run.input ?? Buffer.alloc(0), timeoutS: t.timeout_s, stdout: false, queued: true, trace: span }, this.log);
      } catch (err) {
        // Over the owner's rate or calls at once: back to its queue, saying why, until allowed.
        if (err instanceof LimitError && (err.code === 'rate_limited' || err.code === 'concurrency_limited')) return await this.putBack(c, err);
        throw err;
      }
      if (result.workerLost && run.attempts < MAX_ATTEMPTS) {
        // Its node was lost mid-call: started again by whichever node claims it next.
        await this.store.db.updateTable('trigger_runs').set({ status: 'queued', claimed_until: 0 }).where('id', '=', run.id).where('claimed_until', '=', c.lease).execute();
        return;
      }
      body = envelope(result, t.timeout_s);
      const o = result.outcome;
      if (o.kind !== 'result') {
        error = `the algorithm failed: ${describe(body)}`;
      } else if (run.output !== null) {
        try {
          await this.writeOutput(principal, run.output, o.contentType, o.body);
        } catch (err) {
          const e = toAppError(err);
          error = `the result could not be written to ${run.output}: ${e.message}`;
        }
      }
    } catch (err) {
      const e = toAppError(err);
      if (e.status >= 500) this.log?.warn({ err, run: run.id }, 'a trigger run failed');
      status = e.status;
      body = errorDocument(e.code, e.message);
      error = e.message;
    }
    await this.finish(run, t, c.lease, status, body, error, traceparentOf(span));
  }

  /**
   * A run its owner's call limits refused, back in its queue: not a start (its attempt is given
   * back), not due again before the limit's Retry-After, and saying why it waits. So is every
   * other run queued behind the same limit (the user's runs, or the key's for a key's limit):
   * they would be refused too, and claiming each in turn, every time the limit is asked, would
   * spin through the whole backlog under the write lock.
   */
  private async putBack(c: { run: RunRow; trigger: TriggerRow; lease: number }, err: LimitError): Promise<void> {
    const retryS = Number(err.extra?.retry_after_s ?? (err.headers?.find(([h]) => h === 'retry-after')?.[1] ?? 1));
    const until = this.now() + Math.max(1, retryS) * 1000;
    const waiting = `${err.code}: ${err.message}`;
    const byKey = err.extra?.scope === 'key';
    await this.store.write(async (trx) => {
      await trx
        .updateTable('trigger_runs')
        .set({ status: 'queued', attempts: Math.max(0, c.run.attempts - 1), claimed_until: until, started_at: null, waiting })
        .where('id', '=', c.run.id)
        .where('claimed_until', '=', c.lease)
        .execute();
      await trx
        .updateTable('trigger_runs')
        .set({ claimed_until: until, waiting })
        .where('status', '=', 'queued')
        .where('claimed_until', '<', until)
        .where('trigger_id', 'in', (eb) => {
          const triggers = eb.selectFrom('triggers').select('id');
          return byKey ? triggers.where('key_id', '=', c.trigger.key_id) : triggers.where('user_id', '=', c.trigger.user_id);
        })
        .execute();
    });
  }

  /** Writes a run's result to its output path: text as UTF-8, JSON as its text, bytes as they are. */
  private async writeOutput(principal: Principal, output: string, contentType: string, result: Buffer): Promise<void> {
    const m = /^([A-Za-z][A-Za-z0-9]*(?:\+[A-Za-z0-9_-]+)?):\/\/(.*)$/s.exec(output);
    if (!m) throw new AppError('invalid_path', `"${output.slice(0, 200)}" is not a data URI (data://.my/…)`);
    const target = parseDataPath(`/v1/connector/${m[1]}/${m[2]!.split('/').map(encodeURIComponent).join('/')}`);
    this.data.requireWrite(principal);
    const connector = await this.data.resolve(principal, target.connector);
    // `void` results write an empty file: the call ran, and said nothing.
    const bytes = contentType === 'void' ? Buffer.alloc(0) : result;
    try {
      await connector.write(principal, target.segments, Readable.from([bytes]), {});
    } catch (err) {
      if (!(err instanceof AppError && err.code === 'not_found')) throw err;
      // Its directory is not there yet: made (as the run's key), then written.
      const first = target.connector === 'data' ? 1 : 0;
      for (let i = first; i < target.segments.length - 1; i++) {
        try {
          await connector.mkdir(principal, target.segments.slice(0, i), target.segments[i]!, undefined);
        } catch (e) {
          if (!(e instanceof AppError && e.code === 'already_exists')) throw e;
        }
      }
      await connector.write(principal, target.segments, Readable.from([bytes]), {});
    }
  }

  /**
   * Records a run's end, if it is still this start's (its lease): the run, its request (for
   * `GET /v1/requests/:id`), `call.completed`, and `trigger.failed` when it failed, at once.
   */
  private async finish(run: RunRow, t: TriggerRow, lease: number, status: number, body: string, error: string | null, traceparent: string | null): Promise<void> {
    const chain = JSON.parse(run.chain) as string[];
    const origin: TriggerOrigin = { trigger: t.id, run: run.id, depth: run.depth, chain, ...(run.root === null ? {} : { root: run.root }) };
    await this.store.write(async (trx) => {
      const now = this.now();
      const done = await trx
        .updateTable('trigger_runs')
        .set({ status: error === null ? 'succeeded' : 'failed', http_status: status, error, input: null, finished_at: now, claimed_until: 0 })
        .where('id', '=', run.id)
        .where('status', '=', 'running')
        .where('claimed_until', '=', lease)
        .executeTakeFirst();
      if (Number(done.numUpdatedRows) !== 1) return;
      const ref = splitAlgorithm(t.algorithm);
      const request = { id: run.request_id, user_id: t.user_id, owner: ref.owner, name: ref.name, version: ref.version ?? null, created_at: Number(run.created_at) };
      await trx
        .insertInto('async_requests')
        .values({ ...request, key_id: t.key_id, content_type: run.content_type, input: null, timeout_s: t.timeout_s, stdout: 0, status: 'done', attempts: run.attempts, holder: null, response_status: status, response: body, started_at: run.started_at, finished_at: now })
        .onConflict((oc) => oc.column('id').doNothing())
        .execute();
      await appendEvent(trx, { ...callCompleted(request, status, body, now, origin), traceparent });
      if (error !== null) await appendEvent(trx, { ...triggerFailed(t, run, error, origin, now), traceparent });
    });
  }

  private async turnOff(id: string, reason: string): Promise<void> {
    await this.store.write(async (trx) => {
      await trx.updateTable('triggers').set({ enabled: 0, disabled_reason: reason, updated_at: this.now() }).where('id', '=', id).where('enabled', '=', 1).execute();
    });
    this.log?.info({ trigger: id }, 'turned off a trigger whose key is gone');
  }

  /**
   * Removes finished runs older than RUN_KEEP_MS, and the budgets of chains begun that long ago
   * with no run left queued or running (one held back by its owner's limits keeps its chain's).
   */
  async sweep(now = this.now()): Promise<number> {
    const r = await this.store.write(async (trx) => {
      await trx
        .deleteFrom('trigger_chains')
        .where('created_at', '<', now - RUN_KEEP_MS)
        .where('root', 'not in', (eb) => eb.selectFrom('trigger_runs').select('root').where('status', 'in', ['queued', 'running']).where('root', 'is not', null).$narrowType<{ root: string }>())
        .execute();
      return trx.deleteFrom('trigger_runs').where('finished_at', '<', now - RUN_KEEP_MS).executeTakeFirst();
    });
    return Number(r.numDeletedRows);
  }

  // ---- helpers --------------------------------------------------------------------------------

  private async row(db: Db, userId: number, id: string): Promise<TriggerRow> {
    const row = typeof id === 'string' && /^trg_[0-9a-f]{24}$/.test(id) ? await db.selectFrom('triggers').selectAll().where('id', '=', id).where('user_id', '=', userId).executeTakeFirst() : undefined;
    if (!row) throw new AppError('trigger_not_found', `you have no trigger ${String(id).slice(0, 64)}`);
    return row;
  }

  /** A trigger's fields checked, as stored; `invalid_trigger` naming the field that is wrong. */
  private async checked(
    principal: Principal,
    user: { id: number; username: string },
    f: { types: unknown; path: unknown; algorithm: unknown; input: unknown; output: unknown; key: unknown; timeout: unknown; enabled: unknown },
    keptKey?: string,
  ): Promise<Pick<TriggerRow, 'types' | 'path' | 'algorithm' | 'input' | 'output' | 'key_id' | 'timeout_s' | 'enabled'>> {
    if (f.types !== null && !Array.isArray(f.types)) throw new AppError('invalid_trigger', 'types: a list of event types or patterns, e.g. ["data.file.created"]');
    if (f.path !== null && typeof f.path !== 'string') throw new AppError('invalid_trigger', 'path: a pattern of your data, e.g. "data://.my/inbox/**"');
    try {
      parseFilter(user.username, f.types ?? [], f.path ?? undefined);
    } catch (err) {
      if (err instanceof AppError) throw new AppError('invalid_trigger', err.message);
      throw err;
    }
    if (typeof f.algorithm !== 'string') throw new AppError('invalid_trigger', 'algorithm: the algorithm to run, "owner/name" or "owner/name/version" (e.g. "alice/Upper/1.*")');
    const ref = splitAlgorithm(f.algorithm);
    if (f.input === null || !['string', 'object'].includes(typeof f.input)) throw new AppError('invalid_trigger', 'input: a template, a string (sent as text, e.g. "{{subject}}") or a JSON object or list (sent as JSON)');
    checkTemplate('input', f.input);
    if (f.output !== null) {
      if (typeof f.output !== 'string' || !/^[A-Za-z][A-Za-z0-9]*(\+[A-Za-z0-9_-]+)?:\/\/./s.test(f.output) || f.output.length > 1024) {
        throw new AppError('invalid_trigger', 'output: where to write the result, a data URI template (e.g. "data://.my/out/{{name}}"), or null to drop it');
      }
      checkTemplate('output', f.output);
    }
    if (typeof f.timeout !== 'number' || !Number.isFinite(f.timeout) || f.timeout <= 0 || f.timeout > MAX_TIMEOUT_S) throw new AppError('invalid_trigger', `timeout: seconds a run may take, above 0 and at most ${MAX_TIMEOUT_S}`);
    if (typeof f.enabled !== 'boolean') throw new AppError('invalid_trigger', 'enabled: true or false');
    const keyId = f.key === null ? principal.keyId : f.key;
    if (typeof keyId !== 'string' || keyId.length > 200) throw new AppError('invalid_trigger', 'key: the id of one of your API keys, whose permissions the runs have');
    if (keyId !== keptKey) await this.checkKey(principal, user.id, keyId);
    return {
      types: JSON.stringify(f.types ?? []),
      path: typeof f.path === 'string' && f.path !== '' ? f.path : null,
      algorithm: `${ref.owner}/${ref.name}${ref.version ? `/${ref.version}` : ''}`,
      input: JSON.stringify(f.input),
      output: f.output as string | null,
      key_id: keyId,
      timeout_s: Math.ceil(f.timeout),
      enabled: f.enabled ? 1 : 0,
    };
  }

  /**
   * The key a trigger's runs act as: a live key of its owner, that may call algorithms, and no
   * more powerful than the key naming it (a restricted key cannot hand its triggers a stronger
   * one). The session of the console acts with the user's whole authority, as it does itself.
   */
  private async checkKey(principal: Principal, userId: number, keyId: string): Promise<void> {
    let permissions: KeyPermissions;
    if (keyId.startsWith(SESSION_KEY_PREFIX)) {
      if (keyId !== principal.keyId) throw new AppError('invalid_trigger', 'key: the id of one of your API keys (GET /v1/users/:user/keys)');
      return;
    }
    try {
      const named = await this.keys.principalById(keyId, userId);
      if (named.userId !== userId) throw new AppError('invalid_trigger', 'not yours');
      permissions = named.permissions;
    } catch {
      throw new AppError('invalid_trigger', `key: you have no live API key ${keyId.slice(0, 64)} (GET /v1/users/:user/keys lists them)`);
    }
    const over = exceedingPermission(permissions, principal.permissions);
    if (over !== null) throw new AppError('permission_escalation', `key: that key may do more than the key you are using (${over}); name a key with no more permissions than yours`);
    if (!permissions.allow_algo) throw new AppError('invalid_trigger', 'key: that key may not call algorithms (allow_algo is off)');
  }
}

/** `owner/name[/version]` of a trigger; the version a selector (`1.*`, `1.2.3`, `latest`). */
function splitAlgorithm(text: string): { owner: string; name: string; version: string | undefined } {
  const parts = text.replace(/^algo:\/\//, '').split('/');
  if (parts.length < 2 || parts.length > 3 || parts.some((p) => !/^[A-Za-z][A-Za-z0-9_]*$|^[0-9A-Za-z.*]+$/.test(p)) || !/^[A-Za-z]/.test(parts[0]!) || !/^[A-Za-z]/.test(parts[1]!)) {
    throw new AppError('invalid_trigger', `algorithm: "${text.slice(0, 120)}" is not "owner/name" or "owner/name/version" (e.g. "alice/Upper/1.*")`);
  }
  if (parts[2] !== undefined) {
    try {
      parseSelector(parts[2]);
    } catch (err) {
      throw new AppError('invalid_trigger', `algorithm: ${err instanceof AppError ? err.message : 'not a version'}`);
    }
  }
  return { owner: parts[0]!, name: parts[1]!, version: parts[2] };
}

/** The run whose write made an event, as the event's data says it. */
function originOf(data: Record<string, unknown>): TriggerOrigin | undefined {
  const t = data.trigger as Partial<TriggerOrigin> | undefined;
  if (typeof t !== 'object' || t === null || typeof t.depth !== 'number' || !Array.isArray(t.chain)) return undefined;
  return t as TriggerOrigin;
}

/**
 * The `trigger.failed` of a run; `notRun`: it never started (too deep, a template error, over
 * the chain's budget), which the event says (`not_run`) so that it fires no trigger.
 */
function triggerFailed(
  t: TriggerRow,
  run: { id: string | null; event_id: string; event_type: string; subject: string; request_id: string | null; depth: number },
  error: string,
  origin: TriggerOrigin | Omit<TriggerOrigin, 'run'>,
  now: number,
  notRun = false,
) {
  return {
    userId: t.user_id,
    type: 'trigger.failed' as const,
    subject: run.subject,
    data: { trigger_id: t.id, run_id: run.id, event_id: run.event_id, event_type: run.event_type, request_id: run.request_id, algorithm: t.algorithm, depth: run.depth, error, ...(notRun ? { not_run: true } : {}), trigger: origin },
    time: now,
  };
}

/** What went wrong in an envelope, briefly. */
function describe(body: string): string {
  try {
    const e = (JSON.parse(body) as { error?: { message?: string; error_type?: string } }).error;
    if (e) return `${e.error_type ? `${e.error_type}: ` : ''}${e.message ?? ''}`.slice(0, 500);
  } catch {
    // Not JSON: said as it is.
  }
  return body.slice(0, 500);
}

const FIELDS = new Set(['types', 'path', 'algorithm', 'input', 'output', 'key', 'timeout', 'enabled']);

function object(input: unknown): Record<string, unknown> {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new AppError('invalid_trigger', 'the body is a JSON object: {"types": [...], "path": "data://.my/…", "algorithm": "owner/name/version", "input": "{{subject}}", "output": "data://.my/out/{{name}}"}');
  }
  return input as Record<string, unknown>;
}

function unknownFields(body: Record<string, unknown>): void {
  const extra = Object.keys(body).filter((k) => !FIELDS.has(k));
  if (extra.length > 0) throw new AppError('invalid_trigger', `unknown field ${extra.map((k) => `"${k.slice(0, 40)}"`).join(', ')}; a trigger has ${[...FIELDS].join(', ')}`);
}

function view(r: TriggerRow): TriggerView {
  return {
    id: r.id,
    types: JSON.parse(r.types) as string[],
    path: r.path,
    algorithm: r.algorithm,
    input: JSON.parse(r.input) as unknown,
    output: r.output,
    key: r.key_id.startsWith(SESSION_KEY_PREFIX) ? null : r.key_id,
    timeout: r.timeout_s,
    enabled: r.enabled === 1,
    disabled_reason: r.disabled_reason,
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  };
}

function runView(r: RunRow): RunView {
  return {
    id: r.id,
    event_id: r.event_id,
    event_type: r.event_type,
    subject: r.subject,
    depth: r.depth,
    status: r.status,
    attempts: r.attempts,
    request_id: r.request_id,
    output: r.output,
    http_status: r.http_status,
    error: r.error,
    waiting: r.status === 'queued' ? r.waiting : null,
    created_at: iso(r.created_at)!,
    started_at: iso(r.started_at),
    finished_at: iso(r.finished_at),
  };
}
