/**
 * The floor the algorithm-call benchmark compares our server with (DESIGN.md "Performance
 * targets"): a bare `node:http` server that forwards each request body to ONE warm child
 * process over a pipe and answers with what comes back. No framework, authentication,
 * metadata, sandbox, envelope or logging.
 *
 *   node --import ./bin/loader.mjs bench/floorServer.ts [--serial]
 *
 * The child is `/usr/bin/node bench/floorChild.mjs`, echoing length-prefixed frames
 * (u32 LE length | bytes) over its stdin and stdout. By default a request's frame is written
 * as soon as its body has arrived, so frames of concurrent requests follow each other in the
 * pipe and the answers come back in order (a FIFO of waiting responses). With --serial only
 * one frame is in the pipe at a time and the others wait in a queue: one call at a time, like
 * one of our workers. Every answer is 200, text/plain, with Content-Length. Prints
 * "floor is ready at http://127.0.0.1:PORT" on stderr; listens on 127.0.0.1 only.
 */
import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';

const serial = process.argv.includes('--serial');
const CHILD = fileURLToPath(new URL('./floorChild.mjs', import.meta.url));
const child = spawn('/usr/bin/node', [CHILD], { stdio: ['pipe', 'pipe', 'inherit'] });
child.on('exit', (code, signal) => {
  process.stderr.write(`floor: the child exited (${code ?? signal})\n`);
  process.exit(1);
});

/** Responses waiting for their frame to come back, in the order the frames were written. */
const inFlight: http.ServerResponse[] = [];
/** --serial: frames not yet written. */
const queued: { frame: Buffer; res: http.ServerResponse }[] = [];

function frameOf(body: Buffer): Buffer {
  const prefix = Buffer.allocUnsafe(4);
  prefix.writeUInt32LE(body.length, 0);
  return Buffer.concat([prefix, body]);
}

function forward(frame: Buffer, res: http.ServerResponse): void {
  if (serial && inFlight.length > 0) {
    queued.push({ frame, res });
    return;
  }
  inFlight.push(res);
  child.stdin.write(frame);
}

let chunks: Buffer[] = [];
let buffered = 0;
child.stdout.on('data', (chunk: Buffer) => {
  chunks.push(chunk);
  buffered += chunk.length;
  for (;;) {
    if (buffered < 4) return;
    if (chunks[0]!.length < 4) chunks = [Buffer.concat(chunks)];
    const size = 4 + chunks[0]!.readUInt32LE(0);
    if (buffered < size) return;
    const all = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    const body = all.subarray(4, size);
    chunks = all.length > size ? [all.subarray(size)] : [];
    buffered -= size;
    const res = inFlight.shift()!;
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': body.length });
    res.end(body);
    const next = queued.shift();
    if (next) forward(next.frame, next.res);
  }
});

const server = http.createServer((req, res) => {
  const parts: Buffer[] = [];
  req.on('data', (c: Buffer) => parts.push(c));
  req.on('end', () => forward(frameOf(parts.length === 1 ? parts[0]! : Buffer.concat(parts)), res));
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stderr.write(`floor${serial ? ' (serial)' : ''} is ready at http://127.0.0.1:${port}\n`);
});
const stop = () => {
  child.removeAllListeners('exit');
  child.kill();
  server.close(() => process.exit(0));
  server.closeAllConnections();
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
