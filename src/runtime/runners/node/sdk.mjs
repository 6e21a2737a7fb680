// The in-algorithm SDK for Node: what `ctx.client` (and `globalThis.algohost.client()`) give
// an algorithm. Every operation is an HTTP request of the public API, carried over the
// control channel and run by the server as the call's identity: `.my` is the caller, nested
// calls get what is left of this call's time. Plain JavaScript, no dependencies.

/** An error the platform or another algorithm answered with. */
export class AlgohostError extends Error {
  constructor(message, fields = {}) {
    super(message);
    this.name = 'AlgohostError';
    Object.assign(this, fields);
  }
}

const encodePath = (p) => p.split('/').map(encodeURIComponent).join('/');

/** `data://a/b` → `/v1/connector/data/a/b`; `s3+label://x` → `/v1/connector/s3+label/x`. */
function dataUrl(uri) {
  const m = /^([a-z0-9+]+):\/\/(.*)$/i.exec(String(uri));
  if (!m) throw new AlgohostError(`"${uri}" is not a data URI such as data://.my/collection/file`, { code: 'invalid_path' });
  return `/v1/connector/${m[1].toLowerCase()}/${encodePath(m[2].replace(/^\/+/, ''))}`;
}

function bodyOf(data) {
  if (Buffer.isBuffer(data) || data instanceof Uint8Array) return ['application/octet-stream', Buffer.from(data)];
  if (typeof data === 'string') return ['text/plain; charset=utf-8', Buffer.from(data, 'utf8')];
  return ['application/json', Buffer.from(JSON.stringify(data), 'utf8')];
}

function failure(res) {
  let message = `the server answered ${res.status}`;
  let code;
  try {
    const e = JSON.parse(res.body.toString('utf8')).error;
    if (e?.message) message = e.message;
    code = e?.code;
  } catch {
    /* not JSON */
  }
  return new AlgohostError(message, { status: res.status, code });
}

export function createClient(request) {
  const send = async (method, url, { body, type, accept } = {}) => {
    const headers = {};
    if (type) headers['content-type'] = type;
    if (accept) headers.accept = accept;
    const res = await request(method, url, headers, body ?? Buffer.alloc(0));
    if (res.status === 0) throw new AlgohostError(res.error ?? 'the request could not be made');
    return res;
  };
  const ok = async (...args) => {
    const res = await send(...args);
    if (res.status < 200 || res.status >= 300) throw failure(res);
    return res;
  };

  /** 'file', 'directory', or null when nothing (visible to the caller) is there. */
  const dataType = async (uri) => {
    const res = await send('HEAD', dataUrl(uri));
    if (res.status === 404) return null;
    if (res.status >= 200 && res.status < 300) return res.headers['x-data-type'] === 'directory' ? 'directory' : 'file';
    throw failure(res);
  };

  class File {
    constructor(uri) {
      this.uri = uri;
    }
    /** The file's bytes. */
    async get() {
      return (await ok('GET', dataUrl(this.uri), { accept: 'application/octet-stream' })).body;
    }
    async getString() {
      return (await this.get()).toString('utf8');
    }
    async getJson() {
      return JSON.parse(await this.getString());
    }
    /** Stores a Buffer, a string, or anything else as JSON. */
    async put(data) {
      const [type, body] = bodyOf(data);
      await ok('PUT', dataUrl(this.uri), { type, body });
      return this;
    }
    async exists() {
      return (await dataType(this.uri)) === 'file';
    }
    async delete() {
      await ok('DELETE', dataUrl(this.uri));
    }
  }

  class Dir {
    constructor(uri) {
      this.uri = String(uri).replace(/\/+$/, '');
    }
    file(name) {
      return new File(`${this.uri}/${name}`);
    }
    /** Makes this directory in its parent; `acl` as in the data API (collections only). */
    async create(options = {}) {
      const slash = this.uri.lastIndexOf('/');
      const parent = this.uri.slice(0, slash);
      const name = this.uri.slice(slash + 1);
      const [type, body] = bodyOf(options.acl ? { name, acl: options.acl } : { name });
      await ok('POST', dataUrl(parent), { type, body });
      return this;
    }
    async exists() {
      return (await dataType(this.uri)) === 'directory';
    }
    async delete(options = {}) {
      await ok('DELETE', `${dataUrl(this.uri)}${options.force ? '?force=true' : ''}`);
    }
    /** Every entry, page after page: `{type: 'file'|'dir', name, uri, size?, last_modified?}`. */
    async *list() {
      let marker;
      do {
        const url = `${dataUrl(this.uri)}${marker ? `?marker=${encodeURIComponent(marker)}` : ''}`;
        const page = JSON.parse((await ok('GET', url, { accept: 'application/json' })).body.toString('utf8'));
        for (const f of page.folders ?? []) yield { type: 'dir', name: f.name, uri: `${this.uri}/${f.name}` };
        for (const f of page.files ?? []) yield { type: 'file', name: f.filename, uri: `${this.uri}/${f.filename}`, size: f.size, last_modified: f.last_modified };
        marker = page.marker;
      } while (marker);
    }
    async *files() {
      for await (const e of this.list()) if (e.type === 'file') yield e;
    }
    async *dirs() {
      for await (const e of this.list()) if (e.type === 'dir') yield e;
    }
  }

  class Algo {
    constructor(ref) {
      this.ref = String(ref).replace(/^algo:\/\//, '');
    }
    /** Calls the algorithm; resolves `{result, metadata}`, rejects with its error. */
    async pipe(input, options = {}) {
      const [type, body] = bodyOf(input);
      const q = new URLSearchParams();
      if (options.timeout !== undefined) q.set('timeout', String(options.timeout));
      if (options.stdout) q.set('stdout', 'true');
      const url = `/v1/algo/${encodePath(this.ref)}${q.size ? `?${q}` : ''}`;
      const res = await ok('POST', url, { type: type.startsWith('text/') ? 'text/plain' : type, body });
      const envelope = JSON.parse(res.body.toString('utf8'));
      if (envelope.error) {
        throw new AlgohostError(envelope.error.message, { error_type: envelope.error.error_type, stacktrace: envelope.error.stacktrace });
      }
      const m = envelope.metadata ?? {};
      const result = m.content_type === 'binary' ? Buffer.from(envelope.result, 'base64') : envelope.result;
      return { result, metadata: m };
    }
  }

  return {
    algo: (ref) => new Algo(ref),
    file: (uri) => new File(uri),
    dir: (uri) => new Dir(uri),
  };
}
