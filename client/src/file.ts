/**
 * A file in hosted data or a connected account: read it (as a stream, bytes, text or JSON),
 * write it, check it, delete it.
 */
import { AlgohostError, type ApiError } from './errors.ts';
import { apiError, type Http, type HttpResponse, type Platform, type RequestOptions } from './transport.ts';
import { asBytes, fileBody, jsonText, type FileData } from './body.ts';
import { dataPath, parseDataUri, splitParent, type DataUri } from './uri.ts';
import type { DataUriResult, DeleteResult } from './types.ts';

export interface ReadOptions extends RequestOptions {
  /** Bytes `start` to `end` (inclusive; to the end of the file without it), as HTTP Range. */
  range?: { start: number; end?: number };
}

export interface WriteOptions extends RequestOptions {
  /**
   * The content's length in bytes, for a stream: sent as Content-Length, so that a server
   * refuses a file over its limit before it is sent. Leave it out to stream chunked.
   */
  size?: number;
}

/** What HEAD tells about a file. */
export interface FileInfo {
  size: number;
  /** Changes with every upload. */
  etag: string | undefined;
  contentType: string | undefined;
  lastModified: Date | undefined;
}

export interface Probe {
  /** What is there: `missing` on a 404 (nothing, or nothing the caller may read). */
  type: 'file' | 'directory' | 'missing';
  res: HttpResponse;
}

/** HEAD: what is at a data URI. Error statuses other than 404 throw. */
export async function probe(http: Http, uri: DataUri, options: RequestOptions): Promise<Probe> {
  const path = dataPath(uri);
  const res = await http.send({ ...options, method: 'HEAD', path });
  res.discard();
  if (res.status === 404) return { type: 'missing', res };
  if (!res.ok) throw await headError(http, path, res, options);
  return { type: res.header('x-data-type') === 'directory' ? 'directory' : 'file', res };
}

/**
 * A HEAD answer has no body, so its error has no code; the same request as a GET tells it
 * (the server answers both alike). Only on the failure path, so it costs nothing otherwise.
 */
export async function headError(http: Http, path: string, head: HttpResponse, options: RequestOptions): Promise<ApiError> {
  const res = await http.send({ ...options, method: 'GET', path });
  if (!res.ok) return apiError(res);
  res.cancel();
  return apiError(head);
}

/**
 * `P` is what bytes and streams are where the client runs: in Node (AlgohostClient) reads
 * give Buffers and Node Readables, in the browser entry (BrowserClient) Uint8Arrays and web
 * ReadableStreams. Each entry's `DataFile` type defaults to its own.
 */
export class DataFile<P extends Platform = Platform> {
  readonly uri: string;
  /** The last segment of the path. */
  readonly name: string;
  private readonly parsed: DataUri;

  constructor(private readonly http: Http<P>, uri: string) {
    this.parsed = parseDataUri(uri);
    this.uri = this.parsed.uri;
    this.name = splitParent(this.parsed)?.name ?? '';
  }

  /** The answer of a GET of the file, its body not read yet (a directory there throws). */
  private async open(options: ReadOptions): Promise<HttpResponse<P>> {
    const headers: Record<string, string> = {};
    if (options.range) headers.range = `bytes=${options.range.start}-${options.range.end ?? ''}`;
    const res = await this.http.ok({ ...options, method: 'GET', path: dataPath(this.parsed), headers });
    if (res.header('x-data-type') === 'directory') {
      res.cancel();
      throw new AlgohostError(`${this.uri} is a directory; use client.dir() for it`, 'type_conflict');
    }
    return res;
  }

  /**
   * The file's bytes as a stream (a Node Readable in Node, a web ReadableStream in a
   * browser), for files of any size. The promise settles once the server has answered (so a
   * missing file rejects here, not in the stream).
   */
  async stream(options: ReadOptions = {}): Promise<P['stream']> {
    return (await this.open(options)).stream();
  }

  /** The whole file in memory: a Buffer in Node, a Uint8Array in a browser. */
  async buffer(options: ReadOptions = {}): Promise<P['bytes']> {
    return (await this.open(options)).bytes();
  }

  /** Same as buffer(). */
  get(options: ReadOptions = {}): Promise<P['bytes']> {
    return this.buffer(options);
  }

  /** The file as UTF-8 text. */
  async text(options: ReadOptions = {}): Promise<string> {
    return (await this.open(options)).text();
  }

  /** The file parsed as JSON. */
  async json<T = unknown>(options: ReadOptions = {}): Promise<T> {
    const text = await this.text(options);
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw new AlgohostError(`${this.uri} is not JSON: ${(err as Error).message}`, 'invalid_json', { cause: err });
    }
  }

  /**
   * Creates or replaces the file. Strings are stored as UTF-8, bytes as they are, streams
   * (Node, web, async iterables, Blobs) as they arrive, never held in memory whole; any other
   * value as its JSON. Resolves with the stored file's full URI (`.my` resolved).
   */
  async put(data: FileData, options: WriteOptions = {}): Promise<string> {
    const { body, contentType } = fileBody(data);
    const headers: Record<string, string> = { 'content-type': contentType };
    if (options.size !== undefined && !asBytes(body)) headers['content-length'] = String(options.size);
    const answer = await this.http.json<DataUriResult>({ ...options, method: 'PUT', path: dataPath(this.parsed), headers, body });
    return answer.result;
  }

  /** Stores `value` as JSON, strings included (put() would store a string as text). */
  async putJson(value: unknown, options: RequestOptions = {}): Promise<string> {
    const answer = await this.http.json<DataUriResult>({
      ...options, method: 'PUT', path: dataPath(this.parsed), headers: { 'content-type': 'application/json' }, body: jsonText(value),
    });
    return answer.result;
  }

  /** Whether a file is there (a directory of that name is not a file). */
  async exists(options: RequestOptions = {}): Promise<boolean> {
    return (await probe(this.http, this.parsed, options)).type === 'file';
  }

  /** Size, ETag, type and modification time, without reading the file. */
  async stat(options: RequestOptions = {}): Promise<FileInfo> {
    const found = await probe(this.http, this.parsed, options);
    if (found.type === 'missing') throw await headError(this.http, dataPath(this.parsed), found.res, options);
    if (found.type === 'directory') throw new AlgohostError(`${this.uri} is a directory, not a file`, 'type_conflict');
    const modified = found.res.header('last-modified');
    return {
      size: Number(found.res.header('content-length') ?? 0),
      etag: found.res.header('etag'),
      contentType: found.res.header('content-type'),
      lastModified: modified ? new Date(modified) : undefined,
    };
  }

  /** Deletes the file; resolves with the number of files deleted (1). */
  async delete(options: RequestOptions = {}): Promise<number> {
    const answer = await this.http.json<DeleteResult>({ ...options, method: 'DELETE', path: dataPath(this.parsed) });
    return answer.result.deleted;
  }
}
