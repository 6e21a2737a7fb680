/**
 * Differential check of the call API between two versions of the server: every request of a
 * matrix (successes, each kind of failure, the query options, paths and bodies the direct
 * path must leave to fastify) goes to the base (HEAD by default, see bench/baseTree.ts) and to
 * this checkout, both on one home with pino at level info; their answers (status line,
 * headers in order, body) and the request's log lines must be the same, apart from what
 * differs by nature (dates, request ids, timings, ports).
 *
 *   node --import ./bin/loader.mjs bench/callParity.ts [--base DIR | --rev REV]
 *
 * Exits with 1 when anything differs, printing the differences.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { loadConfig } from '../src/config.ts';
import { createServices } from '../src/services.ts';
import { release } from '../test/helpers/algorithms.ts';
import { api } from '../test/helpers/server.ts';
import { baseTree } from './baseTree.ts';
import { createBench, sleep } from './common.ts';
import { spawnServer, type ServerProc } from './procs.ts';

const bench = createBench('callParity');
const { log, procs } = bench;

/** The tests' menu of behaviours (test/calls.test.ts), plus stdout and a JSON result. */
const KINDS = `
export async function apply(input) {
  if (typeof input !== 'string') return input;
  switch (input) {
    case 'void': return undefined;
    case 'print': console.log('printed'); return 'done';
    case 'fail': throw new Error('boom');
    case 'custom': throw Object.assign(new Error('that will not do'), { error_type: 'InputError' });
    case 'exit': process.exit(3);
    case 'object': return { a: [1, 'two'] };
    case 'bytes': return Buffer.from([0, 1, 2, 255]);
    case 'slow': await new Promise((r) => setTimeout(r, 1500)); return 'slow';
    default: return input;
  }
}
`;

interface Case {
  name: string;
  method?: string;
  path: string;
  headers: Record<string, string>;
  body?: string | Buffer;
  /** Sent with Transfer-Encoding: chunked instead of Content-Length. */
  chunked?: boolean;
}

interface Answer {
  head: string[];
  body: string;
}

