import { sql, type ExpressionBuilder } from 'kysely';
import type { Schema } from '../store/schema.ts';
import { AppError } from '../errors.ts';
import { isUniqueViolation, type Db, type MetadataStore } from '../store/db.ts';
import type { Principal } from '../auth/principal.ts';
import { isOwner } from '../data/acl.ts';
import type { MarkerCodec } from '../data/marker.ts';
import {
  DEFAULT_SETTINGS,
  checkSourceFields,
  parseDetails,
  parseSettings,
  readVersionInfo,
  validateAlgorithmName,
  type AlgorithmDetails,
  type AlgorithmSettings,
  type PendingVersionInfo,
} from './manifest.ts';

export interface Algorithm {
  id: number;
  owner: string;
  name: string;
  details: AlgorithmDetails;
  settings: AlgorithmSettings;
  created_at: number;
  updated_at: number;
  /** Content hash of the uploaded source; null while the algorithm has only its template. */
  source_hash: string | null;
  /** The build the last compile produced, when it succeeded: what a publish publishes. */
  build_hash: string | null;
  /** Sample input and release notes create or update were given, for the next publish. */
  version_info: PendingVersionInfo;
  /** Whether anyone but the owner can call some version of it. */
  has_public_version: boolean;
}

/** What create and update take: the original API's fields, as the official clients send them. */
export interface AlgorithmInput {
  name?: unknown;
  details?: unknown;
  settings?: unknown;
  version_info?: unknown;
  source?: unknown;
  scmsCredentials?: unknown;
}

interface Row {
  id: number;
  name: string;
  details: string;
  settings: string;
  created_at: number;
  updated_at: number;
  source_hash: string | null;
  build_hash: string | null;
  version_info: string | null;
  /** SQLite answers 0 or 1, PostgreSQL a boolean. */
  has_public_version: number | boolean;
  owner: string;
}

function toAlgorithm(row: Row): Algorithm {
  return {
    id: row.id,
    owner: row.owner,
    name: row.name,
    details: JSON.parse(row.details) as AlgorithmDetails,
    settings: { ...DEFAULT_SETTINGS, ...(JSON.parse(row.settings) as Partial<AlgorithmSettings>) },
    created_at: row.created_at,
    updated_at: row.updated_at,
    source_hash: row.source_hash,
    build_hash: row.build_hash,
    version_info: row.version_info ? (JSON.parse(row.version_info) as PendingVersionInfo) : {},
    has_public_version: row.has_public_version === 1 || row.has_public_version === true,
  };
}

/** The sample input and release notes of a create or update, over what was kept before. */
function pendingVersionInfo(raw: unknown, base: PendingVersionInfo): string | null {
  const { sample_input, release_notes } = readVersionInfo(raw);
  const next: PendingVersionInfo = { ...base, ...(sample_input !== undefined ? { sample_input } : {}), ...(release_notes !== undefined ? { release_notes } : {}) };
  return Object.keys(next).length > 0 ? JSON.stringify(next) : null;
}

/**
 * Whether the algorithm of the row has a version anyone may call (a public one). The value is
 * a literal, not a parameter: prepared statements (store.prepared) bind parameters by position.
 */
function hasPublicVersion({ exists, selectFrom }: ExpressionBuilder<Schema, 'algorithms'>) {
  return exists(selectFrom('versions').select('versions.id').whereRef('versions.algorithm_id', '=', 'algorithms.id').where('versions.callability', '=', sql.lit('public')));
}

export function noSuchAlgorithm(owner: string, name: string): AppError {
  // The Python client looks for "No such algorithm" in the message.
  return new AppError('algorithm_not_found', `No such algorithm: algo://${owner}/${name}`);
}

/**
 * The algorithms users own: names, descriptions and settings. Sources, builds and versions
 * hang off these records. Only the owner changes an algorithm, with a key that may manage
 * algorithms; others see an algorithm only while it is publicly callable.
 */
export class AlgorithmRegistry {
  private readonly db: Db;
  private readonly byName;
  /** The callability an algorithm was given (in its settings' JSON), as SQL. */
  private readonly callability;

  constructor(
    store: MetadataStore,
    private readonly markers: MarkerCodec,
    /** Whether the operator lets algorithms have network access (ALGOHOST_ALGORITHM_NETWORK). */
    private readonly allowNetwork = false,
  ) {
    this.db = store.db;
    this.callability = store.jsonText('algorithms.settings', 'algorithm_callability');
    this.byName = store.prepared(this.query().where('users.username_lc', '=', '').where('algorithms.name_lc', '=', ''));
  }

