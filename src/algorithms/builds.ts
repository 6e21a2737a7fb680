import crypto from 'node:crypto';
import { sql, type Selectable } from 'kysely';
import fs from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { AppError } from '../errors.ts';
import type { Db, MetadataStore } from '../store/db.ts';
import type { BuildStatus, BuildsTable } from '../store/schema.ts';
import type { Principal } from '../auth/principal.ts';
import type { HeldSlots } from '../limits/held.ts';
import type { RunnerKind } from '../runtime/contract.ts';
import { noSuchAlgorithm, type Algorithm, type AlgorithmRegistry } from './registry.ts';
import { extractTarGz, hashTree, type ExtractLimits } from './archive.ts';
import { writeTemplate } from './templates.ts';
import type { Builder } from './builder.ts';
import { KeyedLock } from './keyedLock.ts';
import type { AlgorithmArtifacts } from './artifacts.ts';
import type { AlgorithmFiles } from './files.ts';
import type { Language } from './manifest.ts';
import { appendEvent, appendEvents, type NewEvent } from '../events/outbox.ts';
import { NO_METRICS, type Metrics } from '../metrics.ts';
import { NO_TRACING, parseTraceparent, traceparentOf, type Tracer } from '../tracing.ts';

export interface Build {
  id: number;
  algorithmId: number;
  /** 40 hex, `version_info.git_hash`. */
  hash: string;
  status: BuildStatus;
  language: Language;
  runner: RunnerKind | null;
  entry: string | null;
  logs: string;
  started_at: number;
  finished_at: number | null;
}

const HASH = /^[0-9a-f]{40}$/;

/** What of a README is kept with its build (the rest is cut, with a line saying so). */
export const MAX_README_BYTES = 256 * 1024;

/**
 * Text as editors save it: UTF-8 (a byte-order mark dropped), or UTF-16 with its mark (what
 * Windows calls "Unicode"). Null for what is not text (a NUL in it): stored, it would fail
 * PostgreSQL's TEXT, and shown, it would be noise.
 */
export function decodeText(bytes: Buffer): string | null {
  let text: string;
  if (bytes[0] === 0xff && bytes[1] === 0xfe) text = bytes.subarray(2, bytes.length - (bytes.length % 2)).toString('utf16le');
  else if (bytes[0] === 0xfe && bytes[1] === 0xff) text = Buffer.from(bytes.subarray(2, bytes.length - (bytes.length % 2))).swap16().toString('utf16le');
  else text = bytes.toString('utf8').replace(/^\uFEFF/, '');
  return text.includes('\u0000') ? null : text;
}

/**
 * The README of a source tree, if it has one at its top: `README.md` in any case (then
 * `README.markdown`, `README`), a regular file read as UTF-8, cut to MAX_README_BYTES.
 */
export async function readReadme(dir: string): Promise<string | null> {
  let names: string[];
  try {
    names = await fs.promises.readdir(dir);
  } catch {
    return null;
  }
  for (const wanted of ['readme.md', 'readme.markdown', 'readme']) {
    const name = names.find((n) => n.toLowerCase() === wanted);
    if (name === undefined) continue;
    const file = path.join(dir, name);
    const stat = await fs.promises.lstat(file);
    if (!stat.isFile()) continue; // never follow a link out of the tree
    const handle = await fs.promises.open(file, 'r');
    try {
      const buf = Buffer.alloc(Math.min(stat.size, MAX_README_BYTES));
      const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
      let text = decodeText(buf.subarray(0, bytesRead));
      if (text === null) return null;
      if (stat.size > MAX_README_BYTES) text = text.replace(/\uFFFD?$/, '') + `\n\n*(The README is cut here: it is longer than ${MAX_README_BYTES / 1024} KiB.)*\n`;
      return text;
    } finally {
      await handle.close();
    }
  }
  return null;
}

/** A build's id: the hash of everything that decides what it contains. */
function buildHash(algo: Algorithm, sourceHash: string): string {
  return crypto.createHash('sha1').update(`algohost-build 1\n${algo.settings.language}\n${algo.name}\n${sourceHash}\n`).digest('hex');
}

