import crypto from 'node:crypto';
import { AppError } from '../errors.ts';
import { CompiledQuery, sql, type Insertable } from 'kysely';
import type { Db, MetadataStore } from '../store/db.ts';
import type { DeliveriesTable } from '../store/schema.ts';
import { Pacer, type Pressure } from '../concurrency.ts';
import type { Metrics } from '../metrics.ts';
import type { CredentialBox } from '../data/accounts/credentials.ts';
import { ADDRESS_REFUSED, type AddressRule } from '../addressRule.ts';
import { httpRequest } from '../data/connectors/httpClient.ts';
import { parseFilter, type EventFilter } from './filter.ts';
import { cloudEvent, DISPATCH_CURSORS, eventsAfter, lastEventId, type NamedEvent } from './outbox.ts';
import { newSecret, webhookHeaders } from './signing.ts';
import type { Delivery, Subscription } from '../../client/src/types.ts';
import { NO_TRACING, parseTraceparent, traceparentOf, type Span, type Tracer } from '../tracing.ts';
import { checkStoredCap } from '../limits/held.ts';

/**
 * Webhooks (docs/events.md): a user's subscriptions, and the delivery of their events to them
 * as the Standard Webhooks specification says (signing.ts), at least once, retried on a
 * schedule, on every configuration.
 *
 * How events become deliveries: each API node runs a dispatcher. Under the store's write lock
 * (one writer at a time across every node, MetadataStore.write), it reads the outbox past the
 * cursor kept in `meta` (`webhooks.cursor`), writes a delivery row for each event and
 * subscription that wants it, and moves the cursor, in one transaction: every event is turned
 * into deliveries once, whichever node does it and whatever is killed when. Then, again under
 * the lock, it claims the deliveries that are due (a lease: `claimed_until`) and sends them
 * outside any transaction; each outcome is recorded with its attempt. A node killed mid-send
 * leaves its lease to run out, and another node (or itself, restarted) sends it again with the
 * same `webhook-id`: a receiver drops what it has seen.
 *
 * A slow or dead endpoint slows nothing but its own deliveries: uploads and calls only write
 * their event; each subscription's queue of pending deliveries is bounded (MAX_QUEUE), and what
 * would overflow it is counted on the subscription (`overflowed`), never dropped unsaid.
 */

/** When each attempt is made after the first failure (Standard Webhooks' and Svix's schedule): 8 attempts over about 28 hours. */
export const RETRY_SCHEDULE_MS = [0, 5_000, 5 * 60_000, 30 * 60_000, 2 * 3_600_000, 5 * 3_600_000, 10 * 3_600_000, 10 * 3_600_000];
/** A 2xx within this long is delivered. */
export const DELIVERY_TIMEOUT_MS = 10_000;
/** At most this much of an endpoint's answer is read. */
export const MAX_ANSWER_BYTES = 64 * 1024;
/** Pending deliveries one subscription may have, unless ALGOHOST_MAX_PENDING_DELIVERIES says otherwise; more are counted as overflow. */
export const MAX_QUEUE = 10_000;
/** An endpoint that has failed every delivery for this long is turned off. */
export const DISABLE_AFTER_MS = 5 * 24 * 3_600_000;
/** A rotated secret goes on signing beside the new one for this long. */
export const SECRET_OVERLAP_MS = 24 * 3_600_000;
/** Finished deliveries (delivered or failed) are kept this long for `GET …/deliveries`. */
export const DELIVERY_KEEP_MS = 7 * 24 * 3_600_000;
/** Subscriptions one user may have, unless ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER says otherwise. */
export const MAX_SUBSCRIPTIONS = 50;
/**
 * How long past its timeout a node holds a delivery it is sending (to record the outcome). A
 * node killed mid-send leaves the delivery to be sent again this long after the timeout.
 */
const LEASE_MARGIN_MS = 5_000;
/** Deliveries sent at once by one node. */
const IN_FLIGHT = 16;
/**
 * Deliveries to one subscription sent at once by one node: an endpoint that hangs holds this
 * many of the node's sends, not all of them, and the other subscriptions' go on.
 */
export const PER_SUBSCRIPTION = 4;
/** Subscriptions with deliveries due looked at per claim, the longest waiting first. */
const CLAIM_SUBSCRIPTIONS = 64;
/** The dispatcher's pace without commits to wake it: other nodes' events, retries coming due. */
const POLL_MS = 1_000;
const CURSOR_KEY = DISPATCH_CURSORS.webhooks;
/**
 * While requests saturate the process (Pressure), the dispatcher runs one round per PACE_MS
 * (Pacer), claiming at most PACED_SENDS: deliveries take a small share of the event loop (about
 * 160 a second, and ten bookkeeping commits), wait in the outbox meanwhile, and catch up at full
 * speed when the requests ease (docs/events.md, "Under load").
 */
export const PACED_SENDS = 16;
export const PACED_FAN_OUT_MS = 500;
/**
 * Paced, the fan-out turns at most this many events into deliveries at a time, and only once the
 * sends have run out of due deliveries: the deliveries made keep pace with the sends, and the
 * rest wait as events in the outbox, already written with their change, rather than as a row per
 * subscription written while requests need the store (bench:events: at 360 uploads a second
 * with 10 subscriptions, 3,600 rows a second, ~10 % of the event loop, for sends of 160).
 */