  private checkNetwork(settings: AlgorithmSettings, before?: AlgorithmSettings): void {
    if (settings.network_access === 'full' && before?.network_access !== 'full' && !this.allowNetwork) {
      throw new AppError(
        'network_not_allowed',
        'this server does not give algorithms network access (network_access "full"); its operator can allow it with ALGOHOST_ALGORITHM_NETWORK=nat (docs/security.md)',
      );
    }
  }

  /** The algorithm, for its owner acting with a key that may manage algorithms. */
  async manage(principal: Principal, owner: string, name: string): Promise<Algorithm> {
    this.requireManager(principal, owner);
    return this.require(principal, owner, name);
  }

  /** An algorithm by id, whoever asks (the server's own bookkeeping); undefined once deleted. */
  async byId(id: number): Promise<Algorithm | undefined> {
    const row = await this.query().where('algorithms.id', '=', id).executeTakeFirst();
    return row ? toAlgorithm(row) : undefined;
  }

  /** Records what the last compile produced (null: it failed). */
  async setBuild(id: number, hash: string | null): Promise<void> {
    await this.db.updateTable('algorithms').set({ build_hash: hash }).where('id', '=', id).execute();
  }

  /** Records a newly uploaded source. */
  async setSource(id: number, hash: string): Promise<void> {
    await this.db.updateTable('algorithms').set({ source_hash: hash, updated_at: Date.now() }).where('id', '=', id).execute();
  }

  /** Which of `ids` are algorithms that still exist. */
  async existing(ids: number[]): Promise<Set<number>> {
    const found = new Set<number>();
    for (let i = 0; i < ids.length; i += 500) {
      const rows = await this.db.selectFrom('algorithms').select('id').where('id', 'in', ids.slice(i, i + 500)).execute();
      for (const r of rows) found.add(Number(r.id));
    }
    return found;
  }

  private requireManager(principal: Principal, owner: string): void {
    if (!principal.permissions.allow_algo_management) {
      throw new AppError('key_permission_denied', 'this API key may not manage algorithms (allow_algo_management is off)');
    }
    if (!isOwner(principal, owner)) throw new AppError('forbidden', `only ${owner} can manage algorithms under ${owner}`);
  }

  private query() {
    return this.db
      .selectFrom('algorithms')
      .innerJoin('users', 'users.id', 'algorithms.owner_id')
      .select([
        'algorithms.id',
        'algorithms.name',
        'algorithms.details',
        'algorithms.settings',
        'algorithms.created_at',
        'algorithms.updated_at',
        'algorithms.source_hash',
        'algorithms.build_hash',
        'algorithms.version_info',
        (eb) => hasPublicVersion(eb).as('has_public_version'),
        'users.username as owner',
      ]);
  }

  async create(principal: Principal, owner: string, input: AlgorithmInput): Promise<Algorithm> {
    this.requireManager(principal, owner);
    const name = validateAlgorithmName(input.name);
    const details = parseDetails(input.details, { label: name, summary: '', tagline: '' });
    const settings = parseSettings(input.settings, DEFAULT_SETTINGS);
    const versionInfo = pendingVersionInfo(input.version_info, {});
    checkSourceFields(input);
    this.checkNetwork(settings);
    const now = Date.now();
    try {
      await this.db
        .insertInto('algorithms')
        .values({
          owner_id: principal.userId,
          name,
          name_lc: name.toLowerCase(),
          details: JSON.stringify(details),
          settings: JSON.stringify(settings),
          created_at: now,
          updated_at: now,
          source_hash: null,
          build_hash: null,
          version_info: versionInfo,
        })
        .execute();
    } catch (err) {
      if (isUniqueViolation(err)) throw new AppError('already_exists', `algorithm algo://${principal.username}/${name} already exists`);
      throw err;
    }
    return this.require(principal, principal.username, name);
  }

