import crypto from 'node:crypto';
import { AppError } from '../errors.ts';
import type { Principal } from '../auth/principal.ts';
import type { Connector } from '../data/connector.ts';
import type { MarkerCodec } from '../data/marker.ts';
import { ExternalConnector } from '../data/connectors/external.ts';
import type { RemoteStorage } from '../data/connectors/remote.ts';
import type { S3Credentials } from '../data/connectors/s3.ts';
import type { Account, ConnectedAccounts, Protocol } from './accounts.ts';
import { checkPublicEndpoint, publicOnlyLookup } from './egress.ts';

export interface ConnectedStorageOptions {
  maxUploadBytes: number;
  timeoutMs: number;
  network: 'public' | 'any';
  dropboxApiUrl: string;
  dropboxContentUrl: string;
  /** Entries per listing page (tests make it small). */
  pageSize?: number;
  /** Bytes per part of S3 multipart uploads (tests make it small). */
  s3PartSize?: number;
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

interface Cached {
  storage: RemoteStorage & { close?(): void };
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
      { maxUploadBytes: this.options.maxUploadBytes, timeoutMs: this.options.timeoutMs, ...(this.options.pageSize ? { pageSize: this.options.pageSize } : {}) },
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

  private async make(account: Account): Promise<RemoteStorage & { close?(): void }> {
    const c = account.credentials;
    switch (account.provider) {
      case 's3': {
        const creds = c as unknown as S3Credentials;
        if (creds.endpoint) await this.checkEndpoint(creds.endpoint, account.label);
        // Providers load when first used: a server with no such account never loads their code.
        const { S3Storage } = await import('../data/connectors/s3.ts');
        return new S3Storage(creds, { ...(this.options.s3PartSize ? { partSize: this.options.s3PartSize } : {}), ...this.guard() });
      }
      case 'webdav': {
        const url = String(c.url);
        await this.checkEndpoint(url, account.label);
        const { WebDavStorage } = await import('../data/connectors/webdav.ts');
        return new WebDavStorage({
          url,
          ...(typeof c.username === 'string' ? { username: c.username } : {}),
          ...(typeof c.password === 'string' ? { password: c.password } : {}),
          ...this.guard(),
        });
      }
      case 'dropbox': {
        const { DropboxStorage } = await import('../data/connectors/dropbox.ts');
        return new DropboxStorage({ accessToken: String(c.access_token), apiUrl: this.options.dropboxApiUrl, contentUrl: this.options.dropboxContentUrl });
      }
      default:
        throw new AppError('invalid_connector', `the account "${account.label}" has an unknown provider`);
    }
  }

  /** With the public-only rule, every new connection's address is checked too (not only the name at creation). */
  private guard(): { lookup?: typeof publicOnlyLookup } {
    return this.options.network === 'public' ? { lookup: publicOnlyLookup } : {};
  }

  private async checkEndpoint(url: string, label: string): Promise<void> {
    if (this.options.network === 'public') await checkPublicEndpoint(url, label);
  }

  close(): void {
    for (const [key, entry] of this.clients) {
      this.clients.delete(key);
      entry.storage.close?.();
    }
  }
}
