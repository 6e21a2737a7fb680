/**
 * Account management: algorithm lists, a user's API keys (docs/auth.md), connected accounts
 * (docs/connectors.md), webhook subscriptions and triggers (docs/events.md). Keys, accounts,
 * subscriptions and triggers are the user's own business: the server answers only the user
 * named, with a key that has `allow_algo_management`.
 */
import { jsonBody, type Http, type RequestOptions, type QueryValue } from './transport.ts';
import type {
  Algorithm, ConnectedAccount, ConnectedAccountChanges, CreatedKey, Delivery, KeyChanges, KeyRecord, NewConnectedAccount, NewKey, NewSubscription,
  NewTrigger, Page, Results, Subscription, SubscriptionChanges, SubscriptionWithSecret, Trigger, TriggerChanges, TriggerRun,
} from './types.ts';

/** Every item of a paged list (compat.md: `{marker, next_link, results}`), page after page. */
export async function* paged<T>(http: Http, path: string, query: Record<string, QueryValue>, options: RequestOptions): AsyncGenerator<T, void, undefined> {
  let marker: string | undefined;
  do {
    const page = await http.json<Page<T>>({ ...options, method: 'GET', path, query: { ...query, marker } });
    yield* page.results;
    marker = page.marker ?? undefined;
  } while (marker);
}

/** Every item of a list whose pages are small enough to gather (keys, accounts). */
async function all<T>(http: Http, path: string, options: RequestOptions): Promise<T[]> {
  const out: T[] = [];
  for await (const item of paged<T>(http, path, {}, options)) out.push(item);
  return out;
}

/** An owner's algorithms (others see the public ones). */
export function listAlgorithms(http: Http, owner: string, options: RequestOptions = {}): AsyncGenerator<Algorithm, void, undefined> {
  return paged<Algorithm>(http, `/v1/users/${encodeURIComponent(owner)}/algorithms`, {}, options);
}

/** The public catalogue: callable algorithms with a public version whose name or description has `q`. */
export function searchAlgorithms(http: Http, q = '', options: RequestOptions = {}): AsyncGenerator<Algorithm, void, undefined> {
  return paged<Algorithm>(http, '/v1/algorithms', { q: q || undefined }, options);
}

/** A user's API keys. */
export class Keys {
  private readonly base: string;

  constructor(private readonly http: Http, readonly username: string) {
    this.base = `/v1/users/${encodeURIComponent(username)}/keys`;
  }

  list(options: RequestOptions = {}): Promise<KeyRecord[]> {
    return all<KeyRecord>(this.http, this.base, options);
  }

  /**
   * A new key; `api_key` in the answer is the only time its secret is shown. Without
   * `permissions` it gets the acting key's.
   */
  create(spec: NewKey, options: RequestOptions = {}): Promise<CreatedKey> {
    return this.http.json({ ...options, method: 'POST', path: this.base, ...jsonBody(spec) });
  }

  get(id: string, options: RequestOptions = {}): Promise<KeyRecord> {
    return this.http.json({ ...options, method: 'GET', path: `${this.base}/${encodeURIComponent(id)}` });
  }

  update(id: string, changes: KeyChanges, options: RequestOptions = {}): Promise<KeyRecord> {
    return this.http.json({ ...options, method: 'PATCH', path: `${this.base}/${encodeURIComponent(id)}`, ...jsonBody(changes) });
  }

  /** Revokes the key: it stops working at once. */
  async revoke(id: string, options: RequestOptions = {}): Promise<void> {
    await this.http.json({ ...options, method: 'DELETE', path: `${this.base}/${encodeURIComponent(id)}` });
  }
}

/** A user's connected accounts (`objstore[+label]://`, `filehost[+label]://`). */
export class Connectors {
  private readonly base: string;

  constructor(private readonly http: Http, readonly username: string) {
    this.base = `/v1/users/${encodeURIComponent(username)}/connectors`;
  }

  list(options: RequestOptions = {}): Promise<ConnectedAccount[]> {
    return all<ConnectedAccount>(this.http, this.base, options);
  }

  /** Connects an account; its secrets go in and never come back. */
  create(account: NewConnectedAccount, options: RequestOptions = {}): Promise<ConnectedAccount> {
    return this.http.json({ ...options, method: 'POST', path: this.base, ...jsonBody(account) });
  }

  /** One account by label (any case). */
  get(label: string, options: RequestOptions = {}): Promise<ConnectedAccount> {
    return this.http.json({ ...options, method: 'GET', path: `${this.base}/${encodeURIComponent(label)}` });
  }

  update(label: string, changes: ConnectedAccountChanges, options: RequestOptions = {}): Promise<ConnectedAccount> {
    return this.http.json({ ...options, method: 'PATCH', path: `${this.base}/${encodeURIComponent(label)}`, ...jsonBody(changes) });
  }