/** A build as the API shows it (which process runs it is the store's business, not the owner's). */
function toBuild(row: Omit<Selectable<BuildsTable>, 'holder' | 'readme'>): Build {
  return {
    id: row.id,
    algorithmId: row.algorithm_id,
    hash: row.hash,
    status: row.status,
    // Written from the algorithm's settings.language when the build started.
    language: row.language as Language,
    runner: row.runner as RunnerKind | null,
    entry: row.entry,
    logs: row.logs,
    started_at: row.started_at,
    finished_at: row.finished_at,
  };
}

/**
 * Sources and builds: an owner uploads a tar.gz of the source, then compiles it into an
 * immutable build named by the hash of its content. Compiling the same source again answers
 * the existing build. One upload, build or publish of an algorithm runs at a time.
 */
export class BuildService {
  readonly lock = new KeyedLock();
  private readonly db: Db;
  private readonly store: MetadataStore;
  private readonly instance: string;
  private readonly isLive: (holder: string | null) => Promise<boolean>;
  private readonly byHash;
  private readonly runnable;

  constructor(
    store: MetadataStore,
    private readonly registry: AlgorithmRegistry,
    readonly files: AlgorithmFiles,
    private readonly artifacts: AlgorithmArtifacts,
    private readonly builder: Builder,
    private readonly extractLimits: Partial<ExtractLimits>,
    /** Builds counted by result, with their time (docs/metrics.md). */
    private readonly metrics: Metrics = NO_METRICS,
    /** Each build's span, a child of the request (a compile, a git push) that asked for it (docs/traces.md). */
    private readonly tracing: Tracer = NO_TRACING,
    /** A user's compiles running or waiting at once, capped (docs/security.md "What one user can hold"). */
    readonly held?: HeldSlots,
  ) {
    this.db = store.db;
    this.store = store;
    this.instance = store.instance;
    this.isLive = (holder) => store.isLive(holder);
    this.byHash = store.prepared(this.db.selectFrom('builds').selectAll().where('algorithm_id', '=', 0).where('hash', '=', ''));
    // Calls need to know how to run a build, not its (up to 256 KiB) log.
    this.runnable = store.prepared(
      this.db
        .selectFrom('builds')
        .select(['id', 'algorithm_id', 'hash', 'status', 'language', 'runner', 'entry', 'started_at', 'finished_at', sql<string>`''`.as('logs')])
        .where('algorithm_id', '=', 0)
        .where('hash', '=', '')
        .where('status', '=', 'succeeded'),
    );
  }

  async uploadSource(principal: Principal, owner: string, name: string, body: Readable): Promise<{ hash: string; files: number; bytes: number }> {
    const algo = await this.registry.manage(principal, owner, name);
    const dir = await this.files.scratch('source-');
    try {
      const r = await extractTarGz(body, dir, this.extractLimits);
      await this.lock.run(algo.id, async () => {
        // Deleted while the archive streamed in: leave nothing behind.
        if ((await this.registry.manage(principal, owner, name)).id !== algo.id) throw noSuchAlgorithm(owner, name);
        const target = this.files.sourceDir(algo.id, r.hash);
        await fs.promises.mkdir(this.files.algorithmDir(algo.id), { recursive: true });
        if (!fs.existsSync(target)) await fs.promises.rename(dir, target);
        // Stored for other servers before the algorithm names it: whoever reads the new
        // source_hash finds the tree.
        await this.artifacts.publish(algo.id, 'source', r.hash);
        await this.registry.setSource(algo.id, r.hash);
        // Earlier sources are replaced: builds keep their own copies.
        for (const entry of await fs.promises.readdir(this.files.algorithmDir(algo.id))) {
          if (entry.startsWith('source-') && entry !== `source-${r.hash}`) {
            await fs.promises.rm(path.join(this.files.algorithmDir(algo.id), entry), { recursive: true, force: true });
          }
        }
      });
      return r;
    } finally {
      await fs.promises.rm(dir, { recursive: true, force: true });
    }
  }

