import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import tls from 'node:tls';
import type { Duplex } from 'node:stream';
import { ADDRESS_REFUSED, type AddressRule } from '../addressRule.ts';
import type { BuildNetworkConfig } from '../config.ts';
import { AppError } from '../errors.ts';

/** How long a registry may take to answer the check before a build: it says so "within seconds". */
const PROBE_MS = 5_000;
/** Where a sandboxed build step finds the CA file, .npmrc and pip.conf the operator gives. */
const SETTINGS_MOUNT = '/etc/algohost';

const TLS_CODES = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_UNTRUSTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

export type Installer = 'npm' | 'pip';

/** What a build step needs: its environment and the host files it reads (same path inside). */
export interface InstallerSetup {
  env: Record<string, string>;
  binds: Record<string, string>;
}

interface Prepared {
  ca: Buffer | undefined;
  caFile: string | undefined;
  npmrc: string | undefined;
  pipConf: string | undefined;
  npmRegistry: string;
  pipIndex: string;
}

/** npmrc keys that carry credentials (also under a `//host/:` prefix). */
const NPM_SECRET = /(^|:)(_auth|_authToken|_password|username|password|email|certfile|keyfile)\s*=/i;

/**
 * The registry settings of builds (ALGOHOST_BUILD_*), made into files under the home once
 * (a CA bundle; the npmrc and pip.conf, the host's with their credentials left out), the
 * installers' environment, and a check that a registry answers before an install waits on it.
 */
export class BuildNetwork {
  private prepared: Promise<Prepared> | undefined;

  constructor(
    private readonly config: BuildNetworkConfig,
    /** Where the generated files go (the home's; mode 0700). */
    private readonly dir: string,
    /**
     * The address rule an index a source names for itself is held to before the server checks
     * it answers (docs/security.md, "One address rule"); undefined with ALGOHOST_CONNECTOR_NETWORK=any.
     * The operator's own registries and proxies are not: they are the operator's choice.
     */
    private readonly addressRule?: AddressRule,
  ) {}

  private prepare(): Promise<Prepared> {
    this.prepared ??= (async () => {
      await fs.promises.mkdir(this.dir, { recursive: true, mode: 0o700 });
      const write = async (name: string, content: string | Buffer) => {
        const file = path.join(this.dir, name);
        await fs.promises.writeFile(file, content, { mode: 0o600 });
        return file;
      };
      const pems = await Promise.all(this.config.caFiles.map((f) => fs.promises.readFile(f)));
      const ca = pems.length > 0 ? Buffer.concat(pems.flatMap((p) => [p, Buffer.from('\n')])) : undefined;
      const caFile = ca ? await write('ca.pem', ca) : undefined;
      let npmrc: string | undefined;
      if (this.config.npmrc) {
        const text = await fs.promises.readFile(this.config.npmrc.file, 'utf8');
        npmrc = await write('npmrc', this.config.npmrc.sanitize ? text.split('\n').filter((l) => !NPM_SECRET.test(l.trim())).join('\n') : text);
      }
      let pipConf: string | undefined;
      if (this.config.pipConf) {
        const text = await fs.promises.readFile(this.config.pipConf.file, 'utf8');
        pipConf = await write('pip.conf', this.config.pipConf.sanitize ? text.replace(/([a-z][a-z0-9+.-]*:\/\/)[^\s/@]+@/gi, '$1') : text);
      }
      const npmRegistry = this.config.npmRegistry ?? (npmrc && /^\s*registry\s*=\s*(\S+)/m.exec(await fs.promises.readFile(npmrc, 'utf8'))?.[1]) ?? 'https://registry.npmjs.org/';
      const pipIndex = this.config.pipIndexUrl ?? (pipConf && /^\s*index[-_]url\s*=\s*(\S+)/m.exec(await fs.promises.readFile(pipConf, 'utf8'))?.[1]) ?? 'https://pypi.org/simple/';
      return { ca, caFile, npmrc, pipConf, npmRegistry, pipIndex };
    })();
    return this.prepared;
  }

