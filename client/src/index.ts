/**
 * @algohost/client: a typed, promise-based client for algohost and the algorithm-execution
 * and data API it serves (also usable against the original service's address).
 *
 *   const client = new AlgohostClient();                 // ALGOHOST_API(_KEY), ALGORITHMIA_API(_KEY)
 *   const { result } = await client.algo('demo/Hello/0.1.*').pipe('you');
 *   await client.file('data://.my/notes/today.txt').put('hi');
 *   for await (const e of client.dir('data://.my/notes').list()) console.log(e.type, e.name);
 */
import type http from 'node:http';
import { Algo } from './algo.ts';
import { DataDir } from './dir.ts';
import { DataFile } from './file.ts';
import { Transport, type RequestOptions } from './http.ts';
import { Connectors, Keys, listAlgorithms, searchAlgorithms } from './management.ts';
import { fromEnv, processEnv, type Env } from './env.ts';
import type { Algorithm } from './types.ts';

/** The server's default address (docs/configuration.md: 127.0.0.1, port 8080). */
export const DEFAULT_BASE_URL = 'http://127.0.0.1:8080';
/** This package's version, sent in the User-Agent. */
export const VERSION = '0.1.0';

export interface ClientOptions {
  /** API key (`sim...`). Default: ALGOHOST_API_KEY, then ALGORITHMIA_API_KEY. */
  apiKey?: string;
  /** Server address, without `/v1`. Default: ALGOHOST_API, then ALGORITHMIA_API, then DEFAULT_BASE_URL. */
  baseUrl?: string;
  /** Where the defaults above are read; `process.env` unless given (tests pass their own). */
  env?: Env;
  /** Default for every request's `timeoutMs` (none: algorithm calls may run 50 minutes). */
  timeoutMs?: number;
  /** An http(s).Agent of your own (proxies, connection limits); Node's global agent otherwise. */
  agent?: http.Agent;
}

export class AlgohostClient {
  private readonly http: Transport;
  /** Whether a key was given or found in the environment (without one, requests answer 401). */
  readonly hasApiKey: boolean;

  constructor(options: ClientOptions = {}) {
    const env = fromEnv(options.env ?? processEnv());
    const apiKey = options.apiKey ?? env.apiKey;
    this.hasApiKey = apiKey !== undefined;
    this.http = new Transport({
      baseUrl: options.baseUrl ?? env.baseUrl ?? DEFAULT_BASE_URL,
      apiKey,
      timeoutMs: options.timeoutMs,
      agent: options.agent,
      userAgent: `algohost-client/${VERSION} node/${process.versions.node}`,
    });
  }

  /** The server address in use, without a trailing slash. */
  get baseUrl(): string {
    return this.http.baseUrl;
  }

  /** An algorithm, `owner/name[/version]` (`algo://` optional): call it, or manage it. */
  algo(ref: string): Algo {
    return new Algo(this.http, ref);
  }

  /** A file: `data://.my/c/f.txt`, `objstore+label://bucket/key`, ... (no scheme: data://). */
  file(uri: string): DataFile {
    return new DataFile(this.http, uri);
  }

  /** A directory: `data://.my/c`, `data://.my` (your collections), `filehost://dir`, ... */
  dir(uri: string): DataDir {
    return new DataDir(this.http, uri);
  }

  /** An owner's algorithms, page after page (others see only the public ones). */
  algorithms(owner: string, options: RequestOptions = {}): AsyncGenerator<Algorithm, void, undefined> {
    return listAlgorithms(this.http, owner, options);
  }

  /** The public catalogue, filtered by `q` (name or description, any case). */
  searchAlgorithms(q = '', options: RequestOptions = {}): AsyncGenerator<Algorithm, void, undefined> {
    return searchAlgorithms(this.http, q, options);
  }

  /** A user's API keys (your own user only). */
  keys(username: string): Keys {
    return new Keys(this.http, username);
  }

  /** A user's connected accounts (your own user only). */
  connectors(username: string): Connectors {
    return new Connectors(this.http, username);
  }

  /** `GET /health`: whether the server is up, and whether it sandboxes algorithms. */
  /** The user the key belongs to, the key's id and its permissions. */
  whoami(options: RequestOptions = {}): Promise<{ username: string; key_id: string; permissions: Record<string, unknown> }> {
    return this.http.json({ ...options, method: 'GET', path: '/v1/user' });
  }

  health(options: RequestOptions = {}): Promise<{ status: string; sandbox: { enabled: boolean; warning?: string } }> {
    return this.http.json({ ...options, method: 'GET', path: '/health' });
  }
}

/** Same as `new AlgohostClient(options)`. */
export function createClient(options: ClientOptions = {}): AlgohostClient {
  return new AlgohostClient(options);
}

export { Algo, DataDir, DataFile, Keys, Connectors };
export { ACLS, aclLevel } from './dir.ts';
export { packDirectory } from './pack.ts';
export { AlgohostError, ApiError, AlgorithmError, NetworkError, API_ERROR_CODES } from './errors.ts';
export { parseDataUri, parseAlgoRef } from './uri.ts';
export type { AlgoInput, AlgoResponse, AsyncCallResponse, CallMetadata, ContentType, PipeOptions, RawResponse } from './algo.ts';
export type { AclLevel, DataAcl, DataEntry, DirEntry, FileEntry, ListingPage } from './dir.ts';
export type { FileInfo, ReadOptions, WriteOptions } from './file.ts';
export type { ByteStream, FileData } from './body.ts';
export type { RequestOptions } from './http.ts';
export type { Env } from './env.ts';
export type { PackOptions } from './pack.ts';
export type { AlgorithmErrorType, ApiErrorCode, FailureMetadata } from './errors.ts';
export type { DataUri, AlgoRef } from './uri.ts';
export type * from './types.ts';
