import { isUniqueViolation, type Db, type MetadataStore } from '../store/db.ts';
import { VersionedCache } from '../store/versionedCache.ts';
import { AppError } from '../errors.ts';
import type { Principal } from './principal.ts';
import type { KeyRecord } from '../../client/src/types.ts';
import { FULL_PERMISSIONS, exceedingPermission, parsePermissions, type KeyPermissions } from './permissions.ts';
import { API_KEY_PATTERN, generateApiKey, hashApiKey, keyFromAuthorization, newKeyId } from './apiKeys.ts';
import { SESSION_KEY_PREFIX } from './sessions.ts';
import { LIMIT_COLUMNS, ownLimits } from '../limits/limits.ts';
import { checkStoredCap } from '../limits/held.ts';

/** A key as shown to its owner (the wire record): never the secret, except once in the creation answer. */
export type { KeyRecord } from '../../client/src/types.ts';

const KEY_NAME = /^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$/;

function validateKeyName(name: unknown): string {
  if (typeof name !== 'string' || !KEY_NAME.test(name)) {
    throw new AppError(
      'invalid_key_name',
      'key name must be 1-64 characters: letters, digits, space, dot, underscore or dash, starting with a letter or digit',
    );
  }
  return name;
}

interface KeyRow {
  id: string;
  name: string;
  prefix: string;
  created_at: number;
  permissions: string;
}

function toRecord(row: KeyRow): KeyRecord {
  return {
    id: row.id,
    name: row.name,
    prefix: row.prefix,
    created_at: new Date(row.created_at).toISOString(),
    permissions: JSON.parse(row.permissions) as KeyPermissions,
  };
}

/** What is wrong with a key that does not have a key's shape, then what a key looks like. */
function misshapen(key: string): string {
  const shape = 'keys are 28 characters starting with "sim"';
  // "Authorization: Simple $KEY" with $KEY unset arrives as the scheme alone.
  if (/^(simple|bearer)$/i.test(key)) return `the Authorization header has "${key}" but no key after it (is the variable holding the key set?); ${shape}`;
  if (key.length !== 28) return `it has ${key.length} characters; ${shape}`;
  if (!key.startsWith('sim')) return `it does not start with "sim"; ${shape}`;
  return `it holds characters other than letters and digits; ${shape}`;
}

export class KeyService {
  private readonly db: Db;
  private readonly byHash;
  private readonly principals: VersionedCache<Principal | { refused: AppError }>;

  constructor(
    private readonly store: MetadataStore,
    /** Keys (not revoked) one user may have (ALGOHOST_MAX_KEYS_PER_USER; 0: no cap). */
    private readonly maxPerUser = 0,
  ) {
    this.db = store.db;
    this.principals = new VersionedCache(store);
    this.byHash = store.prepared(
      this.db
        .selectFrom('api_keys')
        .innerJoin('users', 'users.id', 'api_keys.user_id')
        .leftJoin('user_limits', 'user_limits.user_id', 'users.id')
        .select(['api_keys.id as keyId', 'api_keys.permissions', 'api_keys.revoked_at', 'users.id as userId', 'users.username', ...LIMIT_COLUMNS])
        .where('api_keys.key_hash', '=', ''),
    );
  }

  /**
   * authenticate()'s principal when the key's is cached, without a promise (the warm call
   * path); undefined when it is not, or when the key is refused: authenticate() then answers.
   */
  cachedPrincipal(authorization: string | undefined, at?: string): Principal | undefined {
    // The usual form, "Simple <key>", without keyFromAuthorization's splitting: anything else
    // about it (spacing, another scheme) fails the pattern or goes that way.
    const key = authorization?.startsWith('Simple ') ? authorization.slice(7) : keyFromAuthorization(authorization);
    if (key === undefined || !API_KEY_PATTERN.test(key)) return undefined;
    const found = this.principals.peek(hashApiKey(key), at);
    return found === undefined || 'refused' in found ? undefined : found;
  }