  /** Makes a directory on this machine the algorithm's source (demo algorithms). */
  async useSourceTree(algo: Algorithm, dir: string): Promise<string> {
    const hash = await hashTree(dir);
    await this.lock.run(algo.id, async () => {
      const target = this.files.sourceDir(algo.id, hash);
      if (!fs.existsSync(target)) await fs.promises.cp(dir, target, { recursive: true, verbatimSymlinks: true });
      await this.artifacts.publish(algo.id, 'source', hash);
      await this.registry.setSource(algo.id, hash);
    });
    return hash;
  }

  /**
   * Takes one of the user's compiles (refused at their cap, too_many_builds) ahead of what leads
   * to it: a push stores its source only once it may build it. Give it to compile(); releasing
   * it twice is harmless.
   */
  async holdCompile(principal: Principal): Promise<() => void> {
    return (await this.held?.hold(principal.userId)) ?? (() => undefined);
  }

  /** Builds the current source (or the language's template when none was uploaded); `held`: a compile taken with holdCompile. */
  async compile(principal: Principal, owner: string, name: string, held?: () => void): Promise<{ algorithm: Algorithm; build: Build }> {
    let release = held;
    let first: Algorithm;
    try {
      first = await this.registry.manage(principal, owner, name);
    } catch (err) {
      release?.();
      throw err;
    }
    // Refused before it waits: a compile waits for its algorithm's lock and a build slot, holding its request.
    release ??= await this.held?.hold(principal.userId);
    try {
      return await this.compileHeld(principal, owner, name, first);
    } finally {
      release?.();
    }
  }

  private compileHeld(principal: Principal, owner: string, name: string, first: Algorithm): Promise<{ algorithm: Algorithm; build: Build }> {
    return this.lock.run(first.id, async () => {
      // Read again under the lock: an upload may have finished while we waited.
      const algo = await this.registry.manage(principal, owner, name);
      return this.withSourceTree(algo, async (sourceDir) => {
        const sourceHash = algo.source_hash ?? (await hashTree(sourceDir));
        const hash = buildHash(algo, sourceHash);
        const existing = await this.find(algo.id, hash);
        const reusable = existing?.status === 'succeeded' && (await this.artifacts.ensure(algo.id, 'build', hash));
        const build = reusable ? existing : await this.run(algo, hash, sourceDir, existing, principal.traceparent);
        // A failed compile leaves nothing to publish: what the owner has now does not build.
        await this.registry.setBuild(algo.id, build.status === 'succeeded' ? build.hash : null);
        return { algorithm: { ...algo, build_hash: build.status === 'succeeded' ? build.hash : null }, build };
      });
    });
  }

  /**
   * Runs `fn` on the directory of the algorithm's current source: the uploaded one, or its
   * language's template (written to a scratch directory for the while) when nothing was.
   * Call it holding the algorithm's lock: an upload replaces source directories.
   */
  async withSourceTree<T>(algo: Algorithm, fn: (dir: string) => Promise<T>): Promise<T> {
    if (algo.source_hash) {
      if (!(await this.artifacts.ensure(algo.id, 'source', algo.source_hash))) {
        throw new Error(`the source ${algo.source_hash} of algorithm ${algo.id} is neither on this disk nor in the file store`);
      }
      return fn(this.files.sourceDir(algo.id, algo.source_hash));
    }
    const template = await this.files.scratch('template-');
    try {
      await writeTemplate(template, algo.settings.language, algo.name);
      return await fn(template);
    } finally {
      await fs.promises.rm(template, { recursive: true, force: true });
    }
  }

  /**
   * A build, in its span: a child of the request that asked for it (`traceparent`: the compile's
   * or git push's, carried on its principal; docs/traces.md), and the parent of its event's trace.
   */
  private async run(algo: Algorithm, hash: string, sourceDir: string, existing: Build | undefined, traceparent: string | undefined): Promise<Build> {
    const attributes = this.tracing.exporting ? { 'algohost.algorithm': `${algo.owner}/${algo.name}`, 'algohost.build': hash, 'algohost.language': algo.settings.language } : undefined;
    const span = this.tracing.start(`build ${algo.owner}/${algo.name}`, 'internal', parseTraceparent(traceparent), attributes);
    try {
      const build = await this.runBuild(algo, hash, sourceDir, existing, traceparentOf(span));
      span.set('algohost.result', build.status);
      if (build.status !== 'succeeded') span.fail('the build failed');
      return build;
    } catch (err) {
      span.fail(err instanceof Error ? err.message.slice(0, 200) : String(err));
      throw err;
    } finally {
      span.end();
    }
  }

