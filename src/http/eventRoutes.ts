import { ownBusiness } from './ownBusiness.ts';
import type { FastifyInstance } from 'fastify';
import { AppError } from '../errors.ts';
import type { UserService } from '../auth/users.ts';
import { parseFilter } from '../events/filter.ts';
import type { EventFeed, FedEvent } from '../events/feed.ts';
import { cloudEvent } from '../events/outbox.ts';

interface UserParams {
  username: string;
}

/** A comment line this often keeps the stream alive through proxies that close quiet connections. */
export const KEEPALIVE_MS = 15_000;
/** A stream whose reader is this far behind (bytes not yet taken by the socket) is closed: it resumes with Last-Event-ID. */
const MAX_BEHIND_BYTES = 4 * 1024 * 1024;
/** Longest Last-Event-ID taken (ours are 28 characters). */
const MAX_EVENT_ID = 64;

/**
 * `GET /v1/users/:username/events?types=…&path=…` (docs/events.md): the user's events as they
 * happen, as Server-Sent Events. Each message's `id:` is the event's id and its `data:` the
 * CloudEvent; `Last-Event-ID` (or `?last_event_id=`) resumes after an event still kept
 * (ALGOHOST_EVENT_RETENTION_H), with nothing missed. Like keys and usage, the user's own
 * business: the user only, with a key that may manage (`allow_algo_management`). A user holds
 * at most ALGOHOST_MAX_STREAMS_PER_USER streams at once, a node ALGOHOST_MAX_STREAMS.
 */
/**
 * An event as one SSE message. The feed hands the same row to every stream it concerns: made
 * once, not once per stream (1,000 streams of one user made a burst of uploads 4.7 × slower).
 */
const messages = new WeakMap<FedEvent, string>();
function message(e: FedEvent): string {
  let text = messages.get(e);
  if (text === undefined) {
    text = `id: ${e.event_id}\ndata: ${JSON.stringify(cloudEvent(e, e.username))}\n\n`;
    messages.set(e, text);
  }
  return text;
}

export async function eventRoutes(app: FastifyInstance, opts: { feed: EventFeed; users: UserService; keepaliveMs?: number }): Promise<void> {
  const { feed, users } = opts;
  const keepaliveMs = opts.keepaliveMs ?? KEEPALIVE_MS;

  app.get<{ Params: UserParams; Querystring: Record<string, unknown> }>('/v1/users/:username/events', async (req, reply) => {
    const user = await ownBusiness(req, users, 'read', 'events');
    const filter = parseFilter(user.username, req.query.types, req.query.path);
    const header = req.headers['last-event-id'];
    const resume = (Array.isArray(header) ? header[0] : header) ?? (typeof req.query.last_event_id === 'string' ? req.query.last_event_id : undefined);
    let after: number | undefined;
    if (resume !== undefined && resume !== '') {
      if (resume.length > MAX_EVENT_ID || !/^evt_[0-9a-f]+$/.test(resume)) throw new AppError('invalid_query', `Last-Event-ID: "${resume.slice(0, MAX_EVENT_ID)}" is not an event id (evt_…)`);
      after = await feed.positionOf(user.id, resume);
      if (after === undefined) {
        throw new AppError('event_expired', `event ${resume} is not kept any more (events are kept for ALGOHOST_EVENT_RETENTION_H hours), or is not yours: connect again without Last-Event-ID, and list what you missed from its source`);
      }
    }
    // "From now on" is taken before the answer starts: an event committed while it is being
    // sent is not missed (a client that saw the headers may make a change at once).
    after ??= await feed.position();
    // What one user may hold open, and this node (docs/security.md): refused in our envelope
    // before the stream starts, and given back when it ends, however it ends.
    const release = await users.streams.hold(user.id);

    const res = reply.raw;
    reply.hijack();
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      // nginx and others buffer answers unless told not to.
      'x-accel-buffering': 'no',
      connection: 'keep-alive',
    });
    // How long a client waits before it reconnects, and a first line so proxies pass the headers on.
    res.write('retry: 3000\n: connected\n\n');
    let closed = false;
    let subscription: { close(): void } | undefined;
    const keepalive = setInterval(() => res.write(': keep-alive\n\n'), keepaliveMs);
    keepalive.unref();
    const end = () => {
      if (closed) return;
      closed = true;
      clearInterval(keepalive);
      subscription?.close();
      release();
      res.end();
    };
    const send = (events: FedEvent[]) => {
      if (closed) return;
      let text = '';
      for (const e of events) {
        if (!filter.matches(e.type, e.subject)) continue;
        text += message(e);
      }
      if (text === '') return;
      res.write(text);
      if (res.writableLength > MAX_BEHIND_BYTES) {
        req.log.info({ behind: res.writableLength }, 'closed an event stream whose reader fell behind; it resumes with Last-Event-ID');
        end();
      }
    };
    res.once('close', end);
    // A reader gone while its slot was being held: the close came before anyone listened for it.
    if (res.destroyed || !res.socket || res.socket.destroyed) end();
    try {
      subscription = await feed.subscribe(user.id, after, send, end);
      if (closed) subscription.close();
    } catch (err) {
      req.log.warn({ err }, 'an event stream could not start');
      end();
    }
  });
}