  /**
   * Establishes the principal of a request from its Authorization header. Principals are
   * cached against the store's version (`at`, when the request read it already; see
   * VersionedCache), so revoking a key, even from the admin CLI in another process, takes
   * effect on the very next request.
   */
  async authenticate(authorization: string | undefined, at?: string): Promise<Principal> {
    const key = keyFromAuthorization(authorization);
    if (key === undefined) throw new AppError('auth_required', 'authorization required');
    if (!API_KEY_PATTERN.test(key)) throw new AppError('invalid_api_key', `API key not recognised: ${misshapen(key)}`);
    const hash = hashApiKey(key);
    const found = await this.principals.get(hash, async () => {
      const [row] = await this.byHash([hash]);
      if (!row) return { refused: new AppError('invalid_api_key', 'API key not recognised: no key of this server has that value (made on another server, or deleted?)') };
      if (row.revoked_at !== null) return { refused: new AppError('api_key_revoked', 'this API key was revoked; use another key') };
      // Shared by every request made with this key until the store changes: frozen.
      return Object.freeze({
        userId: row.userId,
        username: row.username,
        keyId: row.keyId,
        permissions: Object.freeze(JSON.parse(row.permissions) as KeyPermissions),
        limits: ownLimits(row),
      });
    }, at);
    if ('refused' in found) throw new AppError(found.refused.code, found.refused.message);
    return found;
  }

  /**
   * The principal of key `keyId` as it stands now (not cached): how a call accepted earlier
   * (output=void) or a trigger's run acts when it runs, so that a key revoked or narrowed since
   * is honoured, and its user's own limits (a compute quota, a share) are theirs as they are now.
   */
  async principalById(keyId: string, userId?: number): Promise<Principal> {
    // A call a console session queued acts as the user, as the session did (it held all permissions).
    if (keyId.startsWith(SESSION_KEY_PREFIX) && userId !== undefined) {
      const user = await this.db
        .selectFrom('users')
        .leftJoin('user_limits', 'user_limits.user_id', 'users.id')
        .select(['users.id', 'users.username', ...LIMIT_COLUMNS])
        .where('users.id', '=', userId)
        .executeTakeFirst();
      if (!user) throw new AppError('unknown_user', 'the user who made this call no longer exists');
      return { userId: user.id, username: user.username, keyId, permissions: { ...FULL_PERMISSIONS }, limits: ownLimits(user) };
    }
    const row = await this.db
      .selectFrom('api_keys')
      .innerJoin('users', 'users.id', 'api_keys.user_id')
      .leftJoin('user_limits', 'user_limits.user_id', 'users.id')
      .select(['api_keys.id as keyId', 'api_keys.permissions', 'api_keys.revoked_at', 'users.id as userId', 'users.username', ...LIMIT_COLUMNS])
      .where('api_keys.id', '=', keyId)
      .executeTakeFirst();
    if (!row) throw new AppError('invalid_api_key', 'the API key of this call no longer exists');
    if (row.revoked_at !== null) throw new AppError('api_key_revoked', 'the API key of this call was revoked before it ran');
    return { userId: row.userId, username: row.username, keyId: row.keyId, permissions: JSON.parse(row.permissions) as KeyPermissions, limits: ownLimits(row) };
  }

