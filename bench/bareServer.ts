/**
 * The floor the data benchmark compares our server with: a bare `node:http` server over a
 * directory, with no framework, authentication, metadata or logging.
 *
 *   node --import ./bin/loader.mjs bench/bareServer.ts ROOT
 *
 * GET /a/b streams ROOT/a/b with fs.createReadStream (Content-Length from fs.stat).
 * PUT /a/b streams the body to ROOT/.tmp/<random> (fs.createWriteStream with flush: true, so
 * the data is fsynced before close), renames it onto ROOT/a/b and fsyncs the directory: the
 * same durability as our blob store. Prints "bare is ready at http://127.0.0.1:PORT" on stderr.
 * Listens on 127.0.0.1 only, on a free port.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';

const root = path.resolve(process.argv[2] ?? '.');
const tmpDir = path.join(root, '.tmp');
fs.mkdirSync(tmpDir, { recursive: true });

/** ROOT-relative file for a request path; undefined for anything that could leave ROOT. */
function fileFor(url: string): string | undefined {
  const q = url.indexOf('?');
  const segments = (q < 0 ? url : url.slice(0, q)).split('/').slice(1).map((s) => decodeURIComponent(s));
  if (segments.length === 0 || segments.some((s) => s === '' || s === '.' || s === '..' || s.startsWith('.') || s.includes('\0'))) return undefined;
  return path.join(root, ...segments);
}

function answer(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function fsyncDir(dir: string): Promise<void> {
  const fd = await fs.promises.open(dir, 'r');
  try {
    await fd.sync();
  } finally {
    await fd.close();
  }
}

async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const file = fileFor(req.url ?? '/');
  if (!file) return answer(res, 400, { error: 'bad path' });
  if (req.method === 'GET') {
    let size: number;
    try {
      const st = await fs.promises.stat(file);
      if (!st.isFile()) return answer(res, 404, { error: 'not a file' });
      size = st.size;
    } catch {
      return answer(res, 404, { error: 'not found' });
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size });
    await pipeline(fs.createReadStream(file), res);
    return;
  }
  if (req.method === 'PUT') {
    const tmp = path.join(tmpDir, crypto.randomBytes(16).toString('hex'));
    try {
      await pipeline(req, fs.createWriteStream(tmp, { flags: 'wx', mode: 0o600, flush: true }));
      await fs.promises.mkdir(path.dirname(file), { recursive: true });
      await fs.promises.rename(tmp, file);
      await fsyncDir(path.dirname(file));
    } catch (err) {
      await fs.promises.rm(tmp, { force: true });
      throw err;
    }
    return answer(res, 200, { result: req.url });
  }
  answer(res, 405, { error: 'method not allowed' });
}

const server = http.createServer((req, res) => {
  handle(req, res).catch((err: unknown) => {
    if (!res.headersSent) answer(res, 500, { error: String(err) });
    else res.destroy();
  });
});
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stderr.write(`bare is ready at http://127.0.0.1:${port}\n`);
});
const stop = () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
