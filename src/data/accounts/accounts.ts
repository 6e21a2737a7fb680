import { AppError } from '../../errors.ts';
import { isWellFormed, NOT_WELL_FORMED } from '../../wellFormed.ts';
import { isUniqueViolation, type MetadataStore } from '../../store/db.ts';
import type { ConnectorsTable } from '../../store/schema.ts';
import type { CredentialBox } from './credentials.ts';
import type { ConnectedAccount, ConnectorProtocol, ConnectorProvider } from '../../../client/src/types.ts';
import { checkStoredCap } from '../../limits/held.ts';

export type Protocol = ConnectorProtocol;
export type Provider = ConnectorProvider;

/** A connected account with its credentials, for the connector that uses it (never for a response). */
export interface Account extends Omit<ConnectedAccount, 'created_at' | 'updated_at'> {
  credentials: Record<string, unknown>;
}

const PROVIDERS: Record<Protocol, readonly Provider[]> = { objstore: ['s3'], filehost: ['webdav', 'dropbox'] };
const DEFAULT_PROVIDER: Record<Protocol, Provider> = { objstore: 's3', filehost: 'dropbox' };
/** Labels appear in URIs (`objstore+LABEL://`): letters, digits and dashes, as a URI scheme allows. */
const LABEL = /^[A-Za-z0-9][A-Za-z0-9-]{0,31}$/;
const PATH = /^(\*|[^*\\]+\/\*)$/;

interface CredentialField {
  name: string;
  secret: boolean;
  required: boolean;
  type: 'string' | 'url' | 'boolean';
}

/** What each provider's `cred_data` holds (issue 4), and which fields are secret. */
const CREDENTIALS: Record<Provider, readonly CredentialField[]> = {
  s3: [
    { name: 'endpoint', secret: false, required: false, type: 'url' },
    { name: 'region', secret: false, required: false, type: 'string' },
    { name: 'access_key_id', secret: true, required: true, type: 'string' },
    { name: 'secret_access_key', secret: true, required: true, type: 'string' },
    { name: 'force_path_style', secret: false, required: false, type: 'boolean' },
  ],
  webdav: [
    { name: 'url', secret: false, required: true, type: 'url' },
    { name: 'username', secret: false, required: false, type: 'string' },
    { name: 'password', secret: true, required: false, type: 'string' },
  ],
  dropbox: [{ name: 'access_token', secret: true, required: true, type: 'string' }],
};

function invalid(message: string): AppError {
  return new AppError('invalid_connector', message);
}

function checkCredentials(provider: Provider, value: unknown): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalid(`cred_data must be a JSON object with ${CREDENTIALS[provider].map((f) => f.name).join(', ')}`);
  const fields = CREDENTIALS[provider];
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    const field = fields.find((f) => f.name === k);
    if (!field) throw invalid(`unknown cred_data field "${k.slice(0, 40)}" for ${provider}; it takes ${fields.map((f) => f.name).join(', ')}`);
    if (v === null || v === undefined) continue;
    if (field.type === 'boolean') {
      if (typeof v !== 'boolean') throw invalid(`cred_data.${k} must be true or false`);
    } else {
      if (typeof v !== 'string' || v.length === 0 || v.length > 4096) throw invalid(`cred_data.${k} must be a non-empty string`);
      if (!isWellFormed(v)) throw invalid(`cred_data.${k} ${NOT_WELL_FORMED}`);
      if (field.type === 'url') {
        let u: URL;
        try {
          u = new URL(v);
        } catch {
          throw invalid(`cred_data.${k} must be an http:// or https:// address`);
        }
        if (u.protocol !== 'http:' && u.protocol !== 'https:') throw invalid(`cred_data.${k} must be an http:// or https:// address`);
        // Its providers decode its user name, password and path (WebDAV maps hrefs back by them).
        try {
          for (const part of [u.username, u.password, ...u.pathname.split('/')]) decodeURIComponent(part);
        } catch {
          throw invalid(`cred_data.${k} has a malformed percent-encoding (a "%" not followed by two hex digits, or bytes that are not UTF-8)`);
        }
      }
    }
    out[k] = v;
  }
  for (const f of fields) {
    if (f.required && out[f.name] === undefined) throw invalid(`cred_data.${f.name} is required for ${provider}`);
  }
  return out;
}

