/**
 * A directory in hosted data or a connected account: create it, list it page after page,
 * delete it, read and set its ACL.
 */
import { AlgohostError } from './errors.ts';
import { jsonBody, type Http, type Platform, type RequestOptions } from './transport.ts';
import { DataFile, probe } from './file.ts';
import { childUri, dataPath, parseDataUri, splitParent, type DataUri } from './uri.ts';
import type { DataAcl, DataUriResult, DeleteResult, DirectoryChanges, ListingPage, NewDirectory } from './types.ts';

export type { DataAcl, ListingPage };

/** The three levels the clients name (spec 2.5). */
export type AclLevel = 'public' | 'private' | 'my_algorithms';

export const ACLS: Readonly<Record<AclLevel, DataAcl>> = Object.freeze({
  public: { read: ['user://*'] },
  private: { read: [] },
  /** The default of a new collection: readable by its owner's algorithms, whoever calls them. */
  my_algorithms: { read: ['algo://.my/*'] },
});

/** The level an ACL stands for, undefined for any other ACL. */
export function aclLevel(acl: DataAcl): AclLevel | undefined {
  const key = JSON.stringify(acl.read);
  return (Object.keys(ACLS) as AclLevel[]).find((level) => JSON.stringify(ACLS[level].read) === key);
}

const toAcl = (acl: AclLevel | DataAcl): DataAcl => (typeof acl === 'string' ? ACLS[acl] : acl);

export interface DirEntry {
  type: 'dir';
  name: string;
  uri: string;
}

export interface FileEntry {
  type: 'file';
  name: string;
  uri: string;
  size: number;
  lastModified: Date;
}

export type DataEntry = FileEntry | DirEntry;

/** `P`: what bytes and streams are where the client runs (see DataFile). */
export class DataDir<P extends Platform = Platform> {
  readonly uri: string;
  /** The last segment of the path ('' at a source's root). */
  readonly name: string;
  private readonly parsed: DataUri;

  constructor(private readonly http: Http<P>, uri: string) {
    this.parsed = parseDataUri(uri);
    this.uri = this.parsed.uri;
    this.name = splitParent(this.parsed)?.name ?? '';
  }

  /** A file inside this directory. */
  file(name: string): DataFile<P> {
    return new DataFile(this.http, childUri(this.parsed, name));
  }

  /** A directory inside this one. */
  dir(name: string): DataDir<P> {
    return new DataDir(this.http, childUri(this.parsed, name));
  }

  /**
   * Creates this directory in its parent, which must exist. `acl` applies to collections
   * (directories right under a user); the server's default is `my_algorithms`. Resolves with
   * the directory's full URI (`.my` resolved).
   */
  async create(options: RequestOptions & { acl?: AclLevel | DataAcl } = {}): Promise<string> {
    const split = splitParent(this.parsed);
    if (!split) throw new AlgohostError(`${this.uri} is the root of its source; create directories inside it`, 'invalid_path');
    const body = jsonBody<NewDirectory>(options.acl === undefined ? { name: split.name } : { name: split.name, acl: toAcl(options.acl) });
    const answer = await this.http.json<DataUriResult>({ ...options, method: 'POST', path: dataPath(parseDataUri(split.parent)), ...body });
    return answer.result;
  }

  /** Whether a directory is there (a file of that name is not a directory). */
  async exists(options: RequestOptions = {}): Promise<boolean> {
    return (await probe(this.http, this.parsed, options)).type === 'directory';
  }

  /** One page of the listing: the first, or the one after `marker`. */
  async page(marker?: string, options: RequestOptions & { acl?: boolean } = {}): Promise<ListingPage> {
    const path = dataPath(this.parsed);
    const res = await this.http.ok({ ...options, method: 'GET', path, query: { marker, acl: options.acl ? 'true' : undefined } });
    if (res.header('x-data-type') === 'file') {
      res.cancel();
      throw new AlgohostError(`${this.uri} is a file, not a directory`, 'type_conflict');
    }
    return res.json<ListingPage>();
  }

  /** Every entry, following the server's marker through every page. */
  async *list(options: RequestOptions = {}): AsyncGenerator<DataEntry, void, undefined> {
    let marker: string | undefined;
    do {
      const page = await this.page(marker, options);
      for (const f of page.folders ?? []) yield { type: 'dir', name: f.name, uri: childUri(this.parsed, f.name) };
      for (const f of page.files ?? []) {
        yield { type: 'file', name: f.filename, uri: childUri(this.parsed, f.filename), size: f.size, lastModified: new Date(f.last_modified) };
      }
      marker = page.marker;
    } while (marker);
  }

  /** Every file in this directory (not in its subdirectories). */
  async *files(options: RequestOptions = {}): AsyncGenerator<FileEntry, void, undefined> {
    for await (const e of this.list(options)) if (e.type === 'file') yield e;
  }

  /** Every subdirectory. */
  async *dirs(options: RequestOptions = {}): AsyncGenerator<DirEntry, void, undefined> {
    for await (const e of this.list(options)) if (e.type === 'dir') yield e;
  }

  /**
   * Deletes the directory: an empty one, or with `force` everything in it. Resolves with the
   * number of files deleted; a part-way failure throws an ApiError whose `deleted` says how many.
   */
  async delete(options: RequestOptions & { force?: boolean } = {}): Promise<number> {
    const query = { force: options.force ? 'true' : undefined };
    const answer = await this.http.json<DeleteResult>({ ...options, method: 'DELETE', path: dataPath(this.parsed), query });
    return answer.result.deleted;
  }

  /** The collection's read ACL. */
  async getAcl(options: RequestOptions = {}): Promise<DataAcl> {
    const page = await this.page(undefined, { ...options, acl: true });
    if (!page.acl) throw new AlgohostError(`the server sent no ACL for ${this.uri}`, 'invalid_response');
    return page.acl;
  }

  /** Changes the collection's read ACL (collections only; one of the three levels). */
  async setAcl(acl: AclLevel | DataAcl, options: RequestOptions = {}): Promise<void> {
    await this.http.json({ ...options, method: 'PATCH', path: dataPath(this.parsed), ...jsonBody<DirectoryChanges>({ acl: toAcl(acl) }) });
  }
}