  /**
   * The environment and mounts of one installer. In a sandbox (`sandboxed`) each file is bound
   * at `/etc/algohost/<name>` and named so in the environment: its path in the server's home
   * says where the home is, which a build's scripts have no business knowing (docs/security.md).
   */
  async setup(installer: Installer, sandboxed = true): Promise<InstallerSetup> {
    const p = await this.prepare();
    const c = this.config;
    const env: Record<string, string> = {};
    const binds: Record<string, string> = {};
    const mount = (file: string | undefined) => {
      if (!file) return undefined;
      const at = sandboxed ? `${SETTINGS_MOUNT}/${path.basename(file)}` : file;
      binds[file] = at;
      return at;
    };
    const proxies: Array<[string, string | undefined]> = [
      ['HTTP_PROXY', c.httpProxy],
      ['HTTPS_PROXY', c.httpsProxy],
      ['NO_PROXY', c.noProxy],
    ];
    for (const [k, v] of proxies) {
      if (v === undefined) continue;
      env[k] = v;
      env[k.toLowerCase()] = v;
    }
    const caFile = mount(p.caFile);
    if (installer === 'npm') {
      if (caFile) Object.assign(env, { NPM_CONFIG_CAFILE: caFile, NODE_EXTRA_CA_CERTS: caFile });
      const npmrc = mount(p.npmrc);
      if (npmrc) env.NPM_CONFIG_USERCONFIG = npmrc;
      if (c.npmRegistry) env.NPM_CONFIG_REGISTRY = c.npmRegistry;
      if (c.httpProxy) env.NPM_CONFIG_PROXY = c.httpProxy;
      if (c.httpsProxy) env.NPM_CONFIG_HTTPS_PROXY = c.httpsProxy;
      if (c.noProxy !== undefined) env.NPM_CONFIG_NOPROXY = c.noProxy;
      // A registry that dies mid-install fails the build in seconds, not after minutes of retries.
      Object.assign(env, { NPM_CONFIG_FETCH_RETRIES: '1', NPM_CONFIG_FETCH_RETRY_MINTIMEOUT: '1000', NPM_CONFIG_FETCH_RETRY_MAXTIMEOUT: '5000', NPM_CONFIG_FETCH_TIMEOUT: '60000' });
    } else {
      if (caFile) Object.assign(env, { PIP_CERT: caFile, SSL_CERT_FILE: caFile, REQUESTS_CA_BUNDLE: caFile });
      const conf = mount(p.pipConf);
      if (conf) env.PIP_CONFIG_FILE = conf;
      if (c.pipIndexUrl) env.PIP_INDEX_URL = c.pipIndexUrl;
    }
    return { env, binds };
  }

  /**
   * What an installer's build step may reach behind the egress fence: its registry (and, for
   * the default index, pypi.org's file host), and the proxies. A registry a source names for
   * itself (`--index-url` in requirements.txt) is not among them: builds reach only what the
   * operator configured (and ALGOHOST_ALGORITHM_EGRESS_ALLOW).
   */
  async endpoints(installer: Installer): Promise<string[]> {
    const registry = await this.registry(installer);
    const extra = installer === 'pip' && /^https:\/\/pypi\.org\//.test(registry) ? ['https://files.pythonhosted.org/'] : [];
    return [registry, ...extra, ...[this.config.httpProxy, this.config.httpsProxy].filter((p): p is string => p !== undefined && p !== '')];
  }

  /** The registry an installer uses unless the source names its own. */
  async registry(installer: Installer): Promise<string> {
    const p = await this.prepare();
    return installer === 'npm' ? p.npmRegistry : p.pipIndex;
  }

  /**
   * Whether `url` answers (any HTTP status will do), through the proxy and with the CAs builds
   * use; a sentence naming the setting to change when it does not. `fromSource`: the source
   * named it (requirements.txt's --index-url), so the server connects there on its author's
   * behalf, and the address rule decides first.
   */
  async check(installer: Installer, url: string, fromSource = false): Promise<string | undefined> {
    const p = await this.prepare();
    const what = installer === 'npm' ? 'the npm registry' : 'the Python package index';
    const registrySetting = installer === 'npm' ? 'ALGOHOST_BUILD_NPM_REGISTRY' : 'ALGOHOST_BUILD_PIP_INDEX_URL';
    let target: URL;
    try {
      target = new URL(url);
    } catch {
      return `${what} address "${url}" is not a URL: check ${registrySetting}`;
    }
    if (target.protocol !== 'http:' && target.protocol !== 'https:') return undefined; // file: and the like: nothing to reach
    const rule = fromSource ? this.addressRule : undefined;
    try {
      await rule?.checkEndpoint(url, `${what} the source names`);
    } catch (err) {
      if (err instanceof AppError) return err.message;
      throw err;
    }
    const proxy = proxyFor(target, target.protocol === 'https:' ? this.config.httpsProxy : this.config.httpProxy, this.config.noProxy);
    const proxySetting = target.protocol === 'https:' ? 'ALGOHOST_BUILD_HTTPS_PROXY' : 'ALGOHOST_BUILD_HTTP_PROXY';
    try {
      await answers(target, proxy, p.ca, rule?.lookup);
      return undefined;
    } catch (err) {
      const e = err as NodeJS.ErrnoException & { viaProxy?: boolean };
      const code = e.code ?? e.message;
      // A name that resolved to a refused address when connecting: the rule's words, not a socket's.
      if (code === ADDRESS_REFUSED) return `${what} the source names was ${e.message}`;
      const doc = '(docs/configuration.md)';
      if (e.viaProxy) return `cannot reach the proxy ${proxy} (${code}) to get to ${what} ${url}: check ${proxySetting} ${doc}`;
      if (TLS_CODES.has(code)) {
        const ca = this.config.caFileSetting ? `ALGOHOST_BUILD_CA_FILE (now ${this.config.caFileSetting}) does not hold the CA that signed it` : 'set ALGOHOST_BUILD_CA_FILE to the PEM file of the CA that signs it (a TLS-intercepting proxy\'s, or a private registry\'s)';
        return `${what} ${url} presents a certificate this server does not trust (${code}): ${ca} ${doc}`;
      }
      const fix = proxy ? `check ${registrySetting} and the proxy ${proxySetting}` : `set ${registrySetting} to one this server can reach, or ${proxySetting} to the proxy to go through`;
      return `cannot reach ${what} ${url} (${code}) within ${PROBE_MS / 1000} s: ${fix} ${doc}`;
    }
  }
}

