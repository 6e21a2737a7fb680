import { Transform, type Readable } from 'node:stream';
import { AppError, isAppError } from '../../errors.ts';
import type { Principal } from '../../auth/principal.ts';
import type { Connector, FileInfo, ListPage, ReadOptions, ReadResult, WriteOptions } from '../connector.ts';
import { contentTypeFor } from '../contentType.ts';
import { invalidMarker, type MarkerCodec } from '../marker.ts';
import { checkPathLimits, checkSegment } from '../paths.ts';
import { writtenBy, type EventType, type NewEvent } from '../../events/outbox.ts';
import { RemoteError, type DeletedEntry, type RemoteStorage, type WrittenFile } from './remote.ts';

/** The parts of a connected account the connector needs (never its credentials). */
export interface ExternalAccount {
  userId: number;
  label: string;
  protocol: 'objstore' | 'filehost';
  /** `*`, or a prefix ending in `/*` that is all the account exposes. */
  path: string;
  writeable: boolean;
}

export interface ExternalOptions {
  maxUploadBytes: number;
  /** How long a provider may take to answer one request, or stay silent during a transfer. */
  timeoutMs: number;
  /** Entries per listing page (the contract's limit is 1000). */
  pageSize?: number;
  /**
   * Writes events into the outbox, in a transaction of their own: the change they tell of was
   * made in the provider, which shares no transaction with us (docs/events.md). None without it.
   */
  events?: RaiseEvents;
}

/** Appends events to the outbox in one transaction of the metadata store. */
export type RaiseEvents = (events: NewEvent[]) => Promise<void>;

/** Events written per transaction when a recursive delete tells many. */
const EVENT_BATCH = 500;

/** Content types that say nothing: the file's name says more. */
const GENERIC_TYPES = new Set(['application/octet-stream', 'binary/octet-stream', '']);

/** A listing marker of a connected account: the provider's token of a page, and how much of it was served. */
type ExternalMarker = { t?: string; s: number };

/**
 * A connected account (objstore://, filehost://) as a data API connector. The provider does
 * plain storage; this class makes it behave like hosted data: the same listing shape and
 * paging (the provider's continuation token travels inside our signed marker), the same
 * parent checks and errors, the same upload limit. On top it enforces what the account says:
 * its path restriction and whether it may be written. Connectors carry no ACLs.
 */
export class ExternalConnector implements Connector {
  private readonly restriction: string[];
  private readonly pageSize: number;

  constructor(
    /** The connector name the request used (`objstore`, `s3+backup`): URIs are answered in it. */
    private readonly name: string,
    private readonly account: ExternalAccount,
    private readonly storage: RemoteStorage,
    private readonly markers: MarkerCodec,
    private readonly options: ExternalOptions,
  ) {
    this.restriction = account.path === '*' ? [] : account.path.slice(0, -2).split('/');
    this.pageSize = options.pageSize ?? 1000;
  }

  private uri(segments: string[]): string {
    return `${this.name}://${segments.join('/')}`;
  }

  /**
   * The canonical URI of a path, which events carry as their subject: the account's protocol
   * and label, as the data API spells a labelled account (`objstore+backup://bucket/key`), in
   * lower case as it answers them, whichever alias (`s3://`, the default's unlabelled
   * `objstore://`) the request used: the default can move to another account, a label cannot.
   */
  private canonical(segments: string[]): string {
    return `${this.account.protocol}+${this.account.label.toLowerCase()}://${segments.join('/')}`;
  }

  /**
   * Writes the events of a change the provider has made. A failure is answered (503), saying
   * the change itself was made: the caller must not take it for one that was not.
   */
  private async raise(principal: Principal, what: string, events: { type: EventType; path: string[]; data: Record<string, unknown> }[]): Promise<void> {
    const sink = this.options.events;
    if (!sink || events.length === 0) return;
    const now = Date.now();
    try {
      for (let i = 0; i < events.length; i += EVENT_BATCH) {
        await sink(events.slice(i, i + EVENT_BATCH).map((e) => ({ userId: this.account.userId, type: e.type, subject: this.canonical(e.path), data: e.data, time: now, traceparent: principal.traceparent })));
      }
    } catch (err) {
      throw new AppError('storage_unavailable', `${what} in ${this.describe()}, but its event could not be recorded (the server's database failed); no event tells of it`, undefined, err);
    }
  }

