import crypto from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Db } from '../store/db.ts';
import type { EventsTable } from '../store/schema.ts';
import type { Principal } from '../auth/principal.ts';

/**
 * The outbox of events (docs/events.md): an event is a row written in the same transaction as
 * the change it tells of, never a callback fired after it. So there is no change without its
 * event and no event without its change, whatever is killed when; the deliverers (the live
 * stream, webhooks, triggers) read the rows afterwards, at their own pace.
 *
 * This module is below the domain: the data and algorithm layers call `appendEvent` inside
 * their own `store.write` transactions, and know nothing of who listens.
 */

/** Every kind of event, as docs/events.md lists them. */
export const EVENT_TYPES = [
  'data.file.created',
  'data.file.updated',
  'data.file.deleted',
  'data.directory.created',
  'data.directory.deleted',
  'algorithm.build.succeeded',
  'algorithm.build.failed',
  'algorithm.version.published',
  'call.completed',
  'trigger.failed',
] as const;

export type EventType = (typeof EVENT_TYPES)[number];

/** An event as the change that makes it describes it. */
export interface NewEvent {
  /** Whose event it is: the owner of the data, the algorithm, the call. Only they receive it. */
  userId: number;
  type: EventType;
  /** The canonical URI of what changed: `data://alice/inbox/a.txt`, `algo://alice/Echo/1.0.0`. */
  subject: string;
  data: Record<string, unknown>;
  /** When the change was made (ms); now by default. */
  time?: number;
  /**
   * The W3C traceparent of the span that made the change (docs/traces.md): the event's webhook
   * deliveries and trigger runs continue its trace. Given by the writer (a principal's, a
   * build's span's, a run's); none: they begin traces of their own.
   */
  traceparent?: string | null | undefined;
}

/** An event as stored. */
export type EventRow = Selectable<EventsTable>;

/** A CloudEvents 1.0 event in its JSON form (https://github.com/cloudevents/spec). */
export interface CloudEvent {
  specversion: '1.0';
  id: string;
  source: string;
  type: string;
  subject: string;
  time: string;
  datacontenttype: 'application/json';
  /**
   * The user's own count of events, from 1: the CloudEvents sequence extension, a string, here
   * of 20 digits so that it orders as text as it does as a number.
   */
  sequence: string;
  data: Record<string, unknown>;
}

/** A new event id: `evt_` and 24 hex digits (96 random bits). */
export function newEventId(): string {
  return `evt_${crypto.randomBytes(12).toString('hex')}`;
}

/**
 * Writes `events` into the outbox, inside `trx`: the transaction of the change they tell of
 * (MetadataStore.write, which excludes every other writer, so a user's next sequence number
 * is the largest plus one, and outbox ids commit in order). Returns their ids.
 */
export async function appendEvents(trx: Db, events: NewEvent[]): Promise<string[]> {
  if (events.length === 0) return [];
  const next = new Map<number, number>();
  for (const userId of new Set(events.map((e) => e.userId))) {
    const row = await trx
      .selectFrom('events')
      .select((eb) => eb.fn.max('seq').as('seq'))
      .where('user_id', '=', userId)
      .executeTakeFirst();
    next.set(userId, Number(row?.seq ?? 0) + 1);
  }
  const now = Date.now();
  const rows = events.map((e) => {
    const seq = next.get(e.userId)!;
    next.set(e.userId, seq + 1);
    // The change's trace (docs/traces.md): its deliveries and trigger runs continue it.
    return { event_id: newEventId(), user_id: e.userId, seq, type: e.type, subject: e.subject, time: e.time ?? now, data: JSON.stringify(e.data), traceparent: e.traceparent ?? null };
  });
  // In slices: SQLite takes at most 32,766 parameters in one statement.
  for (let i = 0; i < rows.length; i += 500) await trx.insertInto('events').values(rows.slice(i, i + 500)).execute();
  return rows.map((r) => r.event_id);
}

/**
 * Who made a change, as its event's data says it: `by` (the user), and `trigger` when a
 * trigger's run made it (its id, run, depth and chain: what keeps triggers from firing on
 * their own writes).
 */
export function writtenBy(principal: Pick<Principal, 'username' | 'origin'>): { by: string; trigger?: Principal['origin'] } {
  return principal.origin ? { by: principal.username, trigger: principal.origin } : { by: principal.username };
}

export function appendEvent(trx: Db, event: NewEvent): Promise<string[]> {
  return appendEvents(trx, [event]);
}

/** Where the webhook and trigger dispatchers keep how far they have read the outbox (the `meta` table's keys). */
export const DISPATCH_CURSORS = { webhooks: 'webhooks.cursor', triggers: 'triggers.cursor' } as const;

/** An event as the readers of the outbox take it: with its user's name. */
export type NamedEvent = EventRow & { username: string };

/** The outbox's last id (0 when empty). */
export async function lastEventId(db: Db): Promise<number> {
  const row = await db
    .selectFrom('events')
    .select((eb) => eb.fn.max('id').as('id'))
    .executeTakeFirst();
  return Number(row?.id ?? 0);
}

/** Up to `limit` events after outbox id `after`, in order, each with its user's name (of one user, if given). */
export function eventsAfter(db: Db, after: number, limit: number, userId?: number): Promise<NamedEvent[]> {
  let q = db
    .selectFrom('events')
    .innerJoin('users', 'users.id', 'events.user_id')
    .select(['events.id', 'events.event_id', 'events.user_id', 'events.seq', 'events.type', 'events.subject', 'events.time', 'events.data', 'events.traceparent', 'users.username'])
    .where('events.id', '>', after);
  if (userId !== undefined) q = q.where('events.user_id', '=', userId);
  return q.orderBy('events.id').limit(limit).execute();
}

/** A stored event as its user sees it. */
export function cloudEvent(row: EventRow, username: string): CloudEvent {
  return {
    specversion: '1.0',
    id: row.event_id,
    source: `/v1/users/${encodeURIComponent(username)}`,
    type: row.type,
    subject: row.subject,
    time: new Date(row.time).toISOString(),
    datacontenttype: 'application/json',
    sequence: String(row.seq).padStart(20, '0'),
    data: JSON.parse(row.data) as Record<string, unknown>,
  };
}