/** The proxy for `url`, unless NO_PROXY names its host (`*`, a name, or a domain suffix). */
function proxyFor(url: URL, proxy: string | undefined, noProxy: string | undefined): string | undefined {
  if (!proxy) return undefined;
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  for (const raw of (noProxy ?? '').split(',')) {
    const entry = raw.trim().toLowerCase().replace(/:\d+$/, '');
    if (entry === '') continue;
    if (entry === '*' || host === entry.replace(/^\./, '') || host.endsWith(entry.startsWith('.') ? entry : `.${entry}`)) return undefined;
  }
  return proxy;
}

/** Resolves once `target` answers an HTTP request (any status); rejects with the network or TLS error. */
function answers(target: URL, proxy: string | undefined, ca: Buffer | undefined, lookup: AddressRule['lookup'] | undefined): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => fail(Object.assign(new Error('ETIMEDOUT'), { code: 'ETIMEDOUT' })), PROBE_MS);
    const sockets: Duplex[] = [];
    let settled = false;
    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      for (const s of sockets) s.destroy();
      reject(err);
    };
    const ok = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      for (const s of sockets) s.destroy();
      resolve();
    };
    const get = (options: https.RequestOptions, secure: boolean) => {
      const req = (secure ? https : http).request({ ...options, method: 'GET', agent: false, headers: { ...options.headers, 'user-agent': 'algohost-build-check' } }, (res) => {
        res.resume();
        ok();
      });
      req.on('socket', (s) => sockets.push(s));
      req.on('error', fail);
      req.end();
    };
    const port = Number(target.port) || (target.protocol === 'https:' ? 443 : 80);
    if (!proxy) {
      get({ host: target.hostname.replace(/^\[|\]$/g, ''), port, path: target.pathname + target.search, servername: target.hostname, ...(ca ? { ca } : {}), ...(lookup ? { lookup } : {}) }, target.protocol === 'https:');
      return;
    }
    const via = new URL(proxy);
    const viaProxy = (err: Error) => fail(Object.assign(err, { viaProxy: true }));
    if (target.protocol === 'http:') {
      // A plain HTTP proxy takes the whole URL as the request target.
      const req = http.request({ host: via.hostname, port: Number(via.port) || 80, method: 'GET', path: target.href, agent: false }, (res) => {
        res.resume();
        ok();
      });
      req.on('socket', (s) => sockets.push(s));
      req.on('error', viaProxy);
      req.end();
      return;
    }
    const connect = http.request({ host: via.hostname, port: Number(via.port) || 80, method: 'CONNECT', path: `${target.hostname}:${port}`, agent: false });
    connect.on('socket', (s) => sockets.push(s));
    connect.on('error', viaProxy);
    connect.on('connect', (res, socket) => {
      if (res.statusCode !== 200) return viaProxy(Object.assign(new Error(`the proxy answered CONNECT with ${res.statusCode}`), { code: `HTTP ${res.statusCode}` }));
      const secure = tls.connect({ socket, servername: target.hostname, ...(ca ? { ca } : {}) });
      sockets.push(secure);
      secure.on('error', fail);
      secure.on('secureConnect', () => {
        secure.end(`GET ${target.pathname}${target.search} HTTP/1.1\r\nHost: ${target.host}\r\nUser-Agent: algohost-build-check\r\nConnection: close\r\n\r\n`);
        secure.once('data', ok);
        secure.once('end', ok);
      });
    });
    connect.end();
  });
}

/** Whether a package.json dependency spec is fetched from a registry (not a path, URL or git repository). */
export function fromNpmRegistry(spec: string): boolean {
  const s = spec.trim();
  if (/^(file:|link:|git\+|git:|github:|gitlab:|bitbucket:|gist:|https?:|\.{0,2}\/|~)/i.test(s)) return false;
  if (/^[^@\s/][^\s/]*\/[^\s/]+$/.test(s) && !s.startsWith('npm:')) return false; // user/repo: GitHub
  return true;
}

/**
 * Which index a requirements file installs from: `undefined` when it needs none (only paths
 * and URLs, or --no-index), else the URL its -i/--index-url names, or '' for the default.
 */
export function pipIndexOf(requirements: string): string | undefined {
  let index = '';
  let needsIndex = false;
  for (const raw of requirements.split('\n')) {
    const line = raw.replace(/(^|\s)#.*$/, '').trim();
    if (line === '') continue;
    if (/^--no-index\b/.test(line)) return undefined;
    const named = /^(?:-i|--index-url)(?:\s+|=)(\S+)/.exec(line);
    if (named) {
      index = named[1]!;
      continue;
    }
    if (line.startsWith('-')) continue; // other options (-r, -c, --extra-index-url...)
    if (/^(\.{0,2}\/|file:|git\+|[a-z]+:\/\/)/i.test(line)) continue;
    needsIndex = true;
  }
  return needsIndex ? index : undefined;
}