  private describe(): string {
    return `the ${this.account.protocol} account "${this.account.label}"`;
  }

  /** Reads may reach the restriction's own directory and what is under it; changes only what is under it. */
  private checkReach(segments: string[], change: boolean): void {
    const r = this.restriction;
    const inside = segments.length >= r.length && r.every((s, i) => segments[i] === s);
    if (!inside || (change && segments.length === r.length && r.length > 0)) {
      throw new AppError('forbidden', `${this.describe()} exposes only ${this.account.path}; ${this.uri(segments)} is outside it`);
    }
  }

  private checkWriteable(segments: string[], strict = true): void {
    this.checkReach(segments, strict);
    if (!this.account.writeable) {
      throw new AppError(
        'write_denied',
        `${this.describe()} is read-only; to change files through it, mark it writeable (PATCH /v1/users/<you>/connectors/${this.account.label} with {"writeable": true})`,
      );
    }
  }

  /** Runs one provider request under the connector's deadline, translating its failures. */
  private async remote<T>(segments: string[], op: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const signal = AbortSignal.timeout(this.options.timeoutMs);
    try {
      return await op(signal);
    } catch (err) {
      throw this.translate(err, segments);
    }
  }

  private translate(err: unknown, segments: string[]): AppError {
    if (isAppError(err)) return err;
    const who = this.describe();
    if (!(err instanceof RemoteError)) {
      return new AppError('connector_error', `${who} failed unexpectedly while handling ${this.uri(segments)}`, undefined, err);
    }
    switch (err.kind) {
      case 'not_found':
        return new AppError('not_found', `${this.uri(segments)} does not exist`);
      case 'denied':
        return new AppError('connector_denied', `${who} was refused by its provider (${err.message}); check the account's credentials and permissions`, undefined, err);
      case 'address_refused':
        // Never a socket's error text: the connection was not made.
        return new AppError('connector_address_refused', `${who} was ${err.message}`, undefined, err);
      case 'conflict':
        return new AppError('type_conflict', `${this.uri(segments)}: ${err.message}`);
      case 'invalid':
        return new AppError('invalid_path', `${this.uri(segments)}: ${err.message}`);
      case 'too_large':
        return new AppError('payload_too_large', `${who} refused the size: ${err.message}`);
      case 'unreachable':
        return new AppError('connector_unreachable', `${who} could not be reached: ${err.message}`, undefined, err);
      case 'timeout':
        return new AppError('connector_timeout', `${who} did not answer within ${Math.round(this.options.timeoutMs / 1000)} s: ${err.message}`, undefined, err);
      case 'bad_answer':
        return new AppError('connector_error', `${who} answered unexpectedly: ${err.message}`, undefined, err);
    }
  }

  private async stat(segments: string[]) {
    return this.remote(segments, (signal) => this.storage.stat(segments, signal));
  }

  /** Checks that files may be made in directory `segments`. */
  private async requireDir(segments: string[]): Promise<void> {
    if (segments.length === 0) return;
    const found = await this.stat(segments);
    const implicit = this.storage.implicitDirectoriesFrom !== undefined && segments.length >= this.storage.implicitDirectoriesFrom;
    if (!found && !implicit) throw new AppError('not_found', `${this.uri(segments)} does not exist`);
    if (found?.kind === 'file') throw new AppError('type_conflict', `${this.uri(segments)} is a file, not a directory`);
  }

  async read(_principal: Principal, segments: string[], options: ReadOptions): Promise<ReadResult> {
    this.checkReach(segments, false);
    const found = await this.stat(segments);
    if (!found) throw new AppError('not_found', `${this.uri(segments)} does not exist`);
    if (found.kind === 'dir') return { info: { kind: 'dir' } };
    const info: FileInfo = {
      kind: 'file',
      size: found.size,
      etag: httpEtag(found.etag),
      modified: found.modified,
      contentType: found.contentType && !GENERIC_TYPES.has(found.contentType) ? found.contentType : contentTypeFor(segments[segments.length - 1]!),
    };
    if (options.skipBody?.(info)) return { info, range: undefined, body: undefined };
    const range = options.pickRange?.(info);
    if (info.size === 0 && !range) return { info, range, body: Buffer.alloc(0) };
    // The deadline covers opening the file, not streaming it: a large file takes its time.
    const opened = new AbortController();
    const timer = setTimeout(() => opened.abort(new DOMException('the provider did not start sending in time', 'TimeoutError')), this.options.timeoutMs);
    try {
      const body = await this.storage.read(segments, range, opened.signal);
      return { info, range, body };
    } catch (err) {
      throw this.translate(err, segments);
    } finally {
      clearTimeout(timer);
    }
  }