export const PACED_FAN_OUT_EVENTS = 50;

interface StoredSecret {
  secret: string;
  /** ms; null for the current secret. */
  expires_at: number | null;
}

/** A subscription (never its secret, shown once when made or rotated) and a delivery, as their owner sees them: the wire's types (client/src/types.ts). */
export type SubscriptionView = Subscription;
export type DeliveryView = Delivery;

export interface WebhookOptions {
  /**
   * The address rule endpoints are held to, when made and at every attempt (docs/security.md,
   * "One address rule"); undefined with ALGOHOST_CONNECTOR_NETWORK=any.
   */
  addressRule: AddressRule | undefined;
  /** Retries: tests shorten them. */
  schedule?: number[];
  /** How long an endpoint has to answer (DELIVERY_TIMEOUT_MS); tests shorten it. */
  timeoutMs?: number;
  now?: () => number;
  /** This process's load from requests: while it is saturated, the dispatcher paces itself (Pacer). */
  pressure?: Pressure;
  /** Delivery attempts counted for Prometheus (docs/metrics.md). */
  metrics?: Metrics;
  /** Subscriptions one user may have (ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER; 0: no cap); MAX_SUBSCRIPTIONS unless said. */
  maxSubscriptions?: number;
  /** Deliveries one subscription may have pending (ALGOHOST_MAX_PENDING_DELIVERIES); MAX_QUEUE unless said. */
  maxPending?: number;
  /** Each attempt's client span, in the trace of the change that made the event (docs/traces.md). */
  tracing?: Tracer;
}