function publicPart(provider: Provider, credentials: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of CREDENTIALS[provider]) if (!f.secret && credentials[f.name] !== undefined) out[f.name] = credentials[f.name];
  return out;
}

function bool(name: string, v: unknown, fallback: boolean): boolean {
  if (v === undefined) return fallback;
  if (typeof v !== 'boolean') throw invalid(`${name} must be true or false`);
  return v;
}

function checkPath(v: unknown): string {
  if (v === undefined) return '*';
  if (typeof v !== 'string' || v.length > 1024 || v.includes('\0') || !PATH.test(v) || v.split('/').some((s) => s === '..' || s === '.')) {
    throw invalid('path must be "*" (everything) or a prefix ending in "/*", such as "bucket/reports/*"');
  }
  return v;
}

type Row = ConnectorsTable & { id: number };

/**
 * A user's connected accounts (objstore:// and filehost://): their labels, what they expose
 * and whether they may be written, and their credentials, which go in and never come out.
 */
export class ConnectedAccounts {
  constructor(
    private readonly store: MetadataStore,
    private readonly box: CredentialBox,
    /** Connected accounts one user may have (ALGOHOST_MAX_CONNECTORS_PER_USER; 0: no cap). */
    private readonly maxPerUser = 0,
  ) {}

  private binding(userId: number, labelLc: string): string {
    return `connector:${userId}:${labelLc}`;
  }

  private view(r: Row): ConnectedAccount {
    return {
      label: r.label,
      protocol: r.protocol,
      provider: r.provider as Provider,
      is_default: r.is_default === 1,
      path: r.path,
      writeable: r.writeable === 1,
      // publicPart() of checked credentials: strings and booleans.
      cred_data: JSON.parse(r.public_cred) as ConnectedAccount['cred_data'],
      created_at: new Date(r.created_at).toISOString(),
      updated_at: new Date(r.updated_at).toISOString(),
    };
  }

  private async row(userId: number, label: string): Promise<Row> {
    const r = await this.store.db.selectFrom('connectors').selectAll().where('user_id', '=', userId).where('label_lc', '=', label.toLowerCase()).executeTakeFirst();
    if (!r) throw new AppError('unknown_connector', `you have no connected account labelled "${label.slice(0, 40)}"`);
    return r as Row;
  }

  async list(userId: number): Promise<ConnectedAccount[]> {
    const rows = await this.store.db.selectFrom('connectors').selectAll().where('user_id', '=', userId).orderBy('protocol').orderBy('label_lc').execute();
    return rows.map((r) => this.view(r as Row));
  }

  async get(userId: number, label: string): Promise<ConnectedAccount> {
    return this.view(await this.row(userId, label));
  }