  async list(_principal: Principal, segments: string[], options: { marker?: string; acl: boolean }): Promise<ListPage> {
    if (options.acl) throw aclNotSupported();
    this.checkReach(segments, false);
    const scope = `external:${this.account.userId}:${this.account.label.toLowerCase()}:${segments.join('/')}`;
    const state = options.marker ? decodeMarker(this.markers.decodeValue(scope, options.marker)) : { s: 0 };
    let token = state.t;
    let skip = state.s;
    let page = await this.remote(segments, (signal) => this.storage.list(segments, token, this.pageSize, signal));
    // A provider may answer an empty page that still has more after it (Dropbox can); a
    // marker may also point past the end of a page that shrank since. Move on, boundedly.
    for (let hops = 0; skip >= page.folders.length + page.files.length && page.next !== undefined && hops < 16; hops++) {
      token = page.next;
      skip = 0;
      page = await this.remote(segments, (signal) => this.storage.list(segments, token, this.pageSize, signal));
    }
    const out: ListPage = {};
    const fileCount = page.files.length;
    const total = fileCount + page.folders.length;
    // File entries and folder entries are never served in the same page, as with hosted data
    // (the npm client miscounts mixed pages), and files come first (the Python CLI looks for a
    // file in the first page of its directory), so a provider page may be served in parts.
    let end: number;
    if (skip < fileCount) {
      end = Math.min(fileCount, skip + this.pageSize);
      out.files = page.files.slice(skip, end).map((f) => ({ filename: f.name, last_modified: new Date(f.modified).toISOString(), size: f.size }));
    } else {
      end = Math.min(total, skip + this.pageSize);
      const folders = page.folders.slice(skip - fileCount, end - fileCount);
      if (folders.length > 0) out.folders = folders.map((name) => ({ name }));
    }
    let next: ExternalMarker | undefined;
    if (end < total) next = token === undefined ? { s: end } : { t: token, s: end };
    else if (page.next !== undefined) next = { t: page.next, s: 0 };
    if (next) out.marker = this.markers.encodeValue(scope, next);
    return out;
  }

  async write(principal: Principal, segments: string[], body: Readable, _options: WriteOptions): Promise<string> {
    if (segments.length === 0) throw new AppError('invalid_path', `name a file to write, e.g. ${this.name}://<folder>/<file>`);
    this.checkWriteable(segments);
    await this.requireDir(segments.slice(0, -1));
    const existing = await this.stat(segments);
    if (existing?.kind === 'dir') throw new AppError('type_conflict', `${this.uri(segments)} is a directory; a file cannot replace it`);

    // The deadline restarts with every chunk that moves: an upload may take long, but a
    // provider (or client) that stops moving bytes for the whole timeout is given up on.
    const deadline = new AbortController();
    const timeout = () => deadline.abort(new DOMException('no bytes moved in time', 'TimeoutError'));
    const timer = setTimeout(timeout, this.options.timeoutMs);
    let tooLarge = false;
    let written = 0;
    const limit = this.options.maxUploadBytes;
    const counted = new Transform({
      transform(chunk: Buffer, _enc, done) {
        timer.refresh();
        written += chunk.length;
        if (written > limit) {
          tooLarge = true;
          done(new AppError('payload_too_large', `the file is larger than the limit of ${limit} bytes`));
          return;
        }
        done(null, chunk);
      },
      flush(done) {
        timer.refresh();
        done();
      },
    });
    body.on('error', (err) => counted.destroy(err));
    body.pipe(counted);
    let answer: WrittenFile;
    try {
      answer = await this.storage.write(segments, counted, deadline.signal);
    } catch (err) {
      if (tooLarge) throw new AppError('payload_too_large', `the file is larger than the limit of ${limit} bytes`);
      throw this.translate(err, segments);
    } finally {
      clearTimeout(timer);
      body.unpipe(counted);
      if (!counted.destroyed) counted.destroy();
    }
    // Created or updated as the stat above saw it: that costs nothing more (it is needed to
    // refuse replacing a directory), but a file made by someone else in between is "created".
    await this.raise(principal, `${this.uri(segments)} was written`, [
      {
        type: existing ? 'data.file.updated' : 'data.file.created',
        path: segments,
        data: {
          size: answer.size ?? written,
          content_type: contentTypeFor(segments[segments.length - 1]!),
          ...(answer.etag ? { etag: httpEtag(answer.etag) } : {}),
          ...writtenBy(principal),
        },
      },
    ]);
    return this.uri(segments);
  }

