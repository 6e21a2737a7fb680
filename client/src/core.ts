/**
 * What the Node client (index.ts, AlgohostClient) and the browser client (browser.ts,
 * BrowserClient) share: every method, over whichever transport each is built with.
 */
import { Algo } from './algo.ts';
import { DataDir } from './dir.ts';
import { DataFile } from './file.ts';
import { eventStream, type EventStreamOptions } from './events.ts';
import { Connectors, Keys, Subscriptions, Triggers, listAlgorithms, searchAlgorithms } from './management.ts';
import { DEFAULT_BASE_URL, Http, type Platform, type RequestOptions, type Transport } from './transport.ts';
import type { Algorithm, CloudEvent, Health, UsageReport, UserLimits, WhoAmI } from './types.ts';

export { DEFAULT_BASE_URL };
/** This package's version, sent in the User-Agent. */
export const VERSION = '0.1.0';

export class BaseClient<P extends Platform> {
  protected readonly http: Http<P>;

  constructor(transport: Transport<P>) {
    this.http = new Http(transport);
  }

  /** The server address in use, without a trailing slash. */
  get baseUrl(): string {
    return this.http.baseUrl;
  }

  /** The transport requests go through (NodeTransport, FetchTransport, or one of your own). */
  get transport(): Transport<P> {
    return this.http.transport;
  }

  /** An algorithm, `owner/name[/version]` (`algo://` optional): call it, or manage it. */
  algo(ref: string): Algo {
    return new Algo(this.http, ref);
  }

  /** A file: `data://.my/c/f.txt`, `objstore+label://bucket/key`, ... (no scheme: data://). */
  file(uri: string): DataFile<P> {
    return new DataFile(this.http, uri);
  }

  /** A directory: `data://.my/c`, `data://.my` (your collections), `filehost://dir`, ... */
  dir(uri: string): DataDir<P> {
    return new DataDir(this.http, uri);
  }

  /** An owner's algorithms, page after page (others see only the public ones). */
  algorithms(owner: string, options: RequestOptions = {}): AsyncGenerator<Algorithm, void, undefined> {
    return listAlgorithms(this.http, owner, options);
  }

  /** The public catalogue, filtered by `q` (name or description, any case). */
  searchAlgorithms(q = '', options: RequestOptions = {}): AsyncGenerator<Algorithm, void, undefined> {
    return searchAlgorithms(this.http, q, options);
  }

  /** A user's API keys (your own user only). */
  keys(username: string): Keys {
    return new Keys(this.http, username);
  }

  /** A user's connected accounts (your own user only). */
  connectors(username: string): Connectors {
    return new Connectors(this.http, username);
  }

  /** A user's webhook subscriptions (your own user only). */
  subscriptions(username: string): Subscriptions {
    return new Subscriptions(this.http, username);
  }

  /** A user's triggers (your own user only). */
  triggers(username: string): Triggers {
    return new Triggers(this.http, username);
  }

  /**
   * Your events as they happen (`GET /v1/users/:user/events`), in order:
   *
   *   for await (const event of client.events({ types: ['data.file.*'], path: 'data://.my/inbox/**', signal })) { ... }
   *
   * A dropped connection is reconnected with `Last-Event-ID` (nothing missed, nothing twice),
   * after a growing, bounded wait; `signal` or a `break` ends it. A refusal (403, 410
   * `event_expired`) and a failure of the first connection are thrown (EventStreamOptions).
   */
  events(options: EventStreamOptions = {}): AsyncGenerator<CloudEvent, void, undefined> {
    return eventStream(this.http, async () => (await this.whoami({ signal: options.signal })).username, options);
  }

  /** The user the key belongs to, the key's id and its permissions. */
  whoami(options: RequestOptions = {}): Promise<WhoAmI> {
    return this.http.json({ ...options, method: 'GET', path: '/v1/user' });
  }

  /**
   * A user's usage (your own only): calls and compute seconds by UTC day and algorithm version,
   * as a caller and as an owner (docs/usage.md). Days are `YYYY-MM-DD`; the server's default is
   * the last 30 days.
   */
  usage(username: string, range: { from?: string; to?: string } = {}, options: RequestOptions = {}): Promise<UsageReport> {
    return this.http.json({ ...options, method: 'GET', path: `/v1/users/${encodeURIComponent(username)}/usage`, query: { from: range.from, to: range.to } });
  }

  /**
   * A user's limits and quotas in force and what is left of them (your own only; any of your
   * keys may ask): calls per minute, concurrency, compute seconds this month, hosted bytes
   * stored, and the asking key's own (docs/limits.md).
   */
  limits(username: string, options: RequestOptions = {}): Promise<UserLimits> {
    return this.http.json({ ...options, method: 'GET', path: `/v1/users/${encodeURIComponent(username)}/limits` });
  }

  /** `GET /health`: whether the server is up, and whether it sandboxes algorithms. */
  health(options: RequestOptions = {}): Promise<Health> {
    return this.http.json({ ...options, method: 'GET', path: '/health' });
  }
}