interface Log {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

/** A delivery as a send holds it. */
interface Sent {
  id: string;
  subscription_id: string;
  attempts: number;
  lease: number;
}

/** A delivery claimed to be sent: what its send needs. */
interface Claimed extends Sent {
  payload: string;
  url: string;
  secrets: string;
  traceparent: string | null;
}

/** The endpoint's host, for its span (never the whole URL: a query may hold a token). */
function hostOf(url: string): string | undefined {
  try {
    return new URL(url).hostname;
  } catch {
    return undefined;
  }
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
const newId = (prefix: string) => `${prefix}_${crypto.randomBytes(12).toString('hex')}`;

/**
 * The dispatcher's commits (fan-out, claims, outcomes) do not wait for the disk: what a power
 * cut could take from them is made again from the outbox (committed with the upload, durably)
 * or sent again under the same webhook-id, which receivers deduplicate on (at least once, as
 * before). A commit that waited blocked the event loop for its fsync, 2 to 5 ms here, a dozen
 * times a second while uploads saturate it (bench:events).
 */
const BOOKKEEPING = { durable: false } as const;

/**
 * The id of the delivery of an event to a subscription (the `webhook-id`): `msg_`, the event's
 * time in ms (12 hex digits), and 48 bits of a hash of the event's and the subscription's ids
 * (12 hex digits). The same pair always has the same id: deliveries are made from the outbox in
 * commits that need not reach the disk (below, `durable: false`), and a fan-out made again after
 * a power cut gives the receivers the webhook-id they may have seen already. Ids that grow with
 * time go to the end of the table's primary key, where random ones went anywhere in it: a
 * fan-out's insert cost 10.6 ms for 300 rows with random ids (bench:events).
 */
export function webhookDeliveryId(eventTime: number, eventId: string, subscriptionId: string): string {
  const time = Math.max(0, Math.floor(eventTime)).toString(16).padStart(12, '0').slice(-12);
  return `msg_${time}${crypto.createHash('sha256').update(eventId).update('\0').update(subscriptionId).digest('hex').slice(0, 12)}`;
}

export class Webhooks {
  private readonly schedule: number[];
  private readonly now: () => number;

  constructor(
    private readonly store: MetadataStore,
    private readonly box: CredentialBox,
    private readonly options: WebhookOptions,
  ) {
    this.schedule = options.schedule ?? RETRY_SCHEDULE_MS;
    this.now = options.now ?? Date.now;
    this.pacer = new Pacer(options.pressure);
  }

  // ---- subscriptions ------------------------------------------------------------------

  async create(user: { id: number; username: string }, input: unknown): Promise<{ subscription: SubscriptionView; secret: string }> {
    const body = object(input);
    const url = await this.checkUrl(body.url);
    const { types, path } = this.checkFilter(user.username, body.types, body.path);
    const secret = newSecret();
    const id = newId('sub');
    const now = this.now();
    await this.store.write(async (trx) => {
      const n = await trx.selectFrom('subscriptions').select((eb) => eb.fn.countAll().as('n')).where('user_id', '=', user.id).executeTakeFirst();
      checkStoredCap({ code: 'too_many_subscriptions', what: 'webhook subscriptions', setting: 'ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER', advice: 'delete one first' }, n?.n, this.options.maxSubscriptions ?? MAX_SUBSCRIPTIONS);
      await trx
        .insertInto('subscriptions')
        .values({ id, user_id: user.id, url, types: JSON.stringify(types), path, enabled: 1, disabled_reason: null, secrets: this.seal(id, [{ secret, expires_at: null }]), failing_since: null, overflowed: 0, created_at: now, updated_at: now })
        .execute();
    });
    return { subscription: await this.get(user.id, id), secret };
  }

  async list(userId: number): Promise<SubscriptionView[]> {
    const rows = await this.store.db.selectFrom('subscriptions').selectAll().where('user_id', '=', userId).orderBy('created_at').orderBy('id').execute();
    return rows.map(view);
  }

  async get(userId: number, id: string): Promise<SubscriptionView> {
    return view(await this.row(this.store.db, userId, id));
  }

  async update(user: { id: number; username: string }, id: string, input: unknown): Promise<SubscriptionView> {
    const body = object(input);
    const current = await this.row(this.store.db, user.id, id);
    const changes: Record<string, unknown> = {};
    if (body.url !== undefined) changes.url = await this.checkUrl(body.url);
    if (body.types !== undefined || body.path !== undefined) {
      const f = this.checkFilter(user.username, body.types ?? JSON.parse(current.types), body.path === undefined ? current.path : body.path);
      changes.types = JSON.stringify(f.types);
      changes.path = f.path;
    }
    if (body.enabled !== undefined) {
      if (typeof body.enabled !== 'boolean') throw new AppError('invalid_subscription', 'enabled: true or false');
      changes.enabled = body.enabled ? 1 : 0;
      // Turned on again by its owner: a fresh start, whatever turned it off.
      changes.disabled_reason = null;
      if (body.enabled) changes.failing_since = null;
    }
    await this.store.write(async (trx) => {
      await this.row(trx, user.id, id);
      await trx.updateTable('subscriptions').set({ ...changes, updated_at: this.now() }).where('id', '=', id).execute();
    });
    return this.get(user.id, id);
  }

  async remove(userId: number, id: string): Promise<void> {
    await this.store.write(async (trx) => {
      await this.row(trx, userId, id);
      await trx.deleteFrom('subscriptions').where('id', '=', id).execute();
    });
  }

  /** A new secret; the old one signs beside it for SECRET_OVERLAP_MS. */
  async rotate(userId: number, id: string): Promise<{ subscription: SubscriptionView; secret: string }> {
    const secret = newSecret();
    await this.store.write(async (trx) => {
      const row = await this.row(trx, userId, id);
      const now = this.now();
      const kept = this.open(row).filter((s) => s.expires_at === null || s.expires_at > now);
      const older = kept.map((s) => ({ secret: s.secret, expires_at: s.expires_at ?? now + SECRET_OVERLAP_MS }));
      await trx.updateTable('subscriptions').set({ secrets: this.seal(id, [{ secret, expires_at: null }, ...older]), updated_at: now }).where('id', '=', id).execute();
    });
    return { subscription: await this.get(userId, id), secret };
  }

  /**
   * Queues a `webhook.test` event for this subscription alone; the delivery, as `deliveries`
   * will show it. `traceparent`: the asking request's (docs/traces.md), which the delivery continues.
   */
  async test(user: { id: number; username: string }, id: string, traceparent?: string): Promise<DeliveryView> {
    const eventId = `evt_${crypto.randomBytes(12).toString('hex')}`;
    const deliveryId = webhookDeliveryId(this.now(), eventId, id);
    await this.store.write(async (trx) => {
      await this.row(trx, user.id, id);
      const now = this.now();
      const event = {
        specversion: '1.0',
        id: eventId,
        source: `/v1/users/${encodeURIComponent(user.username)}`,
        type: 'webhook.test',
        subject: `/v1/users/${encodeURIComponent(user.username)}/subscriptions/${id}`,
        time: new Date(now).toISOString(),
        datacontenttype: 'application/json',
        data: { message: 'a test event, sent when asked for (POST …/subscriptions/:id/test)' },
      };
      await trx
        .insertInto('deliveries')
        .values({ id: deliveryId, subscription_id: id, event_id: eventId, event_type: 'webhook.test', payload: JSON.stringify(event), status: 'pending', attempts: 0, next_at: now, claimed_until: 0, last_status: null, last_error: null, created_at: now, finished_at: null, traceparent: traceparent ?? null })
        .execute();
    });
    this.wake(true);
    return this.delivery(user.id, id, deliveryId);
  }

  /** A subscription's deliveries, newest first (at most `limit`), each with its attempts. */
  async deliveries(userId: number, id: string, limit = 50): Promise<DeliveryView[]> {
    await this.row(this.store.db, userId, id);
    const rows = await this.store.db.selectFrom('deliveries').selectAll().where('subscription_id', '=', id).orderBy('created_at', 'desc').orderBy('id', 'desc').limit(Math.min(Math.max(limit, 1), 200)).execute();
    return Promise.all(rows.map((r) => this.deliveryView(r)));
  }

  async delivery(userId: number, id: string, deliveryId: string): Promise<DeliveryView> {
    await this.row(this.store.db, userId, id);
    const row = await this.store.db.selectFrom('deliveries').selectAll().where('id', '=', deliveryId).where('subscription_id', '=', id).executeTakeFirst();
    if (!row) throw new AppError('not_found', `subscription ${id} has no delivery ${deliveryId.slice(0, 64)}`);
    return this.deliveryView(row);
  }

  /** Sends a delivery again, now, with its id (a receiver that has it drops it), its schedule starting over. */
  async redeliver(userId: number, id: string, deliveryId: string): Promise<DeliveryView> {
    await this.store.write(async (trx) => {
      await this.row(trx, userId, id);
      const r = await trx.updateTable('deliveries').set({ status: 'pending', attempts: 0, next_at: this.now(), claimed_until: 0, finished_at: null }).where('id', '=', deliveryId).where('subscription_id', '=', id).executeTakeFirst();
      if (Number(r.numUpdatedRows) === 0) throw new AppError('not_found', `subscription ${id} has no delivery ${deliveryId.slice(0, 64)}`);
    });
    this.wake(true);
    return this.delivery(userId, id, deliveryId);
  }

  // ---- the dispatcher -------------------------------------------------------------------

  private running = false;
  private stopped = true;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private inFlight = new Set<Promise<void>>();
  private stopCommits: (() => void) | undefined;
  private log: Log | undefined;

  /** Starts this node's dispatcher; `stop` waits for the deliveries it is sending. */
  start(log: Log): { stop(): Promise<void> } {
    this.log = log;
    this.stopped = false;
    this.stopCommits = this.store.onCommit(() => this.wake());
    this.wake(true);
    const sweeper = setInterval(() => void this.sweep().catch((err: unknown) => log.warn({ err }, 'could not remove old webhook deliveries; trying again later')), 10 * 60_000);
    sweeper.unref();
    return {
      stop: async () => {
        this.stopped = true;
        this.stopCommits?.();
        clearInterval(sweeper);
        clearTimeout(this.timer);
        // The round under way ends (it claims nothing more); the outcomes of the sends under
        // way are written as they end.
        await this.current;
        await this.flushOutcomes();
        await Promise.all([...this.inFlight]);
      },
    };
  }

  /**
   * Whether a delivery may be due that no claim has looked for yet: set by what can make one
   * (new deliveries, a redelivery or test, the poll's tick for retries and lost leases), cleared
   * when a claim that began after the last such cause finds fewer than it had room for. A round woken by a commit that made none (an
   * upload nobody subscribed to) then does not look (bench:events: the look, a scan of the due
   * deliveries, ran for every upload's commit).
   */
  private dueAsked = 1;
  private dueLooked = 0;

  /** Runs a round soon (after this commit, or at once); `due`: a delivery may have come due. */
  private wake(due = false): void {
    if (due) this.dueAsked++;
    if (this.stopped) return;
    // Paced (Pacer): the timer set for the next round runs it; a commit meanwhile waits for it.
    if (!this.running && this.pausedUntil > performance.now()) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.running = true;
    setImmediate(() => (this.current = this.round()));
  }

  /** The round under way. */
  private current: Promise<void> | undefined;

  private readonly pacer: Pacer;
  /** When the last fan-out began (performance.now()). */
  private fannedAt = -Infinity;
  /** Whether the last claim found fewer due deliveries than it had room for (paced, the fan-out waits for that). */
  private sendsWant = true;
  /** Until when (performance.now()) a paced dispatcher waits for its timer, whatever wakes it. */
  private pausedUntil = -Infinity;

  private async round(): Promise<void> {
    let next = POLL_MS;
    try {
      do {
        if (this.stopped) return;
        const { paced, wait } = this.pacer.next();
        if (wait > 0) {
          next = wait;
          this.pausedUntil = performance.now() + wait;
          return;
        }
        this.again = false;
        // Paced, the fan-out (a write of a row per event and subscription) goes at most every
        // PACED_FAN_OUT_MS, PACED_FAN_OUT_EVENTS at a time, and only when the sends want more.
        if (!paced || (this.sendsWant && performance.now() - this.fannedAt >= PACED_FAN_OUT_MS)) {
          this.fannedAt = performance.now();
          await this.fanOut(paced);
        } else this.again = true;
        await this.sendDue(paced);
      } while (this.again && !this.stopped);
    } catch (err) {
      this.log?.warn({ err }, 'the webhook dispatcher failed a round; trying again shortly');
    } finally {
      this.running = false;
      if (!this.stopped) {
        this.timer = setTimeout(() => {
          this.pausedUntil = -Infinity;
          this.wake(true);
        }, next);
        this.timer.unref();
      }
    }
  }

  /**
   * How far this node has read the outbox and found nothing for anyone: events of users with no
   * enabled subscriptions (the usual case) need no write. The cursor in the store moves with the
   * next round that has work (which reads them again, and finds nothing for them).
   */
  private passed = 0;

  /** Whether the events after `from` concern no user with an enabled subscription; if so, passed. */
  private async nothingFor(from: number): Promise<boolean> {
    for (;;) {
      const events = await eventsAfter(this.store.db, from, 500);
      if (events.length === 0) return true;
      const users = [...new Set(events.map((e) => e.user_id))];
      const any = await this.store.db.selectFrom('subscriptions').select('id').where('user_id', 'in', users).where('enabled', '=', 1).limit(1).executeTakeFirst();
      if (any) return false;
      from = this.passed = events[events.length - 1]!.id;
      if (events.length < 500) return true;
    }
  }

  /** Turns new outbox events into deliveries, once each, whichever node does it; `paced`: one slice of events at most. */
  async fanOut(paced = false): Promise<number> {
    // Looked at without the write lock first: nothing new (most rounds) takes no write.
    const [cursorRow, last] = await Promise.all([
      this.store.db.selectFrom('meta').select('value').where('key', '=', CURSOR_KEY).executeTakeFirst(),
      lastEventId(this.store.db),
    ]);
    if (cursorRow && last <= Math.max(Number(cursorRow.value), this.passed)) return 0;
    if (cursorRow && (await this.nothingFor(Math.max(Number(cursorRow.value), this.passed)))) return 0;
    let made = 0;
    const slice = paced ? PACED_FAN_OUT_EVENTS : 500;
    for (;;) {
      const { count, more } = await this.store.write(async (trx) => {
        const cursorRow = await trx.selectFrom('meta').select('value').where('key', '=', CURSOR_KEY).executeTakeFirst();
        if (!cursorRow) {
          // The first dispatcher ever: from now on (nobody subscribed to what came before).
          await trx.insertInto('meta').values({ key: CURSOR_KEY, value: String(await lastEventId(trx)) }).execute();
          return { count: 0, more: false };
        }
        // What this node passed (nobody's) need not be read again.
        const cursor = Math.max(Number(cursorRow.value), this.passed);
        const events = await eventsAfter(trx, cursor, slice);
        if (events.length === 0) return { count: 0, more: false };
        const users = [...new Set(events.map((e) => e.user_id))];
        const subs = await trx.selectFrom('subscriptions').selectAll().where('user_id', 'in', users).where('enabled', '=', 1).execute();
        let n = 0;
        if (subs.length > 0) {
          const filters = new Map<string, EventFilter>();
          const pending = new Map<string, number>();
          for (const s of subs) {
            try {
              filters.set(s.id, parseFilter(events.find((e) => e.user_id === s.user_id)!.username, JSON.parse(s.types), s.path));
            } catch {
              // Stored by a version with other types: it matches nothing until its owner fixes it.
            }
            const q = await trx.selectFrom('deliveries').select((eb) => eb.fn.countAll().as('n')).where('subscription_id', '=', s.id).where('status', '=', 'pending').executeTakeFirst();
            pending.set(s.id, Number(q?.n ?? 0));
          }
          const rows = [];
          const payloads = new Map<NamedEvent, string>();
          const overflow = new Map<string, number>();
          const now = this.now();
          for (const e of events) {
            for (const s of subs) {
              // Events of its user only, from its creation on, that its filter wants.
              if (s.user_id !== e.user_id || e.time < s.created_at || !filters.get(s.id)?.matches(e.type, e.subject)) continue;
              if (pending.get(s.id)! >= (this.options.maxPending ?? MAX_QUEUE)) {
                overflow.set(s.id, (overflow.get(s.id) ?? 0) + 1);
                continue;
              }
              pending.set(s.id, pending.get(s.id)! + 1);
              // One event's body is the same for every subscription: made once.
              let payload = payloads.get(e);
              if (payload === undefined) payloads.set(e, (payload = JSON.stringify(cloudEvent(e, e.username))));
              rows.push({ id: webhookDeliveryId(e.time, e.event_id, s.id), subscription_id: s.id, event_id: e.event_id, event_type: e.type, payload, status: 'pending' as const, attempts: 0, next_at: now, claimed_until: 0, last_status: null, last_error: null, created_at: now, finished_at: null, traceparent: e.traceparent });
            }
          }
          await this.insertDeliveries(trx, rows);
          for (const [id, k] of overflow) await trx.updateTable('subscriptions').set((eb) => ({ overflowed: eb('overflowed', '+', k) })).where('id', '=', id).execute();
          n = rows.length;
        }
        await trx.updateTable('meta').set({ value: String(events[events.length - 1]!.id) }).where('key', '=', CURSOR_KEY).execute();
        return { count: n, more: events.length === slice };
      }, BOOKKEEPING);
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

  /** The SQL of an insert of n deliveries, by n: made once (Kysely built 2,600 parameters anew for each 200). */
  private readonly insertSql = new Map<number, string>();

  /** Inserts deliveries, 200 a statement; every row has the columns in the same order. */
  private async insertDeliveries(trx: Db, rows: Insertable<DeliveriesTable>[]): Promise<void> {
    for (let i = 0; i < rows.length; i += 200) {
      const slice = rows.slice(i, i + 200);
      let text = this.insertSql.get(slice.length);
      if (text === undefined) this.insertSql.set(slice.length, (text = trx.insertInto('deliveries').values(slice).compile().sql));
      await trx.executeQuery(CompiledQuery.raw(text, slice.flatMap((r) => Object.values(r))));
    }
  }

  /**
   * Writes the outcomes of finished sends and claims the deliveries due, in one transaction,
   * and starts their sends, IN_FLIGHT at a time: a send costs its share of one commit, where a
   * claim and an outcome of its own cost two commits a send, which with many subscriptions took
   * the store's one write lock (and its fsyncs) from the uploads (bench:events).
   */
  private async sendDue(paced = false): Promise<void> {
    while (!this.stopped) {
      const batch = this.takeOutcomes();
      const room = paced ? Math.min(PACED_SENDS, IN_FLIGHT - this.sendingTotal) : IN_FLIGHT - this.sendingTotal;
      const asked = this.dueAsked;
      if (batch.length === 0 && (room <= 0 || asked === this.dueLooked)) {
        if (room > 0) this.sendsWant = true;
        return;
      }
      if (batch.length === 0 && !(await this.anyDue())) {
        this.dueLooked = asked;
        this.sendsWant = true;
        return;
      }
      let claimed: Claimed[];
      try {
        claimed = await this.store.write(async (trx) => {
          for (const o of batch) await this.recordOne(trx, o.d, o.at, o.status, o.latency, o.error);
          return room > 0 && !this.stopped ? this.claimIn(trx, room) : [];
        }, BOOKKEEPING);
      } catch (err) {
        for (const o of batch) o.done(err ?? new Error('not recorded'));
        throw err;
      }
      for (const o of batch) o.done();
      if (claimed.length < room) this.dueLooked = asked;
      if (room > 0) this.sendsWant = claimed.length < room;
      for (const c of claimed) this.sending.set(c.subscription_id, (this.sending.get(c.subscription_id) ?? 0) + 1);
      this.sendingTotal += claimed.length;
      for (const c of claimed) {
        const p = this.send(c).finally(() => this.inFlight.delete(p));
        this.inFlight.add(p);
      }
      if (paced || (batch.length === 0 && claimed.length < room)) return;
    }
  }

  /** Deliveries this node is sending, per subscription, and in all (their outcomes not yet taken to be written). */
  private readonly sending = new Map<string, number>();
  private sendingTotal = 0;

  /** Outcomes of finished sends waiting to be written; their slots are free once taken. */
  private outcomes: { d: Sent; at: number; status: number | null; latency: number; error: string | null; done: (err?: unknown) => void }[] = [];

  private takeOutcomes() {
    const batch = this.outcomes.splice(0, 200);
    for (const o of batch) {
      const k = (this.sending.get(o.d.subscription_id) ?? 1) - 1;
      if (k > 0) this.sending.set(o.d.subscription_id, k);
      else this.sending.delete(o.d.subscription_id);
      this.sendingTotal--;
    }
    return batch;
  }

  /** Writes the outcomes waiting, claiming nothing (once stopped). */
  private async flushOutcomes(): Promise<void> {
    for (let batch = this.takeOutcomes(); batch.length > 0; batch = this.takeOutcomes()) {
      try {
        await this.store.write(async (trx) => {
          for (const o of batch) await this.recordOne(trx, o.d, o.at, o.status, o.latency, o.error);
        }, BOOKKEEPING);
        for (const o of batch) o.done();
      } catch (err) {
        for (const o of batch) o.done(err ?? new Error('not recorded'));
      }
    }
  }

  /**
   * The enabled subscriptions with deliveries due, the longest waiting first: for each enabled
   * subscription, its oldest due delivery not under a lease, one probe of the deliveries_waiting
   * index each. Its cost grows with the subscriptions, not with the deliveries waiting (grouping
   * the due deliveries cost 4–10 ms a look with a backlog of thousands: bench:events).
   */
  private waiting(db: Db, now: number) {
    const firsts = db
      .selectFrom('subscriptions')
      .select((eb) => [
        'subscriptions.id as subscription_id',
        eb
          .selectFrom('deliveries')
          .select((d) => d.fn.min('deliveries.next_at').as('m'))
          .whereRef('deliveries.subscription_id', '=', 'subscriptions.id')
          .where('deliveries.status', '=', 'pending')
          .where('deliveries.next_at', '<=', now)
          .where('deliveries.claimed_until', '<=', now)
          .as('first'),
      ])
      .where('subscriptions.enabled', '=', 1);
    return db.selectFrom(firsts.as('w')).select(['w.subscription_id', 'w.first']).where('w.first', 'is not', null).orderBy('w.first').limit(CLAIM_SUBSCRIPTIONS).execute();
  }

  /**
   * Whether a delivery is due for a subscription below its share here, looked at without the
   * write lock: a commit, even an empty one, wakes every dispatcher of this process, and a
   * write that claims nothing would wake this one again, and again.
   */
  private async anyDue(): Promise<boolean> {
    return (await this.waiting(this.store.db, this.now())).some((x) => (this.sending.get(x.subscription_id) ?? 0) < PER_SUBSCRIPTION);
  }

  /**
   * Claims up to `n` deliveries that are due, in `trx`: subscriptions in the order their oldest
   * due delivery has waited, at most PER_SUBSCRIPTION of each in flight on this node, so that
   * one subscription's backlog or hanging endpoint does not take every send.
   */
  private async claimIn(trx: Db, n: number): Promise<Claimed[]> {
    const now = this.now();
    const due = [];
    for (const { subscription_id: sub } of await this.waiting(trx, now)) {
      const room = Math.min(PER_SUBSCRIPTION - (this.sending.get(sub) ?? 0), n - due.length);
      if (room <= 0) continue;
      due.push(
        ...(await trx
          .selectFrom('deliveries')
          .innerJoin('subscriptions', 'subscriptions.id', 'deliveries.subscription_id')
          .select(['deliveries.id', 'deliveries.subscription_id', 'deliveries.payload', 'deliveries.attempts', 'deliveries.traceparent', 'subscriptions.url', 'subscriptions.secrets'])
          .where('deliveries.subscription_id', '=', sub)
          .where('deliveries.status', '=', 'pending')
          .where('deliveries.next_at', '<=', now)
          .where('deliveries.claimed_until', '<=', now)
          .orderBy('deliveries.next_at')
          .limit(room)
          .execute()),
      );
      if (due.length >= n) break;
    }
    const lease = now + (this.options.timeoutMs ?? DELIVERY_TIMEOUT_MS) + LEASE_MARGIN_MS;
    if (due.length > 0) await trx.updateTable('deliveries').set({ claimed_until: lease }).where('id', 'in', due.map((d) => d.id)).execute();
    return due.map((d) => ({ ...d, lease }));
  }

  /**
   * One attempt, in its client span: a child of the span that made the event (an upload's
   * request, say), whose traceparent the request carries to the endpoint (docs/traces.md).
   */
  private send(d: Claimed): Promise<void> {
    const tracing = this.options.tracing ?? NO_TRACING;
    const attributes = tracing.exporting ? { 'http.request.method': 'POST', 'server.address': hostOf(d.url), 'algohost.subscription': d.subscription_id, 'algohost.delivery': d.id, 'algohost.attempt': d.attempts + 1 } : undefined;
    const span = tracing.start('webhook delivery', 'client', parseTraceparent(d.traceparent), attributes);
    return this.attempt(d, span).finally(() => span.end());
  }

  private async attempt(d: Claimed, span: Span): Promise<void> {
    const started = this.now();
    let status: number | null = null;
    let error: string | null = null;
    const timeoutMs = this.options.timeoutMs ?? DELIVERY_TIMEOUT_MS;
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      const secrets = this.openForSend({ id: d.subscription_id, secrets: d.secrets }).filter((s) => s.expires_at === null || s.expires_at > started).map((s) => s.secret);
      const rule = this.options.addressRule;
      // A refused target is never connected to: its record says so, and nothing of a socket's or an answer's.
      await rule?.checkEndpoint(d.url, 'the endpoint');
      const answer = await httpRequest(d.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'user-agent': 'algohost-webhooks/1', traceparent: traceparentOf(span), ...webhookHeaders(secrets, d.id, Math.floor(started / 1000), d.payload) },
        body: d.payload,
        signal,
        ...(rule ? { lookup: rule.lookup } : {}),
      });
      status = answer.status;
      // Redirects are not followed: a 3xx is a failure like any other non-2xx.
      const text = await answer.text(MAX_ANSWER_BYTES);
      if (!answer.ok) error = `answered ${status}${text ? `: ${text.slice(0, 200)}` : ''}`;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException | undefined)?.code;
      // The lookup's refusal (a name that now resolves to a refused address) reaches here as the request's error.
      error = err instanceof AppError ? err.message : code === ADDRESS_REFUSED ? (err as Error).message : signal.aborted ? `no answer within ${timeoutMs / 1000} s` : `could not be reached: ${(err as Error)?.message ?? String(err)}`;
    }
    const latency = this.now() - started;
    this.options.metrics?.delivery(error === null);
    if (status !== null) span.set('http.response.status_code', status);
    if (error !== null) span.fail(error.slice(0, 200));
    try {
      await this.record(d, started, status, latency, error);
    } catch (err) {
      // The lease runs out and it is sent again, with the same id.
      this.log?.warn({ err, delivery: d.id }, 'could not record a webhook delivery; it will be sent again');
    }
  }

