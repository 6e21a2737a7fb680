import type { Readable } from 'node:stream';
import type { Principal } from '../auth/principal.ts';
import type { ByteRange } from './blobStore.ts';
import type { ListingPage } from '../../client/src/types.ts';
import type { Db } from '../store/db.ts';

export interface FileInfo {
  kind: 'file';
  size: number;
  etag: string;
  modified: number;
  contentType: string;
}

export interface DirInfo {
  kind: 'dir';
}

export type EntryInfo = FileInfo | DirInfo;

/** A page of a directory listing, in the contract's shape (spec 2.4): empty arrays left out. */
export type ListPage = ListingPage;

export interface ReadOptions {
  /** Chooses a byte range once the file's size is known (throws to refuse the request). */
  pickRange?: (info: FileInfo) => ByteRange | undefined;
  /** True when no body is needed (HEAD, or If-None-Match matched): nothing is opened. */
  skipBody?: (info: FileInfo) => boolean;
}

export interface FileRead {
  info: FileInfo;
  range: ByteRange | undefined;
  /** The bytes: small ones whole, larger ones streamed; undefined when skipped. */
  body: Readable | Buffer | undefined;
}

/** What `read` finds: a file (opened unless skipped) or a directory (to be listed). */
export type ReadResult = FileRead | { info: DirInfo };

export interface WriteOptions {
  signal?: AbortSignal;
  /** The body's length when the request declared it (Content-Length): a quota refuses it before a byte is stored. */
  size?: number;
  /**
   * Written in the transaction that makes the file what the body says, where the connector has
   * one (hosted data; a connected account's provider shares none): what must stand with the
   * file or not at all (an `Idempotency-Key`'s answer, http/idempotency.ts). Its throw undoes
   * the write. Called with the file's Data URI.
   */
  along?: (trx: Db, uri: string) => Promise<void>;
}

/**
 * One source of files and directories: hosted data, or a connected external account. Paths
 * are already-validated segments; every method acts as `principal` and enforces what the
 * source itself knows (ownership, ACLs, an account's path restriction). Key permissions are
 * checked before a connector is reached. Errors are AppErrors with the contract's codes.
 */
export interface Connector {
  list(principal: Principal, segments: string[], options: { marker?: string; acl: boolean }): Promise<ListPage>;
  /** Looks a path up; opens it when it is a file whose body is wanted. */
  read(principal: Principal, segments: string[], options: ReadOptions): Promise<ReadResult>;
  /** Creates or replaces a file; answers its Data URI. */
  write(principal: Principal, segments: string[], body: Readable, options: WriteOptions): Promise<string>;
  /** Creates directory `name` inside `parent`; answers its Data URI. */
  mkdir(principal: Principal, parent: string[], name: string, acl: unknown): Promise<string>;
  /** Changes a directory's settings (its ACL); answers its Data URI. */
  update(principal: Principal, segments: string[], changes: { acl?: unknown }): Promise<string>;
  /** Deletes a file or directory; answers how many files were deleted. */
  delete(principal: Principal, segments: string[], force: boolean): Promise<number>;
}