  private async runBuild(algo: Algorithm, hash: string, sourceDir: string, existing: Build | undefined, traceparent: string): Promise<Build> {
    const now = Date.now();
    if (existing) {
      await this.db
        .updateTable('builds')
        .set({ status: 'building', logs: '', runner: null, entry: null, started_at: now, finished_at: null, language: algo.settings.language, holder: this.instance })
        .where('id', '=', existing.id)
        .execute();
    } else {
      await this.db
        .insertInto('builds')
        .values({ algorithm_id: algo.id, hash, status: 'building', language: algo.settings.language, runner: null, entry: null, logs: '', started_at: now, finished_at: null, holder: this.instance })
        .execute();
    }
    const work = await this.files.scratch('build-');
    const out = path.join(work, 'out');
    // The log is written to the build's row as it grows, so GET .../builds/:id/logs (and
    // `algo publish`) can follow a build that is still running. Writes go one after another,
    // and the final record below waits for the last of them.
    let logWrites = Promise.resolve();
    const recordLog = (text: string) => {
      logWrites = logWrites
        .then(() => this.db.updateTable('builds').set({ logs: text }).where('algorithm_id', '=', algo.id).where('hash', '=', hash).where('status', '=', 'building').execute())
        .then(
          () => undefined,
          () => undefined, // a progress write that fails loses nothing: the final log is written below
        );
    };
    let result;
    const readme = await readReadme(sourceDir).catch(() => null);
    try {
      result = await this.builder.build({ owner: algo.owner, name: algo.name, language: algo.settings.language, sourceDir, outDir: out, onLog: recordLog });
      if (result.ok) {
        const target = this.files.buildDir(algo.id, hash);
        await fs.promises.mkdir(path.dirname(target), { recursive: true });
        await fs.promises.rm(target, { recursive: true, force: true });
        await fs.promises.rename(out, target);
        // Stored for other servers before the build is recorded as succeeded.
        await this.artifacts.publish(algo.id, 'build', hash);
      }
    } catch (err) {
      result = { ok: false as const, logs: `build failed: ${(err as Error).message}\n` };
    } finally {
      await fs.promises.rm(work, { recursive: true, force: true });
    }
    await logWrites;
    const finished = Date.now();
    this.metrics.build(result.ok, (finished - now) / 1000);
    // The build's record and its event, together (events/outbox.ts).
    await this.store.write(async (trx) => {
      await trx
        .updateTable('builds')
        .set({
          status: result.ok ? 'succeeded' : 'failed',
          logs: result.logs,
          runner: result.ok ? result.runner : null,
          entry: result.ok ? result.entry : null,
          finished_at: finished,
          holder: null,
          readme,
        })
        .where('algorithm_id', '=', algo.id)
        .where('hash', '=', hash)
        .execute();
      await appendEvent(trx, { ...buildEvent(await ownerId(trx, algo.id), algo, hash, result.ok, algo.settings.language, finished - now, finished), traceparent });
    });
    return (await this.find(algo.id, hash))!;
  }

  private async find(algorithmId: number, hash: string): Promise<Build | undefined> {
    const [row] = await this.byHash([algorithmId, hash]);
    return row ? toBuild(row) : undefined;
  }

  /** A build of an algorithm the principal manages. */
  async get(principal: Principal, owner: string, name: string, hash: string): Promise<Build> {
    const algo = await this.registry.manage(principal, owner, name);
    const build = HASH.test(hash) ? await this.find(algo.id, hash) : undefined;
    if (!build) throw new AppError('build_not_found', `algorithm algo://${algo.owner}/${algo.name} has no build ${hash.slice(0, 60)}`);
    return build;
  }

  /** The README kept with a build (readReadme), or null. */
  async readme(algorithmId: number, hash: string): Promise<string | null> {
    const row = await this.db.selectFrom('builds').select('readme').where('algorithm_id', '=', algorithmId).where('hash', '=', hash).executeTakeFirst();
    return row?.readme ?? null;
  }