  /**
   * Hands a send's outcome to the dispatcher, which writes it with the next claims; resolves
   * once it is written. Once stopped, the outcomes are written on their own.
   */
  private record(d: Sent, at: number, status: number | null, latency: number, error: string | null): Promise<void> {
    return new Promise((resolve, reject) => {
      this.outcomes.push({ d, at, status, latency, error, done: (err) => (err === undefined ? resolve() : reject(err as Error)) });
      if (this.stopped) void this.flushOutcomes();
      else this.wake();
    });
  }

  private async recordOne(trx: Db, d: Sent, at: number, status: number | null, latency: number, error: string | null): Promise<void> {
    // Plain SQL on this path, run for every send: Kysely's builders cost more than the statements.
    const count = (await sql<{ n: number | string }>`SELECT count(*) AS n FROM delivery_attempts WHERE delivery_id = ${d.id}`.execute(trx)).rows[0];
    await sql`INSERT INTO delivery_attempts (delivery_id, attempt, at, status, latency_ms, error) VALUES (${d.id}, ${Number(count?.n ?? 0) + 1}, ${at}, ${status}, ${latency}, ${error})`.execute(trx);
    const attempts = d.attempts + 1;
    const now = this.now();
    // Only while it is still this send's: a redelivery asked for meanwhile (its lease reset)
    // stands, and is sent again.
    if (error === null) {
      await sql`UPDATE deliveries SET status = 'delivered', attempts = ${attempts}, last_status = ${status}, last_error = NULL, finished_at = ${now}, claimed_until = 0 WHERE id = ${d.id} AND claimed_until = ${d.lease}`.execute(trx);
      await sql`UPDATE subscriptions SET failing_since = NULL WHERE id = ${d.subscription_id} AND failing_since IS NOT NULL`.execute(trx);
      return;
    }
    const last = attempts >= this.schedule.length;
    const wait = last ? 0 : this.schedule[attempts]! * (0.9 + Math.random() * 0.2);
    await trx
      .updateTable('deliveries')
      .set({ status: last ? 'failed' : 'pending', attempts, last_status: status, last_error: error, next_at: Math.round(now + wait), claimed_until: 0, finished_at: last ? now : null })
      .where('id', '=', d.id)
      .where('claimed_until', '=', d.lease)
      .execute();
    const sub = await trx.selectFrom('subscriptions').select(['failing_since', 'enabled']).where('id', '=', d.subscription_id).executeTakeFirst();
    if (!sub) return;
    const since = sub.failing_since ?? now;
    if (now - since >= DISABLE_AFTER_MS && sub.enabled === 1) {
      const reason = `turned off ${iso(now)}: every delivery has failed since ${iso(since)} (last: ${error.slice(0, 200)}); fix the endpoint, then PATCH {"enabled": true}`;
      await trx.updateTable('subscriptions').set({ enabled: 0, disabled_reason: reason, failing_since: since, updated_at: now }).where('id', '=', d.subscription_id).execute();
      this.log?.info({ subscription: d.subscription_id }, 'turned off a webhook subscription whose endpoint has failed for days');
    } else if (sub.failing_since === null) {
      await trx.updateTable('subscriptions').set({ failing_since: since }).where('id', '=', d.subscription_id).execute();
    }
  }