  async create(userId: number, input: Record<string, unknown>): Promise<ConnectedAccount> {
    const label = input.label;
    if (typeof label !== 'string' || !LABEL.test(label)) throw invalid('label must be 1 to 32 letters, digits or dashes, starting with a letter or digit');
    const protocol = input.protocol;
    if (protocol !== 'objstore' && protocol !== 'filehost') throw invalid('protocol must be "objstore" (the S3 protocol) or "filehost" (file-sharing services)');
    const provider = (input.provider ?? DEFAULT_PROVIDER[protocol]) as Provider;
    if (!PROVIDERS[protocol].includes(provider)) throw invalid(`provider for ${protocol} must be ${PROVIDERS[protocol].map((p) => `"${p}"`).join(' or ')}`);
    const credentials = checkCredentials(provider, input.cred_data);
    const path = checkPath(input.path);
    const writeable = bool('writeable', input.writeable, false);
    const labelLc = label.toLowerCase();
    const now = Date.now();
    try {
      await this.store.write(async (trx) => {
        if (this.maxPerUser > 0) {
          const n = await trx.selectFrom('connectors').select((eb) => eb.fn.countAll().as('n')).where('user_id', '=', userId).executeTakeFirst();
          checkStoredCap({ code: 'too_many_connectors', what: 'connected accounts', setting: 'ALGOHOST_MAX_CONNECTORS_PER_USER', advice: 'delete one first' }, n?.n, this.maxPerUser);
        }
        const existing = await trx.selectFrom('connectors').select('id').where('user_id', '=', userId).where('protocol', '=', protocol).where('is_default', '=', 1).executeTakeFirst();
        // The first account of a protocol is its default; asking for default moves it here.
        const isDefault = bool('is_default', input.is_default, !existing);
        if (isDefault && existing) await trx.updateTable('connectors').set({ is_default: 0 }).where('id', '=', existing.id).execute();
        await trx
          .insertInto('connectors')
          .values({
            user_id: userId,
            label,
            label_lc: labelLc,
            protocol,
            provider,
            is_default: isDefault ? 1 : 0,
            path,
            writeable: writeable ? 1 : 0,
            public_cred: JSON.stringify(publicPart(provider, credentials)),
            sealed_cred: this.box.seal(credentials, this.binding(userId, labelLc)),
            created_at: now,
            updated_at: now,
          })
          .execute();
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new AppError('already_exists', `you already have a connected account labelled "${label}"`);
      throw err;
    }
    return this.get(userId, label);
  }

  /** Changes `is_default`, `path`, `writeable` or `cred_data` (merged over what is stored). */
  async update(userId: number, label: string, input: Record<string, unknown>): Promise<ConnectedAccount> {
    const current = await this.row(userId, label);
    for (const fixed of ['label', 'protocol', 'provider'] as const) {
      if (input[fixed] !== undefined && String(input[fixed]).toLowerCase() !== String(current[fixed === 'label' ? 'label_lc' : fixed])) {
        throw invalid(`${fixed} cannot be changed; delete the account and connect it again`);
      }
    }
    const provider = current.provider as Provider;
    let sealed = current.sealed_cred;
    let publicCred = current.public_cred;
    if (input.cred_data !== undefined) {
      if (typeof input.cred_data !== 'object' || input.cred_data === null || Array.isArray(input.cred_data)) throw invalid('cred_data must be a JSON object');
      const stored = this.box.open(current.sealed_cred, this.binding(userId, current.label_lc)) as Record<string, unknown>;
      const merged = checkCredentials(provider, { ...stored, ...(input.cred_data as Record<string, unknown>) });
      sealed = this.box.seal(merged, this.binding(userId, current.label_lc));
      publicCred = JSON.stringify(publicPart(provider, merged));
    }
    const path = input.path === undefined ? current.path : checkPath(input.path);
    const writeable = bool('writeable', input.writeable, current.writeable === 1);
    const isDefault = bool('is_default', input.is_default, current.is_default === 1);
    await this.store.write(async (trx) => {
      if (isDefault && current.is_default !== 1) {
        await trx.updateTable('connectors').set({ is_default: 0 }).where('user_id', '=', userId).where('protocol', '=', current.protocol).execute();
      }
      await trx
        .updateTable('connectors')
        .set({ path, writeable: writeable ? 1 : 0, is_default: isDefault ? 1 : 0, sealed_cred: sealed, public_cred: publicCred, updated_at: Date.now() })
        .where('id', '=', current.id)
        .execute();
    });
    return this.get(userId, label);
  }

  async delete(userId: number, label: string): Promise<void> {
    const current = await this.row(userId, label);
    await this.store.db.deleteFrom('connectors').where('id', '=', current.id).execute();
  }

  /** The account a data URI names (`objstore`, `objstore+label`), with its credentials. */
  async resolve(userId: number, protocol: Protocol, label: string | undefined): Promise<Account> {
    let q = this.store.db.selectFrom('connectors').selectAll().where('user_id', '=', userId).where('protocol', '=', protocol);
    q = label === undefined ? q.where('is_default', '=', 1) : q.where('label_lc', '=', label.toLowerCase());
    const r = (await q.executeTakeFirst()) as Row | undefined;
    if (!r) throw new AppError('unknown_connector', label === undefined ? `you have no default ${protocol} account; connect one at /v1/users/<you>/connectors` : `you have no ${protocol} account labelled "${label.slice(0, 40)}"`);
    const { created_at: _c, updated_at: _u, ...view } = this.view(r);
    return { ...view, credentials: this.box.open(r.sealed_cred, this.binding(userId, r.label_lc)) as Record<string, unknown> };
  }
}
