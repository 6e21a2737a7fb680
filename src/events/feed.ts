import type { MetadataStore } from '../store/db.ts';
import { DISPATCH_CURSORS, eventsAfter, lastEventId, type NamedEvent } from './outbox.ts';

/** How often the outbox is read for events this process did not write (another node, the admin CLI). */
export const FEED_POLL_MS = 200;
/** Events read from the outbox at once. */
const PAGE = 500;

/** An event row with its user's name, as the feed hands it on. */
export type FedEvent = NamedEvent;

/** One listener of the feed: a user's events after a point, in order, each once. */
export interface FeedSubscription {
  /** Stops it. */
  close(): void;
}

interface Listener {
  userId: number;
  /** The last outbox id handed to it. */
  cursor: number;
  /** While it reads its backlog: what came live meanwhile, handed on after the backlog. */
  buffered: FedEvent[] | undefined;
  deliver: (events: FedEvent[]) => void;
  /** Told when the feed closes (the server stops): the stream ends. */
  ended: () => void;
}

/**
 * Reads the outbox as it grows and hands each user's new events to that user's listeners (the
 * live streams of the API node it runs on). It reads at once after each commit of this process
 * (MetadataStore.onCommit) and every FEED_POLL_MS for the commits of others, and only while
 * anyone listens. A listener that starts from a point in the past reads its backlog from the
 * outbox first, then goes on live, with nothing missed and nothing twice between the two.
 */
export class EventFeed {
  private readonly listeners = new Set<Listener>();
  /** The last outbox id read; undefined until the first read (which starts from the end). */
  private head: number | undefined;
  private reading: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly stopCommits: () => void;
  private closed = false;

  constructor(
    private readonly store: MetadataStore,
    private readonly log: { warn(obj: object, msg: string): void },
    private readonly pollMs = FEED_POLL_MS,
  ) {
    this.stopCommits = store.onCommit(() => {
      if (this.listeners.size > 0) this.read();
    });
  }

  /**
   * Hands `deliver` the events of `userId` after outbox id `after` (its backlog, then live),
   * or, with `after` undefined, those from now on.
   */
  async subscribe(userId: number, after: number | undefined, deliver: (events: FedEvent[]) => void, ended: () => void = () => undefined): Promise<FeedSubscription> {
    if (this.closed) throw new Error('the event feed is closed');
    // From now on: the outbox's end as it is now (the feed's own place may be older, when
    // nobody has listened for a while; then it moves there too, as nobody needs what is before).
    const end = await this.lastId();
    if (this.head === undefined || (this.listeners.size === 0 && this.head < end)) this.head = end;
    const listener: Listener = { userId, cursor: after ?? end, buffered: after === undefined ? undefined : [], deliver, ended };
    this.listeners.add(listener);
    this.startPolling();
    if (after !== undefined) {
      try {
        for (;;) {
          const rows = await this.rows(listener.cursor, userId);
          this.hand(listener, rows);
          if (rows.length < PAGE) break;
        }
      } catch (err) {
        this.listeners.delete(listener);
        throw err;
      }
      const live = listener.buffered!;
      listener.buffered = undefined;
      this.hand(listener, live);
    }
    return {
      close: () => {
        this.listeners.delete(listener);
        if (this.listeners.size === 0) this.stopPolling();
      },
    };
  }

  /** The outbox id of an event, by its CloudEvent id, for one user (Last-Event-ID); undefined if it is not (or no longer) kept. */
  async positionOf(userId: number, eventId: string): Promise<number | undefined> {
    const row = await this.store.db.selectFrom('events').select('id').where('event_id', '=', eventId).where('user_id', '=', userId).executeTakeFirst();
    return row?.id;
  }

  private retention: NodeJS.Timeout | undefined;

  /**
   * Removes events older than `retentionMs` now and every `everyMs` (on every API node: a
   * delete of what another already removed removes nothing), in batches so that no write holds
   * the store for long.
   */
  keepFor(retentionMs: number, everyMs = 10 * 60_000, now: () => number = Date.now): void {
    const sweep = async () => {
      try {
        await sweepEvents(this.store, now() - retentionMs);
      } catch (err) {
        this.log.warn({ err }, 'could not remove expired events; trying again later');
      }
    };
    void sweep();
    this.retention = setInterval(() => void sweep(), everyMs);
    this.retention.unref();
  }