  /**
   * An algorithm as `principal` may see it: the owner always; others while it is public and
   * has a public version to call (one never published, or whose every build failed, is the
   * owner's work in progress, and stays out of sight like a private one).
   */
  async require(principal: Principal, owner: string, name: string): Promise<Algorithm> {
    const [row] = await this.byName([owner.toLowerCase(), name.toLowerCase()]);
    if (!row) throw noSuchAlgorithm(owner, name);
    const algo = toAlgorithm(row);
    if (!isOwner(principal, algo.owner) && (algo.settings.algorithm_callability !== 'public' || !algo.has_public_version)) throw noSuchAlgorithm(owner, name);
    return algo;
  }

  async update(principal: Principal, owner: string, name: string, input: AlgorithmInput): Promise<Algorithm> {
    this.requireManager(principal, owner);
    const current = await this.require(principal, owner, name);
    if (input.name !== undefined && (typeof input.name !== 'string' || input.name.toLowerCase() !== current.name.toLowerCase())) {
      throw new AppError('invalid_body', 'an algorithm cannot be renamed; create a new one');
    }
    const details = parseDetails(input.details, current.details);
    const settings = parseSettings(input.settings, current.settings);
    const versionInfo = pendingVersionInfo(input.version_info, current.version_info);
    checkSourceFields(input);
    this.checkNetwork(settings, current.settings);
    await this.db
      .updateTable('algorithms')
      .set({ details: JSON.stringify(details), settings: JSON.stringify(settings), version_info: versionInfo, updated_at: Date.now() })
      .where('id', '=', current.id)
      .execute();
    return this.require(principal, owner, name);
  }

  async delete(principal: Principal, owner: string, name: string): Promise<void> {
    this.requireManager(principal, owner);
    const current = await this.require(principal, owner, name);
    await this.db.deleteFrom('algorithms').where('id', '=', current.id).execute();
  }

  /**
   * One page of the public catalogue: publicly callable algorithms with at least one public
   * version, whose name or description contains `text` (any case), oldest first.
   */
  async searchPublic(text: string, marker: string | undefined, pageSize = 50): Promise<{ results: Algorithm[]; marker: string | null }> {
    const needle = text.trim().toLowerCase().slice(0, 200);
    const scope = `catalogue:${needle}`;
    const after = marker ? Number(this.markers.decode(scope, marker).after) : 0;
    let q = this.query()
      .where('algorithms.id', '>', after)
      .where(this.callability, '=', 'public')
      .where(hasPublicVersion)
      .orderBy('algorithms.id')
      .limit(pageSize + 1);
    if (needle !== '') {
      // LIKE with the pattern characters escaped: a search for "100%" means those characters.
      const pattern = `%${needle.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
      q = q.where(({ or, eb }) => or([eb(sql`lower(algorithms.name)`, 'like', sql`${pattern} escape '\\'`), eb(sql`lower(algorithms.details)`, 'like', sql`${pattern} escape '\\'`)]));
    }
    const rows = await q.execute();
    const more = rows.length > pageSize;
    if (more) rows.length = pageSize;
    const last = rows[rows.length - 1];
    return { results: rows.map(toAlgorithm), marker: more && last ? this.markers.encode(scope, { phase: 'files', after: String(last.id) }) : null };
  }

  /** One page of an owner's algorithms that `principal` may see, by name. */
  async listByOwner(principal: Principal, owner: string, marker: string | undefined, pageSize = 100): Promise<{ results: Algorithm[]; marker: string | null }> {
    const user = await this.db.selectFrom('users').select(['id']).where('username_lc', '=', owner.toLowerCase()).executeTakeFirst();
    if (!user) throw new AppError('unknown_user', `no user named "${owner.slice(0, 40)}"`);
    const scope = `algorithms:${user.id}`;
    const after = marker ? this.markers.decode(scope, marker).after : '';
    // Visibility is decided in SQL, before the limit: a marker is made from the last row
    // returned, and must never carry the name of an algorithm the caller may not see.
    let q = this.query()
      .where('algorithms.owner_id', '=', user.id)
      .where('algorithms.name_lc', '>', after)
      .orderBy('algorithms.name_lc')
      .limit(pageSize + 1);
    if (user.id !== principal.userId) {
      // As require() decides: public, and with a public version to call.
      q = q.where(this.callability, '=', 'public').where(hasPublicVersion);
    }
    const rows = await q.execute();
    const more = rows.length > pageSize;
    if (more) rows.length = pageSize;
    const last = rows[rows.length - 1];
    return {
      results: rows.map(toAlgorithm),
      marker: more && last ? this.markers.encode(scope, { phase: 'files', after: last.name.toLowerCase() }) : null,
    };
  }
}