  /** Removes finished deliveries (and their attempts) older than DELIVERY_KEEP_MS. */
  async sweep(now = this.now()): Promise<number> {
    const r = await this.store.write((trx) => trx.deleteFrom('deliveries').where('finished_at', '<', now - DELIVERY_KEEP_MS).executeTakeFirst());
    return Number(r.numDeletedRows);
  }

  // ---- helpers ---------------------------------------------------------------------------

  private async row(db: Db, userId: number, id: string) {
    const row = typeof id === 'string' && /^sub_[0-9a-f]{24}$/.test(id) ? await db.selectFrom('subscriptions').selectAll().where('id', '=', id).where('user_id', '=', userId).executeTakeFirst() : undefined;
    if (!row) throw new AppError('subscription_not_found', `you have no subscription ${String(id).slice(0, 64)}`);
    return row;
  }

  private seal(id: string, secrets: StoredSecret[]): string {
    return this.box.seal(secrets, `subscription:${id}`);
  }

  private open(row: { id: string; secrets: string }): StoredSecret[] {
    return this.box.open(row.secrets, `subscription:${row.id}`) as StoredSecret[];
  }

  /** Secrets opened for sends, by their sealed text: each send would otherwise decrypt them again. */
  private readonly opened = new Map<string, StoredSecret[]>();

