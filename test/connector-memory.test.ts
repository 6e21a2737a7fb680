/**
 * A 200 MiB file copied in and out through each connected-storage provider, with the server
 * in a process of its own and each provider in another (s3rver, rclone, the Dropbox stand-in),
 * so the resident memory sampled is the server's alone. Streaming means the server's memory
 * does not grow with the file: the assertion allows well under half the file's size.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { childEnv, runCli, spawnUntilFirstLine, startServerProcess, type ServerProcess } from './helpers/process.ts';
import { tempHome } from './helpers/server.ts';
import { S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { rcloneMissing, startWebDav } from './helpers/webdav.ts';

const FILE_BYTES = 200 * 1024 * 1024;
const CHUNK = 256 * 1024;
/** Growth of the server's resident memory over its warmed-up baseline that fails the test. */
const MAX_GROWTH = 80 * 1024 * 1024;
const DROPBOX_TOKEN = 'sl.memory-test-token';
const REPO = path.resolve(import.meta.dirname, '..');

function rssOf(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

/** Samples a process's RSS every 10 ms until stopped; answers the peak. */
function sampler(pid: number): () => number {
  let peak = rssOf(pid);
  const timer = setInterval(() => {
    try {
      peak = Math.max(peak, rssOf(pid));
    } catch {
      /* exited */
    }
  }, 10);
  return () => {
    clearInterval(timer);
    return peak;
  };
}

/** Deterministic bytes, produced as they are sent: the test holds one chunk at a time too. */
function* chunks(total: number, seed: string): Generator<Buffer> {
  let block = crypto.createHash('sha256').update(seed).digest();
  for (let sent = 0; sent < total; sent += CHUNK) {
    const out = Buffer.allocUnsafe(Math.min(CHUNK, total - sent));
    for (let i = 0; i < out.length; i += 32) {
      block = crypto.createHash('sha256').update(block).digest();
      block.copy(out, i);
    }
    yield out;
  }
}

function put(url: string, key: string, total: number, seed: string): Promise<{ status: number; body: string; sha: string }> {
  const hash = crypto.createHash('sha256');
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'PUT', headers: { authorization: `Simple ${key}`, 'content-type': 'application/octet-stream' } }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (s: string) => (body += s));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, sha: hash.digest('hex') }));
    });
    req.on('error', reject);
    const source = chunks(total, seed);
    const pump = () => {
      for (let next = source.next(); !next.done; next = source.next()) {
        hash.update(next.value);
        if (!req.write(next.value)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}

function get(url: string, key: string): Promise<{ status: number; bytes: number; sha: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers: { authorization: `Simple ${key}` } }, (res) => {
        const hash = crypto.createHash('sha256');
        let bytes = 0;
        res.on('data', (c: Buffer) => {
          bytes += c.length;
          hash.update(c);
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes, sha: hash.digest('hex') }));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

/** The Dropbox stand-in as its own process (it stands in for the real service, which cannot be reached from here). */
async function startDropboxProcess(): Promise<{ apiUrl: string; contentUrl: string; stop(): Promise<void> }> {
  const started = await spawnUntilFirstLine(process.execPath, ['--import', 'tsx', path.join(REPO, 'test/helpers/dropboxStandIn.ts'), '--token', DROPBOX_TOKEN], {
    what: 'the Dropbox stand-in',
    cwd: REPO,
    env: childEnv(),
  });
  const urls = JSON.parse(started.line) as { apiUrl: string; contentUrl: string };
  return { ...urls, stop: started.stop };
}

describe('a 200 MiB file through each provider, the server\'s memory flat', () => {
  let server: ServerProcess;
  let key: string;
  let s3: S3Server;
  let dav: Awaited<ReturnType<typeof startWebDav>> | undefined;
  let dropbox: Awaited<ReturnType<typeof startDropboxProcess>>;
  const home = tempHome();

  const connect = async (account: Record<string, unknown>) => {
    const res = await fetch(`${server.url}/v1/users/alice/connectors`, {
      method: 'POST',
      headers: { authorization: `Simple ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ writeable: true, ...account }),
    });
    assert.equal(res.status, 201, await res.text());
  };

  before(async () => {
    s3 = await startS3(['big']);
    if (!rcloneMissing()) dav = await startWebDav();
    dropbox = await startDropboxProcess();
    const created = await runCli(['user', 'create', 'alice', '--init'], home);
    assert.equal(created.code, 0, created.stderr);
    key = (JSON.parse(created.stdout) as { api_key: string }).api_key;
    server = await startServerProcess({
      home,
      env: { ALGOHOST_CONNECTOR_NETWORK: 'any', ALGOHOST_DROPBOX_API_URL: dropbox.apiUrl, ALGOHOST_DROPBOX_CONTENT_URL: dropbox.contentUrl },
    });
    await connect({ label: 's3', protocol: 'objstore', cred_data: { endpoint: s3.endpoint, ...S3RVER_KEY, force_path_style: true } });
    if (dav) await connect({ label: 'dav', protocol: 'filehost', provider: 'webdav', cred_data: { url: dav.url } });
    await connect({ label: 'box', protocol: 'filehost', provider: 'dropbox', cred_data: { access_token: DROPBOX_TOKEN } });
  });
  after(async () => {
    await server?.kill();
    await s3?.stop();
    await dav?.stop();
    await dropbox?.stop();
    fs.rmSync(home, { recursive: true, force: true });
  });

  for (const [name, conn, dir] of [
    ['objstore over S3 (s3rver)', 'objstore+s3', 'big'],
    ['filehost over WebDAV (rclone)', 'filehost+dav', ''],
    ['filehost over Dropbox (local stand-in)', 'filehost+box', ''],
  ] as const) {
    test(name, { skip: conn === 'filehost+dav' && rcloneMissing() ? rcloneMissing()! : false }, async (t) => {
      const at = (file: string) => `${server.url}/v1/connector/${conn}/${dir ? `${dir}/` : ''}${file}`;
      // Warm up: the provider's client and its code are loaded by a small copy first.
      const warm = await put(at('warm.bin'), key, 8 * 1024 * 1024, 'warm');
      assert.equal(warm.status, 200, warm.body);
      assert.equal((await get(at('warm.bin'), key)).sha, warm.sha);
      const baseline = rssOf(server.pid);

      let stop = sampler(server.pid);
      const sent = await put(at('large.bin'), key, FILE_BYTES, name);
      const putPeak = stop();
      assert.equal(sent.status, 200, sent.body);

      stop = sampler(server.pid);
      const back = await get(at('large.bin'), key);
      const getPeak = stop();
      assert.equal(back.status, 200);
      assert.equal(back.bytes, FILE_BYTES);
      assert.equal(back.sha, sent.sha, 'the bytes that came back are the bytes that went in');

      const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;
      const report = `baseline ${mib(baseline)}, peak during PUT ${mib(putPeak)}, during GET ${mib(getPeak)}`;
      assert.ok(putPeak - baseline < MAX_GROWTH, `the server's memory grew with the upload: ${report}`);
      assert.ok(getPeak - baseline < MAX_GROWTH, `the server's memory grew with the download: ${report}`);
      t.diagnostic(`${name}: ${report}`);
    });
  }
});
