/**
 * An algorithm: call it (spec 4.1), and, as its owner, create, upload, compile and publish it
 * (docs/algorithms.md). One handle for both, as in the original clients:
 * `client.algo('alice/Greeter').compile()`, `client.algo('alice/Greeter/1.2.*').pipe('you')`.
 */
import { AlgohostError, AlgorithmError, type AlgorithmErrorType, type FailureMetadata } from './errors.ts';
import { apiError, jsonBody, utf8, type Http, type RequestOptions } from './transport.ts';
import { asBytes, asStream, jsonText, type ByteStream } from './body.ts';
import { paged } from './management.ts';
import { encodePath, parseAlgoRef } from './uri.ts';
import type {
  VersionReadme,
  Algorithm, AlgorithmChanges, AlgorithmVersion, AsyncCallAccepted, Build, BuildLogs, CallError, CallMetadata, CompileResult,
  ContentType, Page, PublishRequest, SourceInfo, SourceUpload, VersionType,
} from './types.ts';

export type { CallMetadata, ContentType };

/** Text, bytes, or any value sent as JSON. */
export type AlgoInput = string | Uint8Array | ArrayBuffer | object | number | boolean | null;

export interface PipeOptions extends RequestOptions {
  /** Seconds the algorithm may run (the server's default 300, at most 3000). */
  timeout?: number;
  /** Return the algorithm's standard output in `metadata.stdout` (its owner only). */
  stdout?: boolean;
  /** `raw`: the result itself, not the envelope. `void`: answer at once, the call runs on. */
  output?: 'raw' | 'void';
}

export interface AlgoResponse<T = unknown> {
  /** A string (text), bytes (binary: a Buffer in Node, a Uint8Array in a browser), null (void) or the JSON value. */
  result: T;
  metadata: CallMetadata;
}

/** `output: 'raw'`: the result as the server sent it, typed by its Content-Type. */
export interface RawResponse<T = unknown> {
  result: T;
  metadata: { content_type: Exclude<ContentType, 'void'> };
}

/** `output: 'void'`: the call was accepted and runs on; nobody gets its result. */
export interface AsyncCallResponse {
  async: true;
  requestId: string;
}

/**
 * What a call answers (CallSuccess, CallFailure or AsyncCallAccepted), read defensively: a
 * server of this API other than ours may leave fields out.
 */
type Envelope = { result?: unknown; error?: Partial<CallError>; metadata?: Partial<CallMetadata> } & Partial<AsyncCallAccepted>;

function inputBody(input: AlgoInput): { body: Uint8Array; type: string } {
  if (typeof input === 'string') return { body: utf8(input), type: 'text/plain; charset=utf-8' };
  const b = asBytes(input);
  if (b) return { body: b, type: 'application/octet-stream' };
  return { body: jsonText(input), type: 'application/json' };
}

/** The envelope's result (binary decoded by `http`), or its error thrown as an AlgorithmError. */
function unwrap(http: Http, e: Envelope): AlgoResponse {
  if (e.error) {
    const { duration, stdout, stdout_truncated } = e.metadata ?? {};
    const metadata: FailureMetadata = { duration, ...(stdout === undefined ? {} : { stdout }), ...(stdout_truncated ? { stdout_truncated } : {}) };
    const type: AlgorithmErrorType = e.error.error_type ?? 'AlgorithmError';
    throw new AlgorithmError(e.error.message ?? 'the algorithm failed', type, e.error.stacktrace ?? e.error.stack_trace, metadata);
  }
  const metadata = e.metadata as CallMetadata | undefined;
  if (!metadata?.content_type) throw new AlgohostError('the call answer has neither a result with metadata nor an error', 'invalid_response');
  const result = metadata.content_type === 'binary' ? http.transport.bytesFromBase64(String(e.result)) : (e.result ?? null);
  return { result, metadata };
}

export class Algo {
  readonly owner: string;
  readonly name: string;
  /** The version selector the handle was made with, if any. */
  readonly version: string | undefined;