  /** A successful build by hash, for calls by build hash and for publishing. */
  async succeeded(algorithmId: number, hash: string): Promise<Build | undefined> {
    const [row] = await this.runnable([algorithmId, hash, 'succeeded']);
    return row ? toBuild(row) : undefined;
  }

  /** What a publish publishes: the build of the last compile, if it succeeded. */
  async current(algo: Algorithm): Promise<Build | undefined> {
    return algo.build_hash ? this.succeeded(algo.id, algo.build_hash) : undefined;
  }

  async list(principal: Principal, owner: string, name: string): Promise<Build[]> {
    const algo = await this.registry.manage(principal, owner, name);
    const rows = await this.db.selectFrom('builds').selectAll().where('algorithm_id', '=', algo.id).orderBy('started_at', 'desc').orderBy('id', 'desc').limit(100).execute();
    return rows.map(toBuild);
  }

  /** Deletes an algorithm with its sources, builds and versions. */
  async remove(principal: Principal, owner: string, name: string): Promise<void> {
    const algo = await this.registry.manage(principal, owner, name);
    await this.lock.run(algo.id, async () => {
      await this.registry.delete(principal, owner, name);
      // Running workers keep their mounts; idle ones are evicted in time.
      await this.files.removeAlgorithm(algo.id);
      await this.artifacts.removeAlgorithm(algo.id);
    });
  }

  /** At start: builds interrupted by a crash are failed, with a word why. */
  async recover(): Promise<void> {
    this.files.recover();
    await this.failInterrupted();
    await this.artifacts.recover();
  }

  /**
   * Fails the builds whose server died while running them (a live server's builds, on a
   * store several servers share, are left to finish).
   */
  async failInterrupted(): Promise<void> {
    const holders = await this.db.selectFrom('builds').select('holder').distinct().where('status', '=', 'building').execute();
    for (const { holder } of holders) {
      if (await this.isLive(holder)) continue;
      // Each failed build tells its owner, in the transaction that fails it.
      await this.store.write(async (trx) => {
        let q = trx
          .selectFrom('builds')
          .innerJoin('algorithms', 'algorithms.id', 'builds.algorithm_id')
          .innerJoin('users', 'users.id', 'algorithms.owner_id')
          .select(['builds.id', 'builds.hash', 'builds.language', 'builds.started_at', 'algorithms.id as algorithm_id', 'algorithms.name', 'algorithms.owner_id', 'users.username'])
          .where('builds.status', '=', 'building');
        q = holder === null ? q.where('builds.holder', 'is', null) : q.where('builds.holder', '=', holder);
        const rows = await q.execute();
        if (rows.length === 0) return;
        const now = Date.now();
        await trx
          .updateTable('builds')
          .set({ status: 'failed', logs: 'build interrupted: the server stopped while building; compile again\n', finished_at: now, holder: null })
          .where('id', 'in', rows.map((r) => r.id))
          .execute();
        await appendEvents(
          trx,
          rows.map((r) => buildEvent(r.owner_id, { owner: r.username, name: r.name }, r.hash, false, r.language, now - r.started_at, now)),
        );
      });
    }
  }
}

/** The id of an algorithm's owner, inside a transaction (whose events are theirs). */
export async function ownerId(trx: Db, algorithmId: number): Promise<number> {
  const row = await trx.selectFrom('algorithms').select('owner_id').where('id', '=', algorithmId).executeTakeFirstOrThrow();
  return row.owner_id;
}

/** `algorithm.build.succeeded` or `.failed`, about `algo://owner/name/<hash>`. */
function buildEvent(userId: number, algo: { owner: string; name: string }, hash: string, ok: boolean, language: string, durationMs: number, time: number): NewEvent {
  return {
    userId,
    type: ok ? 'algorithm.build.succeeded' : 'algorithm.build.failed',
    subject: `algo://${algo.owner}/${algo.name}/${hash}`,
    data: { algorithm: `${algo.owner}/${algo.name}`, build: hash, language, duration_ms: Math.max(0, durationMs) },
    time,
  };
}