  private openForSend(row: { id: string; secrets: string }): StoredSecret[] {
    const key = `${row.id} ${row.secrets}`;
    let secrets = this.opened.get(key);
    if (!secrets) {
      if (this.opened.size >= 1000) this.opened.clear();
      secrets = this.open(row);
      this.opened.set(key, secrets);
    }
    return secrets;
  }

  private async checkUrl(raw: unknown): Promise<string> {
    if (typeof raw !== 'string' || raw.length === 0 || raw.length > 2048) throw new AppError('invalid_subscription', 'url: the endpoint to POST events to, http:// or https://, at most 2,048 characters');
    let u: URL;
    try {
      u = new URL(raw);
    } catch {
      throw new AppError('invalid_subscription', `url: "${raw.slice(0, 200)}" is not a URL`);
    }
    if (u.protocol !== 'https:' && u.protocol !== 'http:') throw new AppError('invalid_subscription', 'url: http:// or https:// only');
    if (u.username || u.password) throw new AppError('invalid_subscription', 'url: no user name or password in it; events are signed instead (webhook-signature)');
    await this.options.addressRule?.checkEndpoint(u.toString(), 'the webhook url');
    return u.toString();
  }

  private checkFilter(username: string, types: unknown, path: unknown): { types: string[]; path: string | null } {
    if (types !== undefined && types !== null && !Array.isArray(types)) throw new AppError('invalid_subscription', 'types: a list of event types or patterns, e.g. ["data.file.*"]');
    if (path !== undefined && path !== null && typeof path !== 'string') throw new AppError('invalid_subscription', 'path: a pattern of your data, e.g. "data://.my/inbox/**"');
    try {
      parseFilter(username, types ?? [], path ?? undefined);
    } catch (err) {
      if (err instanceof AppError) throw new AppError('invalid_subscription', err.message);
      throw err;
    }
    return { types: (types as string[] | undefined) ?? [], path: typeof path === 'string' && path !== '' ? path : null };
  }