  /**
   * Creates a key. `actor` is the key that asks (absent for the admin CLI, which acts with
   * the operator's authority); it can only hand out permissions it has itself.
   */
  async create(userId: number, input: { name?: unknown; permissions?: unknown }, actor?: KeyPermissions): Promise<{ record: KeyRecord; apiKey: string }> {
    const name = validateKeyName(input.name);
    const permissions = parsePermissions(input.permissions, actor ?? FULL_PERMISSIONS);
    if (actor) this.checkSubset(permissions, actor);
    const apiKey = generateApiKey();
    const row = {
      id: newKeyId(),
      user_id: userId,
      name,
      key_hash: hashApiKey(apiKey),
      prefix: apiKey.slice(0, 8),
      permissions: JSON.stringify(permissions),
      created_at: Date.now(),
      revoked_at: null,
    };
    try {
      // Counted and added in one write, so that keys made at once cannot pass the cap together.
      await this.store.write(async (trx) => {
        if (this.maxPerUser > 0) {
          const n = await trx.selectFrom('api_keys').select((eb) => eb.fn.countAll().as('n')).where('user_id', '=', userId).where('revoked_at', 'is', null).executeTakeFirst();
          checkStoredCap({ code: 'too_many_keys', what: 'API keys', setting: 'ALGOHOST_MAX_KEYS_PER_USER', advice: 'revoke one first' }, n?.n, this.maxPerUser);
        }
        await trx.insertInto('api_keys').values(row).execute();
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new AppError('already_exists', `a key named "${name}" already exists`);
      throw err;
    }
    return { record: toRecord(row), apiKey };
  }

  async list(userId: number): Promise<KeyRecord[]> {
    const rows = await this.db
      .selectFrom('api_keys')
      .select(['id', 'name', 'prefix', 'created_at', 'permissions'])
      .where('user_id', '=', userId)
      .where('revoked_at', 'is', null)
      .orderBy('created_at')
      .orderBy('id')
      .execute();
    return rows.map(toRecord);
  }

  async get(userId: number, keyId: string): Promise<KeyRecord> {
    const row = await this.db
      .selectFrom('api_keys')
      .select(['id', 'name', 'prefix', 'created_at', 'permissions'])
      .where('user_id', '=', userId)
      .where('id', '=', keyId)
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    if (!row) throw new AppError('key_not_found', `no key with id "${keyId.slice(0, 40)}"`);
    return toRecord(row);
  }

  async update(userId: number, keyId: string, input: { name?: unknown; permissions?: unknown }, actor?: KeyPermissions): Promise<KeyRecord> {
    const current = await this.get(userId, keyId);
    if (actor) this.checkTarget(current, actor);
    const name = input.name === undefined ? current.name : validateKeyName(input.name);
    const permissions = parsePermissions(input.permissions, current.permissions);
    if (actor) this.checkSubset(permissions, actor);
    try {
      await this.db
        .updateTable('api_keys')
        .set({ name, permissions: JSON.stringify(permissions) })
        .where('id', '=', keyId)
        .where('user_id', '=', userId)
        .execute();
    } catch (err) {
      if (isUniqueViolation(err)) throw new AppError('already_exists', `a key named "${name}" already exists`);
      throw err;
    }
    return { ...current, name, permissions };
  }

  /** Revokes a key: it stops authenticating at once. The record stays for the audit trail. */
  async revoke(userId: number, keyId: string, actor?: KeyPermissions): Promise<void> {
    if (actor) this.checkTarget(await this.get(userId, keyId), actor);
    const res = await this.db
      .updateTable('api_keys')
      .set({ revoked_at: Date.now() })
      .where('id', '=', keyId)
      .where('user_id', '=', userId)
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) === 0) throw new AppError('key_not_found', `no key with id "${keyId.slice(0, 40)}"`);
  }

  /**
   * A key may change or revoke only keys no stronger than itself: a leaked low-power key must
   * not be able to lock its owner out by revoking or downgrading the default key.
   */
  private checkTarget(target: KeyRecord, actor: KeyPermissions): void {
    const over = exceedingPermission(target.permissions, actor);
    if (over) {
      throw new AppError('permission_escalation', `key "${target.name}" has "${over}", which the key making this request lacks, so it cannot change or revoke it`);
    }
  }

  private checkSubset(permissions: KeyPermissions, actor: KeyPermissions): void {
    const over = exceedingPermission(permissions, actor);
    if (over) {
      throw new AppError('permission_escalation', `the key making this request lacks "${over}", so it cannot grant it`);
    }
  }
}
