/**
 * The web console's files (docs/console.md), built from `console/src` by esbuild, in this
 * process's memory, the first time they are asked for (or at start, when `serve` warms them):
 * nothing to build by hand, nothing fetched at run time. Each file is kept as is and
 * precompressed with brotli and gzip; the scripts and styles have a content hash in their name,
 * so they are cached for a year, and only the small index page is revalidated.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import zlib from 'node:zlib';

const brotli = promisify(zlib.brotliCompress);
const gzip = promisify(zlib.gzip);

export const CONSOLE_SOURCE = path.resolve(import.meta.dirname, '../../console/src');
/** Where the built files are served from (index.html is `/`). */
export const ASSET_PREFIX = '/console/';

export interface Asset {
  type: string;
  body: Buffer;
  br: Buffer;
  gzip: Buffer;
  etag: string;
  /** Named by content: cacheable for good. */
  immutable: boolean;
}

export interface ConsoleAssets {
  index: Asset;
  /** By file name under ASSET_PREFIX. */
  files: Map<string, Asset>;
}

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
  '.svg': 'image/svg+xml',
};

async function asset(name: string, body: Buffer, immutable: boolean): Promise<Asset> {
  const [br, gz] = await Promise.all([
    brotli(body, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 11, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: body.length } }),
    gzip(body, { level: 9 }),
  ]);
  const etag = `"${crypto.createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`;
  return { type: TYPES[path.extname(name)] ?? 'application/octet-stream', body, br, gzip: gz, etag, immutable };
}

