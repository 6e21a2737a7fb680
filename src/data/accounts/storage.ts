import crypto from 'node:crypto';
import { AppError } from '../../errors.ts';
import type { Principal } from '../../auth/principal.ts';
import type { Connector } from '../connector.ts';
import type { MarkerCodec } from '../marker.ts';
import { ExternalConnector, type RaiseEvents } from '../connectors/external.ts';
import type { RemoteStorage } from '../connectors/remote.ts';
import type { S3Credentials } from '../connectors/s3.ts';
import type { Account, ConnectedAccounts, Protocol, Provider } from './accounts.ts';
import type { AddressRule } from '../../addressRule.ts';

export interface ConnectedStorageOptions {
  maxUploadBytes: number;
  timeoutMs: number;
  /**
   * The address rule every endpoint and connection is held to (docs/security.md, "One address
   * rule"); undefined with ALGOHOST_CONNECTOR_NETWORK=any.
   */
  addressRule: AddressRule | undefined;
  dropboxApiUrl: string;
  dropboxContentUrl: string;
  /** Entries per listing page (tests make it small). */
  pageSize?: number;
  /** Bytes per part of S3 multipart uploads (tests make it small). */
  s3PartSize?: number;
  /** Where the events of changes made through accounts go (the outbox); none without it. */
  events?: RaiseEvents;
}

/** URI schemes of connected accounts and the protocol each names (the original service's spellings too). */
const SCHEMES = new Map<string, Protocol>([
  ['objstore', 'objstore'],
  ['s3', 'objstore'],
  ['filehost', 'filehost'],
  ['dropbox', 'filehost'],
]);

export function isAccountScheme(scheme: string): boolean {
  return SCHEMES.has(scheme);
}

type ProviderClient = RemoteStorage & { close?(): void };

/** What a provider's client is made with besides the account: the server's network rules and tuning. */
interface ProviderContext {
  /** Refuses an endpoint the address rule forbids (unless ALGOHOST_CONNECTOR_NETWORK=any). */
  checkEndpoint(url: string): Promise<void>;
  /** Options that make every new connection check its address too. */
  guard: { lookup?: AddressRule['lookup'] };
  options: ConnectedStorageOptions;
}

/**
 * The providers of connected accounts, by the name an account records. Each loads its code
 * when first used: a server with no such account never loads it. A new provider is a
 * RemoteStorage (src/data/connectors/remote.ts), an entry here, and its credentials in
 * accounts.ts (the Provider type makes a missing entry a type error).
 */
type MakeClient = (account: Account, ctx: ProviderContext) => Promise<ProviderClient>;

const PROVIDER_CLIENTS: Record<Provider, MakeClient> = {
  async s3(account, ctx) {
    const creds = account.credentials as unknown as S3Credentials;
    if (creds.endpoint) await ctx.checkEndpoint(creds.endpoint);
    const { S3Storage } = await import('../connectors/s3.ts');
    return new S3Storage(creds, { ...(ctx.options.s3PartSize ? { partSize: ctx.options.s3PartSize } : {}), ...ctx.guard });
  },
  async webdav(account, ctx) {
    const c = account.credentials;
    const url = String(c.url);
    await ctx.checkEndpoint(url);
    const { WebDavStorage } = await import('../connectors/webdav.ts');
    return new WebDavStorage({
      url,
      ...(typeof c.username === 'string' ? { username: c.username } : {}),
      ...(typeof c.password === 'string' ? { password: c.password } : {}),
      ...ctx.guard,
    });
  },
  async dropbox(account, ctx) {
    const { DropboxStorage } = await import('../connectors/dropbox.ts');
    return new DropboxStorage({ accessToken: String(account.credentials.access_token), apiUrl: ctx.options.dropboxApiUrl, contentUrl: ctx.options.dropboxContentUrl });
  },
};

interface Cached {
  storage: ProviderClient;
  madeAt: number;
}

const MAX_CACHED = 256;
/** A provider client is remade (and its endpoint checked again) after this long. */
const CLIENT_TTL_MS = 5 * 60_000;

/**
 * Turns `objstore+label` into a connector for the caller's account of that label. Provider
 * clients (an S3 client holds a connection pool) are kept per account and credentials, so a
 * changed secret or endpoint gets a new client at once.
 */
export class ConnectedStorage {
  private readonly clients = new Map<string, Cached>();

  constructor(
    private readonly accounts: ConnectedAccounts,
    private readonly markers: MarkerCodec,
    private readonly options: ConnectedStorageOptions,
  ) {}

  /** The connector for `name` (`<scheme>[+label]`, lower case), or undefined if the scheme is not an account's. */
  async connector(principal: Principal, name: string): Promise<Connector | undefined> {
    const plus = name.indexOf('+');
    const scheme = plus < 0 ? name : name.slice(0, plus);
    const protocol = SCHEMES.get(scheme);
    if (!protocol) return undefined;
    const account = await this.accounts.resolve(principal.userId, protocol, plus < 0 ? undefined : name.slice(plus + 1));
    const storage = await this.storage(principal.userId, account);
    return new ExternalConnector(
      name,
      { userId: principal.userId, label: account.label, protocol: account.protocol, path: account.path, writeable: account.writeable },
      storage,
      this.markers,
      {
        maxUploadBytes: this.options.maxUploadBytes,
        timeoutMs: this.options.timeoutMs,
        ...(this.options.pageSize ? { pageSize: this.options.pageSize } : {}),
        ...(this.options.events ? { events: this.options.events } : {}),
      },
    );
  }

  private async storage(userId: number, account: Account): Promise<RemoteStorage> {
    const key = crypto.createHash('sha256').update(JSON.stringify([userId, account.label.toLowerCase(), account.provider, account.credentials])).digest('base64url');
    const hit = this.clients.get(key);
    if (hit && Date.now() - hit.madeAt < CLIENT_TTL_MS) {
      this.clients.delete(key);
      this.clients.set(key, hit);
      return hit.storage;
    }
    if (hit) this.retire(key, hit);
    const storage = await this.make(account);
    this.clients.set(key, { storage, madeAt: Date.now() });
    for (const [oldest, entry] of this.clients) {
      if (this.clients.size <= MAX_CACHED) break;
      this.retire(oldest, entry);
    }
    return storage;
  }

  /** Forgets a client; closes it a little later, so requests still using it can finish. */
  private retire(key: string, entry: Cached): void {
    this.clients.delete(key);
    if (entry.storage.close) setTimeout(() => entry.storage.close?.(), 60_000).unref();
  }

  private async make(account: Account): Promise<ProviderClient> {
    // A row's provider is one we know, unless the database was edited by hand.
    const provider = (PROVIDER_CLIENTS as Partial<Record<string, MakeClient>>)[account.provider];
    if (!provider) throw new AppError('invalid_connector', `the account "${account.label}" has an unknown provider`);
    return provider(account, {
      checkEndpoint: (url) => this.checkEndpoint(url, account.label),
      guard: this.guard(),
      options: this.options,
    });
  }

  /** With the address rule, every new connection's address is checked too (not only the name at creation). */
  private guard(): { lookup?: AddressRule['lookup'] } {
    return this.options.addressRule ? { lookup: this.options.addressRule.lookup } : {};
  }

  private async checkEndpoint(url: string, label: string): Promise<void> {
    await this.options.addressRule?.checkEndpoint(url, `the account "${label}"`);
  }

  close(): void {
    for (const [key, entry] of this.clients) {
      this.clients.delete(key);
      entry.storage.close?.();
    }
  }
}
