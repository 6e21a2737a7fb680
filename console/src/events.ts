/**
 * What the Events page asks of the API (docs/events.md): webhook subscriptions, triggers, and
 * the live stream of the user's events. Through the same routes as curl, as the signed-in user.
 */
import { ApiError, authHeaders, encodePath, errorFrom, getJson, noticeError, url } from './api.ts';

/** A CloudEvent as the stream and webhooks carry it. */
export interface CloudEvent {
  specversion: string;
  id: string;
  source: string;
  type: string;
  subject: string;
  time: string;
  datacontenttype?: string;
  sequence?: string;
  data?: unknown;
}

export interface Subscription {
  id: string;
  url: string;
  types: string[];
  path: string | null;
  enabled: boolean;
  disabled_reason: string | null;
  failing_since: string | null;
  overflowed: number;
  created_at: string;
  updated_at: string;
}

/** A subscription made, or its secret rotated: the only answers that carry the secret. */
export interface SubscriptionWithSecret extends Subscription {
  secret: string;
}

export interface Attempt {
  attempt: number;
  at: string;
  status_code: number | null;
  latency_ms: number;
  error: string | null;
}

export interface Delivery {
  id: string;
  event_id: string;
  event_type: string;
  status: 'pending' | 'delivered' | 'failed';
  attempts: Attempt[];
  next_attempt_at: string | null;
  created_at: string;
}

export interface Trigger {
  id: string;
  types: string[];
  path: string | null;
  algorithm: string;
  input: unknown;
  output: string | null;
  /** The key whose permissions its runs have; null: made from a console session (the user's own authority). */
  key: string | null;
  timeout: number;
  enabled: boolean;
  disabled_reason: string | null;
  created_at: string;
  updated_at: string;
}

export interface TriggerRun {
  id: string;
  event_id: string;
  event_type: string;
  subject: string;
  depth: number;
  status: 'queued' | 'running' | 'succeeded' | 'failed';
  attempts: number;
  request_id: string;
  output: string | null;
  http_status: number | null;
  error: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
}

/** The catalogue (docs/events.md), for the forms' hints. */
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
];

/** "data.file.*, call.completed" → the list the API takes (commas or spaces between). */
export function typeList(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);
}

const base = (me: string, what: 'subscriptions' | 'triggers') => `/v1/users/${encodePath(me)}/${what}`;
const one = (me: string, what: 'subscriptions' | 'triggers', id: string) => `${base(me, what)}/${encodeURIComponent(id)}`;

export const subscriptions = (me: string) => ({
  list: async () => (await getJson<{ results: Subscription[] }>(base(me, 'subscriptions'))).results,
  get: (id: string) => getJson<Subscription>(one(me, 'subscriptions', id)),
  create: (spec: { url: string; types?: string[]; path?: string }) => getJson<SubscriptionWithSecret>(base(me, 'subscriptions'), { method: 'POST', json: spec }),
  update: (id: string, changes: { enabled?: boolean }) => getJson<Subscription>(one(me, 'subscriptions', id), { method: 'PATCH', json: changes }),
  remove: (id: string) => getJson<void>(one(me, 'subscriptions', id), { method: 'DELETE' }),
  rotate: (id: string) => getJson<SubscriptionWithSecret>(`${one(me, 'subscriptions', id)}/secret`, { method: 'POST' }),
  test: (id: string) => getJson<Delivery>(`${one(me, 'subscriptions', id)}/test`, { method: 'POST' }),
  deliveries: async (id: string) => (await getJson<{ results: Delivery[] }>(`${one(me, 'subscriptions', id)}/deliveries`)).results,
  redeliver: (id: string, delivery: string) => getJson<Delivery>(`${one(me, 'subscriptions', id)}/deliveries/${encodeURIComponent(delivery)}/redeliver`, { method: 'POST' }),
});

export interface NewTrigger {
  types?: string[];
  path?: string;
  algorithm: string;
  input?: unknown;
  output?: string;
  key?: string;
  timeout?: number;
}

export const triggers = (me: string) => ({
  list: async () => (await getJson<{ results: Trigger[] }>(base(me, 'triggers'))).results,
  get: (id: string) => getJson<Trigger>(one(me, 'triggers', id)),
  create: (spec: NewTrigger) => getJson<Trigger>(base(me, 'triggers'), { method: 'POST', json: spec }),
  update: (id: string, changes: { enabled?: boolean }) => getJson<Trigger>(one(me, 'triggers', id), { method: 'PATCH', json: changes }),
  remove: (id: string) => getJson<void>(one(me, 'triggers', id), { method: 'DELETE' }),
  runs: async (id: string) => (await getJson<{ results: TriggerRun[] }>(`${one(me, 'triggers', id)}/runs`)).results,
});

export interface StreamHandlers {
  /** The server answered 200: the stream is live. */
  onOpen(): void;
  onEvent(id: string, event: CloudEvent): void;
  /** The server's `retry:` (ms): how long to wait before reconnecting. */
  onRetry(ms: number): void;
}

/**
 * Reads `GET /v1/users/:user/events` as Server-Sent Events until it ends (resolves) or fails
 * (rejects: an ApiError for an error answer). With fetch, not EventSource: a request the session
 * cookie authenticates must carry the CSRF header, which EventSource cannot send.
 */
export async function readEventStream(me: string, o: { types?: string; path?: string; lastEventId?: string; signal: AbortSignal }, on: StreamHandlers): Promise<void> {
  const headers: Record<string, string> = { ...authHeaders(), accept: 'text/event-stream' };
  if (o.lastEventId) headers['last-event-id'] = o.lastEventId;
  const res = await fetch(url(`/v1/users/${encodePath(me)}/events`, { types: o.types || undefined, path: o.path || undefined }), { headers, credentials: 'same-origin', cache: 'no-store', signal: o.signal });
  if (!res.ok) {
    const err = errorFrom(res.status, await res.text().catch(() => ''));
    noticeError(err);
    throw err;
  }
  if (!res.body) throw new ApiError(0, 'network_error', 'this browser cannot read a streamed answer');
  on.onOpen();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser((m) => {
    if (m.retry !== undefined) on.onRetry(m.retry);
    if (m.data === undefined) return;
    let event: CloudEvent;
    try {
      event = JSON.parse(m.data) as CloudEvent;
    } catch {
      return; // not an event of ours
    }
    on.onEvent(m.id ?? event.id, event);
  });
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    parser.push(value);
  }
}

/**
 * The `text/event-stream` format (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation),
 * fed text as it arrives: lines end with CRLF, LF or CR; `data:` lines join with newlines; a
 * blank line dispatches; `:` starts a comment; a `retry:` of digits is reported alone.
 */
export class SseParser {
  private rest = '';
  private data: string[] = [];
  private id: string | undefined;
  private sawCr = false;

  constructor(private readonly emit: (m: { id?: string; data?: string; retry?: number }) => void) {}

  push(chunk: string): void {
    let text = chunk;
    // A CR that ended the last chunk and an LF that starts this one are one line end.
    if (this.sawCr && text.startsWith('\n')) text = text.slice(1);
    this.sawCr = text.endsWith('\r');
    const lines = (this.rest + text).split(/\r\n|\r|\n/);
    this.rest = lines.pop() ?? '';
    for (const line of lines) this.line(line);
  }

  private line(line: string): void {
    if (line === '') {
      if (this.data.length > 0) this.emit({ id: this.id, data: this.data.join('\n') });
      this.data = [];
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'id' && !value.includes('\0')) this.id = value;
    else if (field === 'retry' && /^\d+$/.test(value)) this.emit({ retry: Number(value) });
  }
}