function indexHtml(script: string, style: string): string {
  // No inline script or style: the page's Content-Security-Policy allows only this origin's files.
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>algohost</title>
<link rel="icon" href="${ASSET_PREFIX}icon.svg" type="image/svg+xml">
<link rel="stylesheet" href="${ASSET_PREFIX}${style}">
<script type="module" src="${ASSET_PREFIX}${script}"></script>
</head>
<body>
<div id="app"><p class="boot">Loading the console…</p></div>
<noscript><p>The algohost console needs JavaScript. The whole API works without it: see the README.</p></noscript>
</body>
</html>
`;
}

const ICON = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#1f4f8f"/><path d="M8 23 14 9h4l6 14h-4l-1.3-3.2h-5.4L12 23Zm5.5-6.3h3.1L15 12.6Z" fill="#fff"/></svg>`;

export async function buildConsole(): Promise<ConsoleAssets> {
  // Loaded here: a server that never serves the console never loads the bundler.
  const esbuild = await import('esbuild');
  const result = await esbuild.build({
    entryPoints: [path.join(CONSOLE_SOURCE, 'main.tsx')],
    bundle: true,
    minify: true,
    format: 'esm',
    platform: 'browser',
    target: ['es2022', 'chrome110', 'firefox115', 'safari16'],
    jsx: 'automatic',
    jsxImportSource: 'preact',
    entryNames: '[name]-[hash]',
    outdir: '/console-out',
    write: false,
    legalComments: 'none',
    logLevel: 'silent',
    define: { 'process.env.NODE_ENV': '"production"' },
  });
  const files = new Map<string, Asset>();
  let script: string | undefined;
  let style: string | undefined;
  for (const out of result.outputFiles) {
    const name = path.basename(out.path);
    if (name.endsWith('.js')) script = name;
    if (name.endsWith('.css')) style = name;
    files.set(name, await asset(name, Buffer.from(out.contents), true));
  }
  if (!script || !style) throw new Error('the console build made no script or no stylesheet');
  files.set('icon.svg', await asset('icon.svg', Buffer.from(ICON), false));
  return { index: await asset('index.html', Buffer.from(indexHtml(script, style)), false), files };
}

/**
 * Builds are kept in `node_modules/.cache/algohost-console/<key>/` (the convention of build
 * tools: inside the installation, not a shared temp directory another local user could write
 * to), keyed by the console's sources and the versions of what it bundles. A restart, or the
 * next process of a cluster's test, reads the files back instead of building them again.
 */
const REPO = path.resolve(import.meta.dirname, '../..');
const CACHE_DIR = path.join(REPO, 'node_modules', '.cache', 'algohost-console');
const CLIENT_SOURCE = path.join(REPO, 'client', 'src');

async function cacheKey(): Promise<string> {
  const hash = crypto.createHash('sha256');
  const walk = async (dir: string): Promise<void> => {
    for (const entry of (await fs.promises.readdir(dir, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) await walk(p);
      else hash.update(path.relative(REPO, p)).update('\0').update(await fs.promises.readFile(p)).update('\0');
    }
  };
  await walk(CONSOLE_SOURCE);
  // The project's client, which the console bundles (client/src/browser.ts and what it imports).
  await walk(CLIENT_SOURCE);
  // This file (how the build is made) and what is bundled, by version.
  hash.update(await fs.promises.readFile(fileURLToPath(import.meta.url)));
  for (const dep of ['esbuild', 'preact', 'marked', 'dompurify']) {
    const pkg = await fs.promises.readFile(path.join(REPO, 'node_modules', dep, 'package.json'), 'utf8').catch(() => '');
    hash.update(dep).update(String((JSON.parse(pkg || '{}') as { version?: string }).version));
  }
  return hash.digest('hex').slice(0, 32);
}

interface Stored {
  name: string;
  type: string;
  etag: string;
  immutable: boolean;
}

async function readCached(dir: string): Promise<ConsoleAssets | undefined> {
  try {
    const list = JSON.parse(await fs.promises.readFile(path.join(dir, 'assets.json'), 'utf8')) as Stored[];
    const load = async (s: Stored): Promise<Asset> => {
      const [body, br, gz] = await Promise.all(['', '.br', '.gz'].map((ext) => fs.promises.readFile(path.join(dir, s.name + ext))));
      return { type: s.type, etag: s.etag, immutable: s.immutable, body: body!, br: br!, gzip: gz! };
    };
    const files = new Map<string, Asset>();
    let index: Asset | undefined;
    for (const s of list) {
      const a = await load(s);
      if (s.name === 'index.html') index = a;
      else files.set(s.name, a);
    }
    return index ? { index, files } : undefined;
  } catch {
    return undefined;
  }
}

async function writeCached(dir: string, assets: ConsoleAssets): Promise<void> {
  const tmp = `${dir}.tmp-${process.pid}-${crypto.randomBytes(4).toString('hex')}`;
  try {
    await fs.promises.mkdir(tmp, { recursive: true });
    const list: Stored[] = [];
    for (const [name, a] of [['index.html', assets.index] as const, ...assets.files]) {
      await fs.promises.writeFile(path.join(tmp, name), a.body);
      await fs.promises.writeFile(path.join(tmp, name + '.br'), a.br);
      await fs.promises.writeFile(path.join(tmp, name + '.gz'), a.gzip);
      list.push({ name, type: a.type, etag: a.etag, immutable: a.immutable });
    }
    await fs.promises.writeFile(path.join(tmp, 'assets.json'), JSON.stringify(list));
    // Whole or not at all; a process that got there first already wrote the same files.
    await fs.promises.rename(tmp, dir).catch(() => undefined);
    // Builds of other versions of the console are of no more use (an upgrade leaves one behind).
    for (const other of await fs.promises.readdir(CACHE_DIR)) {
      if (other !== path.basename(dir) && !other.includes('.tmp-')) await fs.promises.rm(path.join(CACHE_DIR, other), { recursive: true, force: true });
    }
  } catch {
    // Not writable (a read-only installation): every process builds for itself.
  } finally {
    await fs.promises.rm(tmp, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** Where this version of the console's build is cached. */
export async function cacheDirectory(): Promise<string> {
  return path.join(CACHE_DIR, await cacheKey());
}

async function cachedBuild(): Promise<ConsoleAssets> {
  const dir = await cacheDirectory();
  const cached = await readCached(dir);
  if (cached) return cached;
  const assets = await buildConsole();
  await writeCached(dir, assets);
  return assets;
}

let built: Promise<ConsoleAssets> | undefined;

/** The console's files, built once per process (or read from the cache). A failed build is tried again on the next ask. */
export function consoleAssets(): Promise<ConsoleAssets> {
  built ??= cachedBuild().catch((err: unknown) => {
    // Tried again after a while, not at every request (each try is a second of CPU).
    setTimeout(() => (built = undefined), 30_000).unref();
    throw err;
  });
  return built;
}
