/**
 * Types for the parts of the official npm client algorithmia@0.3.10 (CommonJS, untyped)
 * that the tests drive. Written from node_modules/algorithmia/lib/{algorithmia,data}.js.
 * Response bodies are parsed by the client from the response Content-Type (JSON object,
 * string or Buffer), so they are `unknown` here and narrowed by the tests.
 */
declare module 'algorithmia' {
  namespace algorithmia {
    interface ErrorObject {
      message: string;
      [field: string]: unknown;
    }

    /** Callback of every raw request: the parsed body (with `error` added on a non-2xx) and the status. */
    type ReqCallback = (response: unknown, status: number) => void;
    type ExistsCallback = (exists: boolean, status?: number, response?: unknown) => void;
    type EntryCallback = (err: ErrorObject | null, item: File | Dir | undefined) => void;

    interface DataObject {
      client: Client;
      /** The path without the `data://` prefix, e.g. `.my/dir/file.txt`. */
      data_path: string;
      basename(): string;
      parent(): Dir | null;
    }

    interface File extends DataObject {
      /** Set on files that come from a directory listing. */
      last_modified?: string;
      size?: number;
      put(content: string | Buffer, callback: ReqCallback): void;
      putString(content: string, callback: ReqCallback): void;
      putJson(content: string, callback: ReqCallback): void;
      get(callback: (err: ErrorObject | null, data: unknown) => void): void;
      getString(callback: ReqCallback): void;
      getJson(callback: ReqCallback): void;
      exists(callback: ExistsCallback): void;
      delete(callback: ReqCallback): void;
    }

    interface DirIterator {
      next(callback: EntryCallback): void;
    }

    interface Thenable {
      then(callback: () => void): void;
    }

    interface Dir extends DataObject {
      create(callback: ReqCallback): void;
      file(filename: string): File;
      putFile(filePath: string, callback: ReqCallback): void;
      iterator(): DirIterator;
      forEach(callback: (err: ErrorObject | null, item: File | Dir) => void): Thenable;
      forEachFile(callback: (err: ErrorObject | null, item: File) => void): Thenable;
      forEachDir(callback: (err: ErrorObject | null, item: Dir) => void): Thenable;
      exists(callback: ExistsCallback): void;
      delete(force: boolean, callback: ReqCallback): void;
    }

    interface AlgoResponse {
      status: number;
      result: unknown;
      error?: ErrorObject;
      metadata?: { content_type?: string; duration?: number; stdout?: string; [field: string]: unknown };
      /** The result decoded by content_type (binary → Buffer); throws the error message on an error. */
      get(): unknown;
    }

    interface Algorithm {
      /** Buffer → octet-stream, string → text/plain, anything else → JSON. */
      pipe(input: unknown): { then(callback: (response: AlgoResponse) => void): void };
      pipeJson(input: string): { then(callback: (response: AlgoResponse) => void): void };
    }

    interface Client {
      apiAddress: string;
      /** `Simple <key>`, or '' when no key was given. */
      apiKey: string;
      file(path: string): File;
      dir(path: string): Dir;
      algo(path: string): Algorithm;
    }

    function client(key?: string, address?: string): Client;
    function file(path: string): File;
    function algo(path: string): unknown;
  }

  function algorithmia(key?: string, address?: string): algorithmia.Client;
  export = algorithmia;
}