  /** Stops reading, and tells every listener it has ended. */
  close(): void {
    clearInterval(this.retention);
    this.closed = true;
    this.stopCommits();
    this.stopPolling();
    const all = [...this.listeners];
    this.listeners.clear();
    for (const l of all) l.ended();
  }

  /** Hands `rows` to `listener`, each once, in order (or keeps them while it reads its backlog). */
  private hand(listener: Listener, rows: FedEvent[]): void {
    const fresh = rows.filter((r) => r.id > listener.cursor && r.user_id === listener.userId);
    if (fresh.length === 0) return;
    listener.cursor = fresh[fresh.length - 1]!.id;
    try {
      listener.deliver(fresh);
    } catch (err) {
      this.log.warn({ err }, 'an event listener failed');
    }
  }

  /** Reads what is new in the outbox, once at a time (a read asked for meanwhile runs after it). */
  private read(): void {
    if (this.reading) {
      this.again = true;
      return;
    }
    this.reading = (async () => {
      do {
        this.again = false;
        try {
          await this.readNew();
        } catch (err) {
          this.log.warn({ err }, 'could not read the outbox of events; reading again shortly');
        }
      } while (this.again && !this.closed);
    })().finally(() => (this.reading = undefined));
  }

  private async readNew(): Promise<void> {
    if (this.head === undefined) this.head = await this.lastId();
    for (;;) {
      const rows = await this.rows(this.head);
      if (rows.length === 0) return;
      this.head = rows[rows.length - 1]!.id;
      const byUser = new Map<number, FedEvent[]>();
      for (const r of rows) byUser.set(r.user_id, [...(byUser.get(r.user_id) ?? []), r]);
      for (const l of this.listeners) {
        const mine = byUser.get(l.userId);
        if (!mine) continue;
        if (l.buffered) l.buffered.push(...mine);
        else this.hand(l, mine);
      }
      if (rows.length < PAGE) return;
    }
  }

  private rows(after: number, userId?: number): Promise<FedEvent[]> {
    return eventsAfter(this.store.db, after, PAGE, userId);
  }

  /** Where the outbox ends now: a stream that starts here misses nothing committed after. */
  position(): Promise<number> {
    return this.lastId();
  }

  private lastId(): Promise<number> {
    return lastEventId(this.store.db);
  }

  private startPolling(): void {
    if (this.timer || this.closed) return;
    this.timer = setInterval(() => this.read(), this.pollMs);
    this.timer.unref();
  }

  private stopPolling(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}

/**
 * Removes the events older than `before` (ms), 5,000 at a time; how many went. Kept past their
 * time: the events the webhook and trigger dispatchers have still to turn into deliveries and
 * runs (after their cursors, of a user with an enabled subscription or trigger). A dispatcher
 * holds its fan-out back while requests saturate its node (webhooks.ts, PACED_FAN_OUT_EVENTS),
 * and what it has not read yet must wait for it, not expire unsaid.
 */
export async function sweepEvents(store: MetadataStore, before: number): Promise<number> {
  let removed = 0;
  for (;;) {
    const n = await store.write(async (trx) => {
      const cursors = await trx.selectFrom('meta').select(['key', 'value']).where('key', 'in', [DISPATCH_CURSORS.webhooks, DISPATCH_CURSORS.triggers]).execute();
      let q = trx.selectFrom('events').select('id').where('time', '<', before);
      for (const [key, table] of [
        [DISPATCH_CURSORS.webhooks, 'subscriptions'],
        [DISPATCH_CURSORS.triggers, 'triggers'],
      ] as const) {
        const cursor = cursors.find((c) => c.key === key);
        if (cursor === undefined) continue;
        q = q.where((eb) => eb.or([eb('id', '<=', Number(cursor.value)), eb('user_id', 'not in', eb.selectFrom(table).select('user_id').where('enabled', '=', 1))]));
      }
      const ids = (await q.orderBy('id').limit(5000).execute()).map((r) => r.id);
      for (let i = 0; i < ids.length; i += 500) await trx.deleteFrom('events').where('id', 'in', ids.slice(i, i + 500)).execute();
      return ids.length;
    });
    removed += n;
    if (n < 5000) return removed;
  }
}