  async delete(label: string, options: RequestOptions = {}): Promise<void> {
    await this.http.json({ ...options, method: 'DELETE', path: `${this.base}/${encodeURIComponent(label)}` });
  }
}

/** A user's webhook subscriptions (docs/events.md). */
export class Subscriptions {
  private readonly base: string;

  constructor(private readonly http: Http, readonly username: string) {
    this.base = `/v1/users/${encodeURIComponent(username)}/subscriptions`;
  }

  private one(id: string): string {
    return `${this.base}/${encodeURIComponent(id)}`;
  }

  async list(options: RequestOptions = {}): Promise<Subscription[]> {
    return (await this.http.json<Results<Subscription>>({ ...options, method: 'GET', path: this.base })).results;
  }

  /** A new subscription; `secret` (`whsec_…`) in the answer is the only time it is shown. */
  create(spec: NewSubscription, options: RequestOptions = {}): Promise<SubscriptionWithSecret> {
    return this.http.json({ ...options, method: 'POST', path: this.base, ...jsonBody(spec) });
  }

  get(id: string, options: RequestOptions = {}): Promise<Subscription> {
    return this.http.json({ ...options, method: 'GET', path: this.one(id) });
  }

  /** Changes what is given; `enabled: true` turns on one that was turned off, clearing `disabled_reason`. */
  update(id: string, changes: SubscriptionChanges, options: RequestOptions = {}): Promise<Subscription> {
    return this.http.json({ ...options, method: 'PATCH', path: this.one(id), ...jsonBody(changes) });
  }

  /** Deletes it, and its pending deliveries. */
  async delete(id: string, options: RequestOptions = {}): Promise<void> {
    await this.http.json({ ...options, method: 'DELETE', path: this.one(id) });
  }

  /** A new secret, shown this once; the old one goes on signing beside it for 24 hours. */
  rotateSecret(id: string, options: RequestOptions = {}): Promise<SubscriptionWithSecret> {
    return this.http.json({ ...options, method: 'POST', path: `${this.one(id)}/secret` });
  }

  /** Sends a `webhook.test` event to this subscription alone; answers its delivery. */
  test(id: string, options: RequestOptions = {}): Promise<Delivery> {
    return this.http.json({ ...options, method: 'POST', path: `${this.one(id)}/test` });
  }

  /** The latest deliveries (`limit`, default 50, at most 200), newest first, each with every attempt. */
  async deliveries(id: string, query: { limit?: number } = {}, options: RequestOptions = {}): Promise<Delivery[]> {
    return (await this.http.json<Results<Delivery>>({ ...options, method: 'GET', path: `${this.one(id)}/deliveries`, query: { limit: query.limit } })).results;
  }

  /** Sends a delivery again now, with its id, its schedule starting over. */
  redeliver(id: string, deliveryId: string, options: RequestOptions = {}): Promise<Delivery> {
    return this.http.json({ ...options, method: 'POST', path: `${this.one(id)}/deliveries/${encodeURIComponent(deliveryId)}/redeliver` });
  }
}

/** A user's triggers: an algorithm run on each event a filter wants (docs/events.md). */
export class Triggers {
  private readonly base: string;

  constructor(private readonly http: Http, readonly username: string) {
    this.base = `/v1/users/${encodeURIComponent(username)}/triggers`;
  }

  private one(id: string): string {
    return `${this.base}/${encodeURIComponent(id)}`;
  }

  async list(options: RequestOptions = {}): Promise<Trigger[]> {
    return (await this.http.json<Results<Trigger>>({ ...options, method: 'GET', path: this.base })).results;
  }

  /** A new trigger; without `key` its runs get the permissions of the key making the request. */
  create(spec: NewTrigger, options: RequestOptions = {}): Promise<Trigger> {
    return this.http.json({ ...options, method: 'POST', path: this.base, ...jsonBody(spec) });
  }

  get(id: string, options: RequestOptions = {}): Promise<Trigger> {
    return this.http.json({ ...options, method: 'GET', path: this.one(id) });
  }

  update(id: string, changes: TriggerChanges, options: RequestOptions = {}): Promise<Trigger> {
    return this.http.json({ ...options, method: 'PATCH', path: this.one(id), ...jsonBody(changes) });
  }

  async delete(id: string, options: RequestOptions = {}): Promise<void> {
    await this.http.json({ ...options, method: 'DELETE', path: this.one(id) });
  }

  /** Its latest runs (`limit`, default 50), newest first. */
  async runs(id: string, query: { limit?: number } = {}, options: RequestOptions = {}): Promise<TriggerRun[]> {
    return (await this.http.json<Results<TriggerRun>>({ ...options, method: 'GET', path: `${this.one(id)}/runs`, query: { limit: query.limit } })).results;
  }
}