  private async deliveryView(r: { id: string; event_id: string; event_type: string; status: 'pending' | 'delivered' | 'failed'; next_at: number; created_at: number }): Promise<DeliveryView> {
    const attempts = await this.store.db.selectFrom('delivery_attempts').selectAll().where('delivery_id', '=', r.id).orderBy('attempt').execute();
    return {
      id: r.id,
      event_id: r.event_id,
      event_type: r.event_type,
      status: r.status,
      attempts: attempts.map((a) => ({ attempt: a.attempt, at: iso(a.at)!, status_code: a.status, latency_ms: a.latency_ms, error: a.error })),
      next_attempt_at: r.status === 'pending' ? iso(r.next_at) : null,
      created_at: iso(r.created_at)!,
    };
  }
}

function object(input: unknown): Record<string, unknown> {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw new AppError('invalid_subscription', 'the body is a JSON object: {"url": "https://…", "types": [...], "path": "data://.my/…"}');
  return input as Record<string, unknown>;
}

function view(r: { id: string; url: string; types: string; path: string | null; enabled: number; disabled_reason: string | null; failing_since: number | null; overflowed: number; created_at: number; updated_at: number }): SubscriptionView {
  return {
    id: r.id,
    url: r.url,
    types: JSON.parse(r.types) as string[],
    path: r.path,
    enabled: r.enabled === 1,
    disabled_reason: r.disabled_reason,
    failing_since: iso(r.failing_since),
    overflowed: Number(r.overflowed),
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  };
}
