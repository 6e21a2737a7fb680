/**
 * The live stream of a user's events (docs/events.md): `GET /v1/users/:user/events`, Server-Sent
 * Events whose `id:` is the event's id and whose `data:` is the CloudEvent, read as an async
 * iterator. A dropped connection is reconnected with `Last-Event-ID`, after a wait that grows
 * and is bounded; an abort of the signal, or a `break` out of the loop, closes the connection.
 *
 * No Node built-in: it reads whatever the transport gives (a Node Readable, a web
 * ReadableStream), so both entries have it.
 */
import { AlgohostError, NetworkError } from './errors.ts';
import { apiError, type Http } from './transport.ts';
import type { CloudEvent } from './types.ts';

export interface EventStreamOptions {
  /** Whose events: your own user only. Default: the user the key belongs to (`GET /v1/user`). */
  user?: string;
  /** Event type patterns (`data.file.*`, `data.**`, `call.completed`): a list, or one string of them separated by commas. Default: every type. */
  types?: string | readonly string[];
  /** A path pattern of your data: `data://.my/inbox/**` (`*` within a segment, `**` across). */
  path?: string;
  /** Start after this event (an `evt_…` id kept by the server), instead of from now on. */
  lastEventId?: string;
  /** Ends the iteration (quietly: the loop just stops) and closes the connection. */
  signal?: AbortSignal;
  /** The first wait before reconnecting, in ms; it doubles at each failed attempt. Default: what the server says (`retry:`, 3 s), else 1 s. */
  retryMs?: number;
  /** The longest wait between reconnections. Default 30 s. */
  maxRetryMs?: number;
  /** Reconnections tried in a row without getting through before giving up (the last error is thrown). Default: no limit. */
  maxRetries?: number;
  /**
   * A connection that brings nothing for this long (the server sends a comment every 15 s) is
   * taken as dead and reconnected. Default 45 s; 0: never.
   */
  idleTimeoutMs?: number;
  /** Told each time the stream is connected (`reconnected` false the first time). */
  onOpen?: (info: { reconnected: boolean; lastEventId: string | undefined }) => void;
  /** Told before each wait to reconnect: why, how long, and from where it will resume. */
  onRetry?: (info: { attempt: number; delayMs: number; error: unknown; lastEventId: string | undefined }) => void;
}

/** One message of an event stream, as the HTML standard's parser makes it. */
export interface SseMessage {
  /** The `event:` field, `message` when none. */
  event: string;
  data: string;
  /** The last event id as of this message (the `id:` field, kept from earlier messages when it has none). */
  id: string | undefined;
}

/**
 * The parser of `text/event-stream` (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
 * text in, whole messages out. Lines end with CRLF, LF or CR; `:` starts a comment; a blank
 * line ends a message, which is dispatched when it has data.
 */
export class SseParser {
  /** The `retry:` the server asked for, in ms. */
  retryMs: number | undefined;
  /** The last event id seen (`id:`), as an EventSource keeps it. */
  lastEventId: string | undefined;
  private buffer = '';
  private data: string[] = [];
  private event = '';

  constructor(lastEventId?: string) {
    this.lastEventId = lastEventId;
  }

  push(text: string): SseMessage[] {
    this.buffer += text;
    const out: SseMessage[] = [];
    let start = 0;
    for (;;) {
      const cr = this.buffer.indexOf('\r', start);
      const lf = this.buffer.indexOf('\n', start);
      if (cr < 0 && lf < 0) break;
      let end: number;
      let next: number;
      if (cr >= 0 && (lf < 0 || cr < lf)) {
        // A CR at the very end may be the first half of a CRLF: wait for what follows.
        if (cr === this.buffer.length - 1) break;
        end = cr;
        next = this.buffer[cr + 1] === '\n' ? cr + 2 : cr + 1;
      } else {
        end = lf;
        next = lf + 1;
      }
      const message = this.line(this.buffer.slice(start, end));
      if (message) out.push(message);
      start = next;
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  private line(line: string): SseMessage | undefined {
    if (line === '') {
      const data = this.data;
      const event = this.event || 'message';
      this.data = [];
      this.event = '';
      return data.length === 0 ? undefined : { event, data: data.join('\n'), id: this.lastEventId };
    }
    if (line.startsWith(':')) return undefined;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.lastEventId = value || undefined;
    else if (field === 'retry' && /^\d+$/.test(value)) this.retryMs = Number(value);
    return undefined;
  }
}

/** The chunks of a response body: a web ReadableStream (fetch) or any async iterable (a Node Readable). */
async function* chunksOf(stream: unknown): AsyncGenerator<Uint8Array, void, undefined> {
  const web = stream as ReadableStream<Uint8Array>;
  if (stream && typeof web.getReader === 'function') {
    // Read with a reader: not every browser can iterate a ReadableStream with for await.
    const reader = web.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        yield value;
      }
    } finally {
      reader.cancel().catch(() => undefined);
    }
  } else {
    for await (const chunk of stream as AsyncIterable<Uint8Array>) yield chunk;
  }
}