/** One request on a new connection, written byte for byte; the answer as text. */
function send(port: number, c: Case): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const body = c.body === undefined ? Buffer.alloc(0) : Buffer.from(c.body);
    const lines = [`${c.method ?? 'POST'} ${c.path} HTTP/1.1`, 'Host: 127.0.0.1', ...Object.entries(c.headers).map(([k, v]) => `${k}: ${v}`)];
    lines.push(c.chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${body.length}`);
    const payload = c.chunked ? Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]) : body;
    const sock = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => sock.destroy(), 10_000);
    sock.on('data', (d: Buffer) => {
      chunks.push(d);
      let all = Buffer.concat(chunks);
      // An interim 100 Continue comes first.
      if (all.toString('latin1', 0, 12) === 'HTTP/1.1 100') all = all.subarray(all.indexOf('\r\n\r\n') + 4);
      const end = all.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = /\r\ncontent-length: *(\d+)/i.exec(all.toString('latin1', 0, end));
      if (length && all.length >= end + 4 + Number(length[1])) sock.end();
    });
    sock.on('error', reject);
    sock.on('close', () => {
      clearTimeout(timer);
      let all = Buffer.concat(chunks).toString('utf8');
      const interim = all.startsWith('HTTP/1.1 100') ? all.slice(0, all.indexOf('\r\n\r\n') + 4) : '';
      all = all.slice(interim.length);
      const end = all.indexOf('\r\n\r\n');
      resolve({ head: [...(interim ? [interim.trim()] : []), ...all.slice(0, end).split('\r\n')], body: all.slice(end + 4) });
    });
    sock.write(Buffer.concat([Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1'), payload]));
  });
}

const normalize = (text: string) =>
  text
    .replace(/req-[0-9a-f]{16}/g, 'req-ID')
    .replace(/"duration":[0-9.e-]+/g, '"duration":N')
    .replace(/"(responseTime|time|pid|remotePort)":[0-9.]+/g, '"$1":N')
    .replace(/"hostname":"[^"]*"/g, '"hostname":H');

/** Without the date; Content-Length checked against the body (durations vary in length). */
function normalAnswer(a: Answer): string[] {
  const head = a.head.filter((h) => !/^date:/i.test(h)).map((h) => (/^content-length:/i.test(h) ? `content-length ${Number(h.split(':')[1]) === Buffer.byteLength(a.body) ? 'matches' : 'DOES NOT MATCH'} the body` : h));
  return [...head, '', normalize(a.body)];
}

class LogTail {
  private offset = 0;
  constructor(private readonly file: string) {}
  /** The lines written since the last call. */
  take(): string[] {
    const text = fs.existsSync(this.file) ? fs.readFileSync(this.file, 'utf8') : '';
    const fresh = text.slice(this.offset);
    this.offset = text.length;
    return fresh.split('\n').filter((l) => l !== '').map(normalize);
  }
}

async function main(): Promise<void> {
  const base = baseTree();
  const home = path.join(bench.work, 'home');
  fs.mkdirSync(home, { recursive: true });
  const services = await createServices(loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, {}));
  const aliceKey = (await services.users.create('alice')).apiKey;
  const bobKey = (await services.users.create('bob')).apiKey;
  await services.close();

  const servers: { label: string; proc: ServerProc; log: LogTail }[] = [];
  for (const [label, root] of [['base', base], ['new', '.']] as const) {
    const logFile = path.join(bench.work, `${label}.log`);
    const proc = await spawnServer(label, { args: ['bench/paritySrv.ts', root, home, logFile], logFile: path.join(bench.work, `${label}.out`) });
    procs.push(proc);
    servers.push({ label, proc, log: new LogTail(logFile) });
  }
  const alice = api(`http://127.0.0.1:${servers[0]!.proc.port}`, aliceKey);
  const js = { language: 'javascript' };
  await release(alice, 'alice', 'Kinds', { 'src/index.js': KINDS }, { settings: js });
  await release(alice, 'alice', 'Open', { 'src/index.js': "export function apply() { throw new Error('open failure'); }\n" }, { settings: { ...js, source_visibility: 'open' } });
  await release(alice, 'alice', 'EchoPy', { 'src/EchoPy.py': 'def apply(input):\n    return input\n' }, { settings: { language: 'python3' } });
  const keyWith = async (name: string, permissions: Record<string, unknown>) => {
    const r = await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, permissions }) });
    return ((await r.json()) as { api_key: string; id: string });
  };
  const noAlgo = await keyWith('noalgo', { allow_algo: false });
  const aclBob = await keyWith('aclbob', { algo_acl: ['algo://bob/*'] });
  const revoked = await keyWith('revoked', {});
  await alice(`/v1/users/alice/keys/${revoked.id}`, { method: 'DELETE' });

  const A = { authorization: `Simple ${aliceKey}` };
  const B = { authorization: `Simple ${bobKey}` };
  const text = { 'content-type': 'text/plain' };
  const cases: Case[] = [
    { name: 'text echo, owner', path: '/v1/algo/alice/Kinds', headers: { ...A, ...text }, body: 'héllo' },
    { name: 'text echo, another user', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: 'hello' },
    { name: 'json input', path: '/v1/algo/alice/Kinds', headers: { ...B, 'content-type': 'application/json' }, body: '{"a":[1,2,{"b":null}]}' },
    { name: 'json input with charset', path: '/v1/algo/alice/Kinds', headers: { ...B, 'content-type': 'application/json; charset=utf-8' }, body: '42' },
    { name: 'vendor +json input', path: '/v1/algo/alice/Kinds', headers: { ...B, 'content-type': 'application/vnd.x+json' }, body: '[1]' },
    { name: 'invalid json input', path: '/v1/algo/alice/Kinds', headers: { ...B, 'content-type': 'application/json' }, body: '{bad' },
    { name: 'binary input', path: '/v1/algo/alice/Kinds', headers: { ...B, 'content-type': 'application/octet-stream' }, body: Buffer.from([0, 1, 2, 3]) },
    { name: 'no content type', path: '/v1/algo/alice/Kinds', headers: { ...B }, body: 'raw' },
    { name: 'unsupported content type', path: '/v1/algo/alice/Kinds', headers: { ...B, 'content-type': 'image/png' }, body: 'x' },
    { name: 'empty body', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: '' },
    { name: 'void result', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: 'void' },
    { name: 'object result', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: 'object' },
    { name: 'binary result', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: 'bytes' },
    { name: 'algorithm error, not owner', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: 'fail' },
    { name: 'algorithm error, owner (trace)', path: '/v1/algo/alice/Kinds', headers: { ...A, ...text }, body: 'fail' },
    { name: 'custom error type', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: 'custom' },
    { name: 'open source error', path: '/v1/algo/alice/Open', headers: { ...B, ...text }, body: 'x' },
    { name: 'stdout=true, owner', path: '/v1/algo/alice/Kinds?stdout=true', headers: { ...A, ...text }, body: 'print' },
    { name: 'stdout=true, not owner', path: '/v1/algo/alice/Kinds?stdout=true', headers: { ...B, ...text }, body: 'print' },
    { name: 'stdout=maybe', path: '/v1/algo/alice/Kinds?stdout=maybe', headers: { ...A, ...text }, body: 'print' },
    { name: 'timeout=5', path: '/v1/algo/alice/Kinds?timeout=5', headers: { ...B, ...text }, body: 'x' },
    { name: 'timeout=abc', path: '/v1/algo/alice/Kinds?timeout=abc', headers: { ...B, ...text }, body: 'x' },
    { name: 'timeout=1, too slow', path: '/v1/algo/alice/Kinds?timeout=1', headers: { ...B, ...text }, body: 'slow' },
    { name: 'output=raw text', path: '/v1/algo/alice/Kinds?output=raw', headers: { ...B, ...text }, body: 'hi' },
    { name: 'output=raw object', path: '/v1/algo/alice/Kinds?output=raw', headers: { ...B, ...text }, body: 'object' },
    { name: 'output=raw bytes', path: '/v1/algo/alice/Kinds?output=raw', headers: { ...B, ...text }, body: 'bytes' },
    { name: 'output=raw void', path: '/v1/algo/alice/Kinds?output=raw', headers: { ...B, ...text }, body: 'void' },
    { name: 'output=raw failure', path: '/v1/algo/alice/Kinds?output=raw', headers: { ...B, ...text }, body: 'fail' },
    { name: 'output=bogus', path: '/v1/algo/alice/Kinds?output=bogus', headers: { ...B, ...text }, body: 'x' },
    { name: 'crash (exit 3)', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: 'exit' },
    { name: 'after the crash', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: 'again' },
    { name: 'version 0.1.0', path: '/v1/algo/alice/Kinds/0.1.0', headers: { ...B, ...text }, body: 'x' },
    { name: 'version 0.1', path: '/v1/algo/alice/Kinds/0.1', headers: { ...B, ...text }, body: 'x' },
    { name: 'version 9.9.9', path: '/v1/algo/alice/Kinds/9.9.9', headers: { ...B, ...text }, body: 'x' },
    { name: 'bad version', path: '/v1/algo/alice/Kinds/latest-ish', headers: { ...B, ...text }, body: 'x' },
    { name: 'trailing slash', path: '/v1/algo/alice/Kinds/', headers: { ...B, ...text }, body: 'x' },
    { name: 'double slash', path: '/v1/algo//alice/Kinds', headers: { ...B, ...text }, body: 'x' },
    { name: 'one segment', path: '/v1/algo/alice', headers: { ...B, ...text }, body: 'x' },
    { name: 'four segments', path: '/v1/algo/alice/Kinds/0.1.0/x', headers: { ...B, ...text }, body: 'x' },
    { name: 'algo:// reference', path: '/v1/algo/algo://alice/Kinds', headers: { ...B, ...text }, body: 'x' },
    { name: 'percent-encoded', path: '/v1/algo/alice/K%69nds', headers: { ...B, ...text }, body: 'x' },
    { name: 'bad percent-encoding', path: '/v1/algo/alice/K%zznds', headers: { ...B, ...text }, body: 'x' },
    { name: 'dot segment', path: '/v1/algo/alice/../Kinds', headers: { ...B, ...text }, body: 'x' },
    { name: 'case of the names', path: '/v1/algo/ALICE/kinds', headers: { ...B, ...text }, body: 'x' },
    { name: 'unknown algorithm', path: '/v1/algo/alice/Nope', headers: { ...B, ...text }, body: 'x' },
    { name: 'unknown owner', path: '/v1/algo/nobody/Nope', headers: { ...B, ...text }, body: 'x' },
    { name: 'very long name', path: `/v1/algo/alice/${'x'.repeat(1200)}`, headers: { ...B, ...text }, body: 'x' },
    { name: 'python echo', path: '/v1/algo/alice/EchoPy', headers: { ...B, ...text }, body: 'py' },
    { name: 'no key', path: '/v1/algo/alice/Kinds', headers: { ...text }, body: 'x' },
    { name: 'malformed key', path: '/v1/algo/alice/Kinds', headers: { authorization: 'Simple nope', ...text }, body: 'x' },
    { name: 'unknown key', path: '/v1/algo/alice/Kinds', headers: { authorization: `Simple ${aliceKey.slice(0, -1)}${aliceKey.endsWith('A') ? 'B' : 'A'}`, ...text }, body: 'x' },
    { name: 'revoked key', path: '/v1/algo/alice/Kinds', headers: { authorization: `Simple ${revoked.api_key}`, ...text }, body: 'x' },
    { name: 'Bearer scheme', path: '/v1/algo/alice/Kinds', headers: { authorization: `Bearer ${aliceKey}`, ...text }, body: 'x' },
    { name: 'bare key', path: '/v1/algo/alice/Kinds', headers: { authorization: aliceKey, ...text }, body: 'x' },
    { name: 'key without allow_algo', path: '/v1/algo/alice/Kinds', headers: { authorization: `Simple ${noAlgo.api_key}`, ...text }, body: 'x' },
    { name: 'key whose algo_acl excludes it', path: '/v1/algo/alice/Kinds', headers: { authorization: `Simple ${aclBob.api_key}`, ...text }, body: 'x' },
    { name: 'forged internal header', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text, 'x-algohost-internal': 'guess' }, body: 'x' },
    { name: 'chunked body', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: 'chunks', chunked: true },
    { name: 'declared too large', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text, 'content-length': String(11 * 1024 * 1024) } },
    { name: 'output=void', path: '/v1/algo/alice/Kinds?output=void', headers: { ...B, ...text }, body: 'x' },
    { name: 'web variant without origin', path: '/v1/web/algo/alice/Kinds', headers: { ...B, ...text }, body: 'x' },
    { name: 'GET on a call path', method: 'GET', path: '/v1/algo/alice/Kinds', headers: { ...B } },
    { name: 'PUT on a call path', method: 'PUT', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text }, body: 'x' },
    { name: 'Expect: 100-continue', path: '/v1/algo/alice/Kinds', headers: { ...B, ...text, expect: '100-continue' }, body: 'x' },
  ];
  // "declared too large" sets its own Content-Length: send() must not add a second one.
  // The setup's last request logs its completion after its client has the answer.
  await sleep(200);
  for (const s of servers) s.log.take();
  let differences = 0;
  for (const c of cases) {
    const answers: string[][] = [];
    const logs: string[][] = [];
    for (const s of servers) {
      const headers = { ...c.headers };
      const declared = headers['content-length'];
      delete headers['content-length'];
      const a = declared === undefined ? await send(s.proc.port, { ...c, headers }) : await sendDeclared(s.proc.port, c.path, headers, declared);
      await sleep(c.body === 'slow' ? 1500 : 30);
      answers.push(normalAnswer(a));
      logs.push(s.log.take());
    }
    const same = JSON.stringify(answers[0]) === JSON.stringify(answers[1]) && JSON.stringify(logs[0]) === JSON.stringify(logs[1]);
    log(`${same ? 'same     ' : 'DIFFERENT'} ${c.name}: ${answers[0]![0]}`);
    if (!same) {
      differences++;
      for (const [i, s] of servers.entries()) process.stdout.write(`--- ${s.label}\n${answers[i]!.join('\n')}\n${logs[i]!.join('\n')}\n`);
    }
  }
  log(differences === 0 ? `all ${cases.length} cases answered and logged the same` : `${differences} of ${cases.length} cases differ`);
  if (differences > 0) process.exitCode = 1;
}

/** A request that declares a body it never sends (the server must refuse it from the header). */
function sendDeclared(port: number, p: string, headers: Record<string, string>, declared: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const lines = [`POST ${p} HTTP/1.1`, 'Host: 127.0.0.1', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), `Content-Length: ${declared}`];
    const sock = net.connect(port, '127.0.0.1');
    let data = '';
    const timer = setTimeout(() => sock.destroy(), 5000);
    sock.on('data', (d: Buffer) => {
      data += d.toString('utf8');
      const end = data.indexOf('\r\n\r\n');
      const length = end < 0 ? null : /\r\ncontent-length: *(\d+)/i.exec(data.slice(0, end));
      if (length && data.length >= end + 4 + Number(length[1])) sock.destroy();
    });
    sock.on('error', reject);
    sock.on('close', () => {
      clearTimeout(timer);
      const end = data.indexOf('\r\n\r\n');
      resolve({ head: data.slice(0, end).split('\r\n'), body: data.slice(end + 4) });
    });
    sock.write(lines.join('\r\n') + '\r\n\r\n');
  });
}

await bench.run(main);