  constructor(private readonly http: Http, ref: string) {
    ({ owner: this.owner, name: this.name, version: this.version } = parseAlgoRef(ref));
  }

  /** `algo://owner/name[/version]`. */
  get uri(): string {
    return `algo://${this.owner}/${this.name}${this.version ? `/${this.version}` : ''}`;
  }

  private get base(): string {
    return `/v1/algorithms/${encodePath(`${this.owner}/${this.name}`)}`;
  }

  /**
   * Calls the algorithm. A string goes as text, bytes (Buffer, Uint8Array) as binary, any
   * other value as JSON. Resolves `{result, metadata}` (binary results as Buffers in Node,
   * Uint8Arrays in a browser); rejects with an AlgorithmError when the algorithm fails, an
   * ApiError when the server refuses.
   */
  pipe<T = unknown>(input: AlgoInput, options?: PipeOptions & { output?: undefined }): Promise<AlgoResponse<T>>;
  pipe<T = unknown>(input: AlgoInput, options: PipeOptions & { output: 'raw' }): Promise<RawResponse<T>>;
  pipe(input: AlgoInput, options: PipeOptions & { output: 'void' }): Promise<AsyncCallResponse>;
  /** With `output` known only at run time (a CLI flag): any of the three answers. */
  pipe(input: AlgoInput, options: PipeOptions): Promise<AlgoResponse | RawResponse | AsyncCallResponse>;
  pipe(input: AlgoInput, options: PipeOptions = {}): Promise<AlgoResponse | RawResponse | AsyncCallResponse> {
    const { body, type } = inputBody(input);
    return this.call(body, type, options);
  }

  /** Calls with `json`, a JSON text, as the input (a string given to pipe() would go as text). */
  pipeJson<T = unknown>(json: string, options: PipeOptions & { output?: undefined } = {}): Promise<AlgoResponse<T>> {
    return this.call(utf8(json), 'application/json', options) as Promise<AlgoResponse<T>>;
  }