/** Waits `ms`, or less if `signal` aborts. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Answers worth reconnecting after: the server or a proxy busy or restarting. */
const TRANSIENT = (status: number) => status === 408 || status === 429 || status >= 500;

/**
 * The user's events as they happen, in order, each once; after `lastEventId` if given, else from
 * now on. See EventStreamOptions. A refusal (403, 410 `event_expired`, 400 for a bad filter) is
 * thrown as an ApiError; so is any failure of the first connection, so that a wrong address or
 * key is said at once. After that, a dropped connection (a network error, the server ending the
 * stream, a 5xx while it restarts) is reconnected from the last event seen.
 */
export async function* eventStream(http: Http, resolveUser: () => Promise<string>, options: EventStreamOptions = {}): AsyncGenerator<CloudEvent, void, undefined> {
  const { signal } = options;
  if (signal?.aborted) return;
  const user = options.user ?? (await resolveUser());
  const types = typeof options.types === 'string' ? options.types : options.types?.join(',');
  const query = { types: types || undefined, path: options.path || undefined };
  const path = `/v1/users/${encodeURIComponent(user)}/events`;
  const maxRetryMs = options.maxRetryMs ?? 30_000;
  const idleMs = options.idleTimeoutMs ?? 45_000;
  const parser = new SseParser(options.lastEventId);
  let connected = false;
  let failures = 0;

  while (!signal?.aborted) {
    // One connection: its own controller, aborted by the caller's signal, by the idle watchdog,
    // or when the loop is left (break, an error).
    const connection = new AbortController();
    const onAbort = () => connection.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    let idle: ReturnType<typeof setTimeout> | undefined;
    const watch = () => {
      if (idleMs <= 0) return;
      clearTimeout(idle);
      idle = setTimeout(() => connection.abort(new NetworkError(`the event stream brought nothing for ${idleMs} ms`, 'stream_idle')), idleMs);
    };
    let error: unknown;
    try {
      watch();
      const lastEventId = parser.lastEventId;
      const res = await http.send({
        method: 'GET',
        path,
        query,
        headers: { accept: 'text/event-stream', ...(lastEventId ? { 'last-event-id': lastEventId } : {}) },
        signal: connection.signal,
        // The stream is meant to stay open: no client-wide timeout (the idle watchdog stands in).
        timeoutMs: 0,
      });
      if (!res.ok) {
        const err = await apiError(res);
        if (!connected || !TRANSIENT(res.status)) throw err;
        error = err;
      } else if (!/^text\/event-stream/i.test(res.header('content-type') ?? '')) {
        res.cancel();
        throw new AlgohostError(`the server answered ${res.header('content-type') ?? 'no content type'} where an event stream (text/event-stream) was expected`, 'invalid_response');
      } else {
        options.onOpen?.({ reconnected: connected, lastEventId });
        connected = true;
        failures = 0;
        const decoder = new TextDecoder();
        try {
          for await (const chunk of chunksOf(res.stream())) {
            watch();
            for (const message of parser.push(decoder.decode(chunk, { stream: true }))) {
              if (message.event !== 'message') continue;
              let event: CloudEvent;
              try {
                event = JSON.parse(message.data) as CloudEvent;
              } catch {
                throw new AlgohostError(`an event of the stream is not JSON: ${message.data.slice(0, 200)}`, 'invalid_response');
              }
              yield event;
            }
          }
          error = new NetworkError('the server ended the event stream', 'stream_ended');
        } catch (err) {
          if (err instanceof AlgohostError && !(err instanceof NetworkError)) throw err;
          error = err;
        }
      }
    } catch (err) {
      if (signal?.aborted) return;
      // A refusal, a failure of the first connection, or anything but the network: the caller's to see.
      if (!connected || !(err instanceof NetworkError)) throw err;
      error = err;
    } finally {
      clearTimeout(idle);
      signal?.removeEventListener('abort', onAbort);
      // Left by break, an error or the end of the stream: the connection goes.
      connection.abort(new NetworkError('the event stream was closed', 'stream_closed'));
    }
    if (signal?.aborted) return;
    failures++;
    if (options.maxRetries !== undefined && failures > options.maxRetries) throw error;
    const base = options.retryMs ?? parser.retryMs ?? 1000;
    // Doubling from the base, bounded, with up to 20% jitter so that many clients spread out.
    const delayMs = Math.round(Math.min(maxRetryMs, base * 2 ** Math.min(failures - 1, 20)) * (0.8 + Math.random() * 0.2));
    options.onRetry?.({ attempt: failures, delayMs, error, lastEventId: parser.lastEventId });
    await sleep(delayMs, signal);
  }
}
