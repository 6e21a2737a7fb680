import type { Selectable } from 'kysely';
import { AppError } from '../errors.ts';
import type { VersionsTable } from '../store/schema.ts';
import { isUniqueViolation, type Db, type MetadataStore } from '../store/db.ts';
import { VersionedCache } from '../store/versionedCache.ts';
import type { Principal } from '../auth/principal.ts';
import { isOwner } from '../data/acl.ts';
import type { MarkerCodec } from '../data/marker.ts';
import type { Algorithm, AlgorithmRegistry } from './registry.ts';
import { ownerId, type Build, type BuildService } from './builds.ts';
import { appendEvent } from '../events/outbox.ts';
import { DEFAULT_SETTINGS, checkSourceFields, readVersionInfo, type AlgorithmSettings } from './manifest.ts';
import { compareSemVer, formatSemVer, type Selector, nextVersion, parseSelector, resolveVersion, type PublishedVersion, type SemVer, type VersionType } from './versions.ts';

export interface Version extends SemVer {
  id: number;
  algorithmId: number;
  buildHash: string;
  callability: 'public' | 'private';
  release_notes: string;
  sample_input: unknown;
  /** How the algorithm ran when this version was published. */
  settings: AlgorithmSettings;
  created_at: number;
}

/** What a call runs: a published version, or (for the owner) a build by hash. */
export interface CallTarget {
  algorithm: Algorithm;
  build: Build;
  /** `1.2.3`, or null when called by build hash. */
  version: string | null;
  settings: AlgorithmSettings;
}

const VERSION_TYPES = new Set<VersionType>(['major', 'minor', 'revision']);

type VersionRow = Omit<Selectable<VersionsTable>, 'build_id'> & { build_hash: string };

function toVersion(r: VersionRow): Version {
  return {
    id: r.id,
    algorithmId: r.algorithm_id,
    major: r.major,
    minor: r.minor,
    patch: r.patch,
    buildHash: r.build_hash,
    callability: r.callability,
    release_notes: r.release_notes,
    sample_input: r.sample_input === null ? null : (JSON.parse(r.sample_input) as unknown),
    settings: { ...DEFAULT_SETTINGS, ...(JSON.parse(r.settings) as Partial<AlgorithmSettings>) },
    created_at: r.created_at,
  };
}

function notFound(owner: string, name: string, version?: string): AppError {
  // The original's message for a call to an algorithm that is not there (compat.md).
  return new AppError('algorithm_not_found', `algorithm algo://${owner}/${name}${version ? `/${version}` : ''} not found`);
}

/**
 * Published versions: publishing makes the last successful build callable under the next
 * semantic version; calls resolve a version selector to a build.
 */
export class ReleaseService {
  private readonly db: Db;
  private readonly store: MetadataStore;
  private readonly ofAlgorithm;
  /** What a (caller, reference) resolves to, until the store changes. */
  private readonly targets: VersionedCache<CallTarget | { missing: AppError }>;
  /**
   * Told of each version published once it is in the store, with the version a call without a
   * version resolved to before it, as its owner calls (none for a first): services.ts has the
   * executor warm the new one (CallService.warmPublished).
   */
  onPublished: ((principal: Principal, owner: string, name: string, version: string, after: string) => void) | undefined;

  constructor(
    store: MetadataStore,
    private readonly registry: AlgorithmRegistry,
    private readonly builds: BuildService,
    private readonly markers: MarkerCodec,
  ) {
    this.db = store.db;
    this.store = store;
    this.ofAlgorithm = store.prepared(this.versions().where('versions.algorithm_id', '=', 0));
    this.targets = new VersionedCache(store);
  }

  private versions() {
    return this.db
      .selectFrom('versions')
      .innerJoin('builds', 'builds.id', 'versions.build_id')
      .select([
        'versions.id',
        'versions.algorithm_id',
        'versions.major',
        'versions.minor',
        'versions.patch',
        'versions.callability',
        'versions.release_notes',
        'versions.sample_input',
        'versions.settings',
        'versions.created_at',
        'builds.hash as build_hash',
      ]);
  }