  private async call(body: Uint8Array, type: string, options: PipeOptions): Promise<AlgoResponse | RawResponse | AsyncCallResponse> {
    const path = `/v1/algo/${encodePath(`${this.owner}/${this.name}${this.version ? `/${this.version}` : ''}`)}`;
    const query = { timeout: options.timeout, stdout: options.stdout ? 'true' : undefined, output: options.output };
    const res = await this.http.send({ ...options, method: 'POST', path, query, headers: { 'content-type': type }, body });
    const resType = (res.header('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
    if (options.output === 'raw' && res.ok) {
      if (resType === 'application/json') return { result: await res.json(), metadata: { content_type: 'json' } };
      if (resType.startsWith('text/')) return { result: await res.text(), metadata: { content_type: 'text' } };
      return { result: await res.bytes(), metadata: { content_type: 'binary' } };
    }
    // A raw call's failure is a 400 whose body is the algorithm's message, as text.
    if (options.output === 'raw' && res.status === 400 && resType.startsWith('text/')) throw new AlgorithmError(await res.text(), 'AlgorithmError');
    if (!res.ok) throw await apiError(res);
    const envelope = await res.json<Envelope>();
    if (envelope.async === true && typeof envelope.request_id === 'string') return { async: true, requestId: envelope.request_id };
    return unwrap(this.http, envelope);
  }

  // ---- Management (the owner, with a key that has allow_algo_management) ----

  /** Creates the algorithm (its language's template until a source is uploaded). */
  create(spec: AlgorithmChanges = {}, options: RequestOptions = {}): Promise<Algorithm> {
    const path = `/v1/algorithms/${encodeURIComponent(this.owner)}`;
    return this.http.json({ ...options, method: 'POST', path, ...jsonBody({ name: this.name, ...spec }) });
  }

  /** The algorithm's record. */
  info(options: RequestOptions = {}): Promise<Algorithm> {
    return this.http.json({ ...options, method: 'GET', path: this.base });
  }

  /** Changes details or settings; what is not sent keeps its value. */
  update(changes: AlgorithmChanges, options: RequestOptions = {}): Promise<Algorithm> {
    return this.http.json({ ...options, method: 'PUT', path: this.base, ...jsonBody(changes) });
  }

  /** Deletes the algorithm with its sources, builds and versions. */
  async delete(options: RequestOptions = {}): Promise<void> {
    await this.http.json({ ...options, method: 'DELETE', path: this.base });
  }

  /**
   * Replaces the source with a tar.gz archive (bytes or a stream; `packDirectory()` makes
   * one from a directory). `size` sends a stream's length up front.
   */
  async uploadSource(archive: Uint8Array | ArrayBuffer | ByteStream, options: RequestOptions & { size?: number } = {}): Promise<SourceInfo> {
    const body = asBytes(archive) ?? asStream(archive);
    if (!body) throw new TypeError('the source must be a tar.gz archive: bytes or a stream');
    const headers: Record<string, string> = { 'content-type': 'application/gzip' };
    if (options.size !== undefined && !(body instanceof Uint8Array)) headers['content-length'] = String(options.size);
    return (await this.http.json<SourceUpload>({ ...options, method: 'PUT', path: `${this.base}/source`, headers, body })).source;
  }

  /**
   * Builds the current source. A failed build resolves too: check `compilation.successful`;
   * `compilation.output` is the build log.
   */
  compile(options: RequestOptions = {}): Promise<CompileResult> {
    return this.http.json({ ...options, method: 'POST', path: `${this.base}/compile` });
  }

  /** The last builds, newest first. */
  async builds(options: RequestOptions = {}): Promise<Build[]> {
    return (await this.http.json<Page<Build>>({ ...options, method: 'GET', path: `${this.base}/builds` })).results;
  }

  build(id: string, options: RequestOptions = {}): Promise<Build> {
    return this.http.json({ ...options, method: 'GET', path: `${this.base}/builds/${encodeURIComponent(id)}` });
  }

  async buildLogs(id: string, options: RequestOptions = {}): Promise<string> {
    return (await this.http.json<BuildLogs>({ ...options, method: 'GET', path: `${this.base}/builds/${encodeURIComponent(id)}/logs` })).logs;
  }

  /**
   * Publishes the last successful build as a new version: `'minor'` (the default), `'major'`,
   * `'revision'`, or the whole request with release notes and settings.
   */
  publish(request: PublishRequest | VersionType = {}, options: RequestOptions = {}): Promise<AlgorithmVersion> {
    const body: PublishRequest = typeof request === 'string' ? { version_info: { version_type: request } } : request;
    return this.http.json({ ...options, method: 'POST', path: `${this.base}/versions`, ...jsonBody(body) });
  }

  /** Every published version, newest first (others see public ones only). */
  versions(options: RequestOptions = {}): AsyncGenerator<AlgorithmVersion, void, undefined> {
    return paged<AlgorithmVersion>(this.http, `${this.base}/versions`, {}, options);
  }

  /** A published version's README (Markdown as its author wrote it, or null); by default the one this handle names. */
  async readme(version = this.version, options: RequestOptions = {}): Promise<string | null> {
    if (!version) throw new AlgohostError(`${this.uri} names no version; pass one`, 'invalid_version');
    const r = await this.http.json<VersionReadme>({ ...options, method: 'GET', path: `${this.base}/versions/${encodeURIComponent(version)}/readme` });
    return r.readme;
  }

  /** One version by number or build hash; by default the one this handle names. */
  async versionInfo(version = this.version, options: RequestOptions = {}): Promise<AlgorithmVersion> {
    if (!version) throw new AlgohostError(`${this.uri} names no version; pass one`, 'invalid_version');
    return this.http.json({ ...options, method: 'GET', path: `${this.base}/versions/${encodeURIComponent(version)}` });
  }
}
