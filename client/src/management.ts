/**
 * Account management: algorithm lists, a user's API keys (docs/auth.md) and connected
 * accounts (docs/connectors.md). Keys and accounts are the user's own business: the server
 * answers only the user named, with a key that has `allow_algo_management`.
 */
import { jsonBody, type Http, type RequestOptions, type QueryValue } from './transport.ts';
import type {
  Algorithm, ConnectedAccount, ConnectedAccountChanges, CreatedKey, KeyChanges, KeyRecord, NewConnectedAccount, NewKey, Page,
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