  /**
   * Publishes the last successful build. `details` and `settings` sent along update the
   * algorithm first (the original API's publish body); `version_info` says how to number it.
   */
  async publish(
    principal: Principal,
    owner: string,
    name: string,
    input: { details?: unknown; settings?: unknown; version_info?: unknown; source?: unknown; scmsCredentials?: unknown },
  ): Promise<{ algorithm: Algorithm; version: Version }> {
    const info = parseVersionInfo(input.version_info);
    checkSourceFields(input);
    // A publish's algorithm_callability is this version's alone: a private publish must not
    // hide the versions already public (spec 9.2: the default is the latest public one).
    const { settings, callability } = splitCallability(input.settings);
    const first = await this.registry.manage(principal, owner, name);
    return this.builds.lock.run(first.id, async () => {
      const algo =
        input.details !== undefined || settings !== undefined
          ? await this.registry.update(principal, owner, name, { details: input.details, settings })
          : await this.registry.manage(principal, owner, name);
      const build = await this.builds.current(algo);
      if (!build) {
        throw new AppError('no_build', `algo://${algo.owner}/${algo.name} has nothing to publish: its last compile failed or it was never compiled; compile it first`);
      }
      const all = await this.versions().where('versions.algorithm_id', '=', algo.id).execute();
      const same = all.find((v) => v.build_hash === build.hash);
      if (same) {
        throw new AppError(
          'already_published',
          `build ${build.hash} is already published as version ${formatSemVer(same)}; change the source and compile again to publish a new version`,
        );
      }
      const latest = all.reduce<SemVer | undefined>((best, v) => (!best || compareSemVer(v, best) > 0 ? v : best), undefined);
      // What a call without a version went to until now (the latest public version; an algorithm
      // with none, its owner's latest private one): its callers are who may come to the new one.
      const unversioned = choose(all.map((r) => published(toVersion(r))), { kind: 'latest' }, true);
      const next = nextVersion(latest, info.version_type);
      const visibility = callability ?? algo.settings.algorithm_callability;
      try {
        // The version and its event, together (events/outbox.ts).
        await this.store.write(async (trx) => {
          const now = Date.now();
          await trx
            .insertInto('versions')
            .values({
              algorithm_id: algo.id,
              build_id: build.id,
              ...next,
              callability: visibility,
              release_notes: info.release_notes ?? algo.version_info.release_notes ?? '',
              sample_input: JSON.stringify(info.sample_input ?? algo.version_info.sample_input) ?? null,
              settings: JSON.stringify(algo.settings),
              created_at: now,
            })
            .execute();
          const version = formatSemVer(next);
          await appendEvent(trx, {
            userId: await ownerId(trx, algo.id),
            type: 'algorithm.version.published',
            subject: `algo://${algo.owner}/${algo.name}/${version}`,
            data: { algorithm: `${algo.owner}/${algo.name}`, version, build: build.hash, callability: visibility, by: principal.username },
            time: now,
            traceparent: principal.traceparent,
          });
        });
      } catch (err) {
        if (isUniqueViolation(err)) throw new AppError('already_published', `version ${formatSemVer(next)} of algo://${algo.owner}/${algo.name} was published at the same time; try again`);
        throw err;
      }
      const row = await this.versions().where('versions.algorithm_id', '=', algo.id).where('versions.build_id', '=', build.id).executeTakeFirstOrThrow();
      if (unversioned !== undefined) this.onPublished?.(principal, algo.owner, algo.name, formatSemVer(next), formatSemVer(unversioned));
      return { algorithm: algo, version: toVersion(row) };
    });
  }

  /** One page of versions, newest first; others see public versions only. */
  async list(principal: Principal, owner: string, name: string, marker: string | undefined, pageSize = 50): Promise<{ algorithm: Algorithm; results: Version[]; marker: string | null }> {
    const algo = await this.registry.require(principal, owner, name);
    const scope = `versions:${algo.id}`;
    const before = marker ? Number(this.markers.decode(scope, marker).after) : Number.MAX_SAFE_INTEGER;
    let q = this.versions().where('versions.algorithm_id', '=', algo.id).where('versions.id', '<', before).orderBy('versions.id', 'desc').limit(pageSize + 1);
    if (!isOwner(principal, algo.owner)) q = q.where('versions.callability', '=', 'public');
    const rows = await q.execute();
    const more = rows.length > pageSize;
    if (more) rows.length = pageSize;
    const last = rows[rows.length - 1];
    return { algorithm: algo, results: rows.map(toVersion), marker: more && last ? this.markers.encode(scope, { phase: 'files', after: String(last.id) }) : null };
  }

  /** One version, by build hash (`git_hash`) or by number. */
  async get(principal: Principal, owner: string, name: string, ref: string): Promise<{ algorithm: Algorithm; version: Version }> {
    const algo = await this.registry.require(principal, owner, name);
    const selector = parseSelector(ref);
    const rows = (await this.versions().where('versions.algorithm_id', '=', algo.id).execute()).map(toVersion);
    const mine = isOwner(principal, algo.owner);
    const v =
      selector.kind === 'build'
        ? rows.find((r) => r.buildHash === selector.hash && (mine || r.callability === 'public'))
        : rows.find((r) => r.id === resolveVersion(rows.map(published), selector, mine)?.id);
    if (!v) throw new AppError('version_not_found', `algo://${algo.owner}/${algo.name} has no version ${ref.slice(0, 60)}`);
    return { algorithm: algo, version: v };
  }

