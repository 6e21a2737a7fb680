import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { json } from './server.ts';

type Call = (p: string, init?: RequestInit) => Promise<Response>;

/** A tar.gz of `files` (path → content), made by the system's tar. */
export function tarGz(files: Record<string, string | Buffer>): Buffer {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-src-'));
  try {
    for (const [file, content] of Object.entries(files)) {
      fs.mkdirSync(path.join(dir, path.dirname(file)), { recursive: true });
      fs.writeFileSync(path.join(dir, file), content);
    }
    return execFileSync('/usr/bin/tar', ['-czf', '-', '-C', dir, '.'], { maxBuffer: 256 * 1024 * 1024 });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const jsonInit = (method: string, body: unknown): RequestInit => ({ method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

export async function createAlgorithm(call: Call, owner: string, name: string, settings: Record<string, unknown> = {}): Promise<void> {
  const r = await call(`/v1/algorithms/${owner}`, jsonInit('POST', { name, settings }));
  if (r.status !== 201) throw new Error(`create ${name}: ${r.status} ${await r.text()}`);
}

export async function upload(call: Call, owner: string, name: string, files: Record<string, string | Buffer>): Promise<Response> {
  return call(`/v1/algorithms/${owner}/${name}/source`, { method: 'PUT', headers: { 'content-type': 'application/gzip' }, body: tarGz(files) });
}

/** Compiles; returns the build hash, failing with the build log when the build failed. */
export async function compile(call: Call, owner: string, name: string): Promise<string> {
  const r = await call(`/v1/algorithms/${owner}/${name}/compile`, { method: 'POST' });
  const body = await json(r);
  if (r.status !== 200 || body.compilation?.successful !== true) throw new Error(`compile ${name}: ${r.status} ${JSON.stringify(body)}`);
  return body.version_info.git_hash as string;
}

export async function publish(call: Call, owner: string, name: string, versionInfo: Record<string, unknown> = {}, settings?: Record<string, unknown>): Promise<string> {
  const r = await call(`/v1/algorithms/${owner}/${name}/versions`, jsonInit('POST', { version_info: versionInfo, ...(settings ? { settings } : {}) }));
  const body = await json(r);
  if (r.status !== 200) throw new Error(`publish ${name}: ${r.status} ${JSON.stringify(body)}`);
  return body.version_info.semantic_version as string;
}

/** Create (if asked), upload, compile and publish in one go; returns the version. */
export async function release(
  call: Call,
  owner: string,
  name: string,
  files: Record<string, string | Buffer>,
  options: { settings?: Record<string, unknown>; create?: boolean; versionInfo?: Record<string, unknown>; publishSettings?: Record<string, unknown> } = {},
): Promise<{ version: string; hash: string }> {
  if (options.create !== false) await createAlgorithm(call, owner, name, options.settings);
  const up = await upload(call, owner, name, files);
  if (up.status !== 200) throw new Error(`upload ${name}: ${up.status} ${await up.text()}`);
  const hash = await compile(call, owner, name);
  const version = await publish(call, owner, name, options.versionInfo, options.publishSettings);
  return { version, hash };
}

/** POSTs an input to an algorithm. */
export function callAlgo(call: Call, ref: string, body: string | Buffer, contentType = 'text/plain', query = ''): Promise<Response> {
  return call(`/v1/algo/${ref}${query}`, { method: 'POST', headers: { 'content-type': contentType }, body });
}