  async mkdir(principal: Principal, parent: string[], name: string, acl: unknown): Promise<string> {
    if (acl !== undefined && acl !== null) throw aclNotSupported();
    const target = [...parent, checkSegment(name)];
    checkPathLimits(target);
    // Creating the restriction's own folder is allowed: it only makes what the account exposes.
    this.checkWriteable(target, false);
    await this.requireDir(parent);
    const existing = await this.stat(target);
    if (existing) throw new AppError('already_exists', `${this.uri(target)} already exists`);
    await this.remote(target, (signal) => this.storage.mkdir(target, signal));
    await this.raise(principal, `${this.uri(target)} was made`, [{ type: 'data.directory.created', path: target, data: { ...writtenBy(principal) } }]);
    return this.uri(target);
  }

  async update(_principal: Principal, _segments: string[], _changes: { acl?: unknown }): Promise<string> {
    throw aclNotSupported();
  }

  async delete(principal: Principal, segments: string[], force: boolean): Promise<number> {
    if (segments.length === 0) throw new AppError('invalid_path', `the root of ${this.describe()} cannot be deleted; name a folder or a file`);
    this.checkWriteable(segments);
    const found = await this.stat(segments);
    if (!found) throw new AppError('not_found', `${this.uri(segments)} does not exist`);
    if (found.kind === 'file') {
      await this.remote(segments, (signal) => this.storage.deleteFile(segments, signal));
      await this.raise(principal, `${this.uri(segments)} was deleted`, [
        { type: 'data.file.deleted', path: segments, data: { size: found.size, etag: httpEtag(found.etag), ...writtenBy(principal) } },
      ]);
      return 1;
    }
    if (!force) {
      const first = await this.remote(segments, (signal) => this.storage.list(segments, undefined, 1, signal));
      // A page may come back empty with more after it (an S3 directory's own marker object
      // takes the one slot asked for, and is not listed): more after it is not empty either.
      if (first.folders.length + first.files.length > 0 || first.next !== undefined) {
        throw new AppError('directory_not_empty', `${this.uri(segments)} is not empty; delete with force=true to delete it and everything in it`);
      }
    }
    // One event per file and directory that went, as the provider tells them (files first,
    // batch by batch as it deletes them, then the directories, deepest first), as hosted data.
    const by = writtenBy(principal);
    const told = (entries: DeletedEntry[]) =>
      this.raise(
        principal,
        `part of ${this.uri(segments)} was deleted`,
        entries.map((e) =>
          e.kind === 'file'
            ? { type: 'data.file.deleted' as const, path: e.path, data: { size: e.size, ...(e.etag ? { etag: httpEtag(e.etag) } : {}), ...by } }
            : { type: 'data.directory.deleted' as const, path: e.path, data: { ...by } },
        ),
      );
    return this.remote(segments, (signal) => this.storage.deleteDir(segments, signal, this.options.events ? told : undefined));
  }
}

/** An ETag as HTTP sends it: quoted (or weak), whichever way the provider spells it. */
function httpEtag(etag: string): string {
  return /^(W\/)?"/.test(etag) ? etag : `"${etag.replace(/"/g, '')}"`;
}

function aclNotSupported(): AppError {
  return new AppError('acl_not_supported', 'connected accounts have no ACLs: what they expose is set by the account\'s path and writeable settings');
}

function decodeMarker(value: unknown): ExternalMarker {
  const v = value as { t?: unknown; s?: unknown } | null;
  if (typeof v !== 'object' || v === null || !Number.isSafeInteger(v.s) || (v.s as number) < 0 || (v.t !== undefined && typeof v.t !== 'string')) {
    throw invalidMarker();
  }
  return v.t === undefined ? { s: v.s as number } : { t: v.t as string, s: v.s as number };
}