  /**
   * What a call of `owner/name/selector` runs, as `principal` may see it. Anything the
   * caller may not call is "not found", like what does not exist: private names do not leak.
   * `at`: the store's version the request read its key against (VersionedCache).
   */
  async resolveCall(principal: Principal, owner: string, name: string, selectorText: string | undefined, at?: string): Promise<CallTarget> {
    const selector = parseSelector(selectorText);
    const found = await this.targets.get(targetKey(principal, owner, name, selectorText), async () => {
      try {
        return await this.resolveUncached(principal, owner, name, selectorText, selector);
      } catch (err) {
        if (err instanceof AppError && err.code === 'algorithm_not_found') return { missing: err };
        throw err;
      }
    }, at);
    if ('missing' in found) throw new AppError(found.missing.code, found.missing.message);
    return found;
  }

  /**
   * resolveCall()'s target when it is cached, without a promise (the warm call path);
   * undefined when it is not, or when it is "not found": resolveCall() then answers.
   */
  cachedCall(principal: Principal, owner: string, name: string, selectorText: string | undefined, at?: string): CallTarget | undefined {
    const found = this.targets.peek(targetKey(principal, owner, name, selectorText), at);
    return found === undefined || 'missing' in found ? undefined : found;
  }

  private async resolveUncached(principal: Principal, owner: string, name: string, selectorText: string | undefined, selector: Selector): Promise<CallTarget> {
    let algo: Algorithm;
    try {
      algo = await this.registry.require(principal, owner, name);
    } catch (err) {
      if (err instanceof AppError && err.code === 'algorithm_not_found') throw notFound(owner, name, selectorText);
      throw err;
    }
    const mine = isOwner(principal, algo.owner);
    if (selector.kind === 'build') {
      const build = mine ? await this.builds.succeeded(algo.id, selector.hash) : undefined;
      if (!build) throw notFound(algo.owner, algo.name, selectorText);
      return { algorithm: algo, build, version: null, settings: algo.settings };
    }
    const rows = (await this.ofAlgorithm([algo.id])).map(toVersion);
    const candidates = rows.map(published);
    const chosen = choose(candidates, selector, mine);
    const version = chosen && rows.find((r) => r.id === chosen.id);
    if (!version) throw notFound(algo.owner, algo.name, selectorText);
    const build = await this.builds.succeeded(algo.id, version.buildHash);
    if (!build) throw notFound(algo.owner, algo.name, selectorText);
    return { algorithm: algo, build, version: formatSemVer(version), settings: version.settings };
  }
}

/** A call target's cache key: what a reference resolves to depends on who asks (owner or not, private or public). */
function targetKey(principal: Principal, owner: string, name: string, selectorText: string | undefined): string {
  return `${principal.userId}\u0000${owner.toLowerCase()}\u0000${name.toLowerCase()}\u0000${selectorText ?? ''}`;
}

/**
 * The version `selector` names among `candidates`, as a caller sees it (`mine`: the owner). The
 * owner's "latest" is the latest public version too; only an algorithm with no public version
 * at all (a private one) gives its owner its latest private version instead.
 */
function choose<V extends PublishedVersion>(candidates: readonly V[], selector: Selector, mine: boolean): V | undefined {
  return resolveVersion(candidates, selector, mine) ?? (selector.kind === 'latest' && mine ? resolveVersion(candidates, { kind: 'latestPrivate' }, mine) : undefined);
}

function published(v: Version): PublishedVersion & { id: number } {
  return { id: v.id, major: v.major, minor: v.minor, patch: v.patch, buildHash: v.buildHash, public: v.callability === 'public' };
}

function parseVersionInfo(raw: unknown): { version_type: VersionType; release_notes: string | undefined; sample_input: unknown } {
  const v = readVersionInfo(raw);
  const type = v.version_type ?? 'minor';
  if (typeof type !== 'string' || !VERSION_TYPES.has(type as VersionType)) {
    throw new AppError('invalid_version', 'version_info.version_type must be "major", "minor" or "revision"');
  }
  return { version_type: type as VersionType, release_notes: v.release_notes, sample_input: v.sample_input };
}

/** A publish's settings without algorithm_callability, which it applies to the new version alone. */
function splitCallability(raw: unknown): { settings: unknown; callability: 'public' | 'private' | undefined } {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw) || !('algorithm_callability' in raw)) return { settings: raw, callability: undefined };
  const { algorithm_callability: value, ...rest } = raw as Record<string, unknown>;
  if (value !== 'public' && value !== 'private') throw new AppError('invalid_body', 'settings.algorithm_callability must be one of public, private');
  return { settings: Object.keys(rest).length > 0 ? rest : undefined, callability: value };
}
