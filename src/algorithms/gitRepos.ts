import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { AppError } from '../errors.ts';
import type { Principal } from '../auth/principal.ts';
import { isOwner } from '../data/acl.ts';
import type { Algorithm, AlgorithmRegistry } from './registry.ts';
import type { BuildService } from './builds.ts';
import type { AlgorithmFiles } from './files.ts';
import type { HeldSlots } from '../limits/held.ts';

const run = promisify(execFile);
const GIT = '/usr/bin/git';
export const GIT_HTTP_BACKEND = '/usr/lib/git-core/git-http-backend';
const HOOK = fileURLToPath(new URL('./gitHook.mjs', import.meta.url));
/** The branch that is the algorithm's source, as in the original service. */
const BRANCH = 'master';
/**
 * The environment of every git the server runs: no configuration but the repository's own. A
 * global config is read from $HOME (and $XDG_CONFIG_HOME), and a `.gitconfig` there can run
 * commands as the server (core.fsmonitor, core.hooksPath): so no global or system config, and a
 * HOME that cannot hold one (not the temp directory, which other accounts may write to).
 */
const GIT_ENV = { PATH: '/usr/bin:/bin', HOME: '/dev/null', GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };
/** Who the server's own commits (a source uploaded as tar.gz, the template) are by. */
const IDENTITY = { GIT_AUTHOR_NAME: 'algohost', GIT_AUTHOR_EMAIL: 'algohost@localhost', GIT_COMMITTER_NAME: 'algohost', GIT_COMMITTER_EMAIL: 'algohost@localhost' };

export type GitService = 'git-upload-pack' | 'git-receive-pack';

export interface GitRequest {
  method: string;
  /** After `/git/<owner>/<name>.git`: `/info/refs`, `/git-upload-pack` or `/git-receive-pack`. */
  path: string;
  query: string;
  contentType: string | undefined;
  contentEncoding: string | undefined;
  contentLength: string | undefined;
  gitProtocol: string | undefined;
  remoteAddr: string | undefined;
  body: Readable | undefined;
}

export interface GitResponse {
  status: number;
  headers: Record<string, string>;
  body: Readable;
  /** Stops the backend (and a push's hook) when the client goes away before the end. */
  abort(): void;
}

export interface GitOptions {
  /** Largest request body (a push's pack): the source archive limit. */
  maxBodyBytes: number;
  /** Longest one request may take, a push's build included. */
  timeoutMs: number;
  /** A user's git requests under way at once, capped: each runs git (docs/security.md "What one user can hold"). */
  held?: HeldSlots;
}

/** The service a request asks for, or undefined for what smart HTTP does not use. */
function serviceOf(req: GitRequest): GitService | undefined {
  if (req.method === 'GET' && req.path === '/info/refs') {
    const service = new URLSearchParams(req.query).get('service');
    return service === 'git-upload-pack' || service === 'git-receive-pack' ? service : undefined;
  }
  if (req.method === 'POST' && (req.path === '/git-upload-pack' || req.path === '/git-receive-pack')) return req.path.slice(1) as GitService;
  return undefined;
}

/**
 * Every algorithm's source as a git repository, served over git's smart HTTP protocol by git's
 * own http-backend. The repository follows the source: a tar.gz upload (or the template, before
 * any) becomes a commit on master before anyone fetches; a push to master becomes the source
 * through the same extraction as an upload, and is compiled as `POST .../compile` does, its
 * result shown to the pusher. One source of truth: the algorithm's source; git is a way in.
 */
export class GitRepos {
  constructor(
    private readonly registry: AlgorithmRegistry,
    private readonly builds: BuildService,
    private readonly files: AlgorithmFiles,
    private readonly options: GitOptions,
  ) {}

  /** The slots of the users' git requests under way. */
  get held(): HeldSlots | undefined {
    return this.options.held;
  }

  private repoDir(id: number): string {
    return path.join(this.files.algorithmDir(id), 'repo.git');
  }

  async handle(principal: Principal, owner: string, name: string, req: GitRequest): Promise<GitResponse> {
    const service = serviceOf(req);
    if (!service) throw new AppError('route_not_found', `git over HTTP here speaks the smart protocol only (clone, fetch, push): no ${req.method} ${req.path.slice(0, 100)}`);
    let algo: Algorithm;
    if (service === 'git-receive-pack') {
      algo = await this.registry.require(principal, owner, name);
      if (!isOwner(principal, algo.owner)) throw new AppError('forbidden', `only ${algo.owner} can push to algo://${algo.owner}/${algo.name}`);
      algo = await this.registry.manage(principal, owner, name);
    } else {
      algo = await this.registry.require(principal, owner, name);
      // Others read the source only when its owner opened it; say nothing of it otherwise.
      if (!isOwner(principal, algo.owner) && algo.settings.source_visibility !== 'open') {
        throw new AppError('algorithm_not_found', `No such algorithm: algo://${owner}/${name}`);
      }
    }
    // Held from here until its git process ends (or it fails before one starts).
    const release = (await this.options.held?.hold(principal.userId)) ?? (() => undefined);
    try {
      const repo = await this.ensure(algo);
      if (service === 'git-upload-pack') await this.sync(algo, repo);
      return await this.backend(principal, algo, repo, req, release);
    } catch (err) {
      release();
      throw err;
    }
  }

  /** The bare repository, made on first use, with the hook that hands pushes to the server. */
  private async ensure(algo: Algorithm): Promise<string> {
    const repo = this.repoDir(algo.id);
    if (!fs.existsSync(path.join(repo, 'HEAD'))) {
      await fs.promises.mkdir(this.files.algorithmDir(algo.id), { recursive: true });
      const tmp = await this.files.scratch('repo-');
      await git(['init', '--quiet', '--bare', `--initial-branch=${BRANCH}`, tmp]);
      await git(['--git-dir', tmp, 'config', 'receive.denyDeletes', 'true']);
      await git(['--git-dir', tmp, 'config', 'http.receivepack', 'true']);
      try {
        await fs.promises.rename(tmp, repo);
      } catch (err) {
        // Another request made it first.
        await fs.promises.rm(tmp, { recursive: true, force: true });
        if (!fs.existsSync(path.join(repo, 'HEAD'))) throw err;
      }
    }
    // Written each time: a server upgrade moves the hook's code.
    const hook = path.join(repo, 'hooks', 'pre-receive');
    const script = `#!/bin/sh\nexec /usr/bin/node ${JSON.stringify(HOOK)}\n`;
    if (!fs.existsSync(hook) || fs.readFileSync(hook, 'utf8') !== script) {
      await fs.promises.mkdir(path.dirname(hook), { recursive: true });
      await fs.promises.writeFile(`${hook}.tmp`, script, { mode: 0o755 });
      await fs.promises.rename(`${hook}.tmp`, hook);
    }
    return repo;
  }

  /** Makes master's tree the algorithm's current source (or its template), by a commit when they differ. */
  private async sync(first: Algorithm, repo: string): Promise<void> {
    await this.builds.lock.run(first.id, async () => {
      const algo = await this.registry.byId(first.id);
      if (!algo) return;
      const want = algo.source_hash ?? `template:${algo.settings.language}:${algo.name}`;
      // "<source> <commit>": master was that commit when it last matched that source. A push cut
      // short after its source was stored (master not moved) fails the check, and is committed.
      const marker = path.join(repo, 'algohost-source');
      const master = async () => (await git(['--git-dir', repo, 'rev-parse', '--verify', '--quiet', `refs/heads/${BRANCH}`]).catch(() => '')).trim();
      if (fs.existsSync(marker) && fs.readFileSync(marker, 'utf8') === `${want} ${await master()}`) return;
      await this.builds.withSourceTree(algo, async (dir) => {
        const index = path.join(await this.files.scratch('index-'), 'index');
        try {
          const env = { GIT_INDEX_FILE: index };
          await git(['--git-dir', repo, '--work-tree', dir, 'add', '--all', '--force', '.'], env);
          const tree = (await git(['--git-dir', repo, 'write-tree'], env)).trim();
          const parent = await master();
          const parentTree = parent ? (await git(['--git-dir', repo, 'rev-parse', `${parent}^{tree}`])).trim() : '';
          if (tree !== parentTree) {
            const message = algo.source_hash ? `Source uploaded through the API (${algo.source_hash.slice(0, 12)})` : `The ${algo.settings.language} template`;
            const commit = (await git(['--git-dir', repo, 'commit-tree', tree, ...(parent ? ['-p', parent] : []), '-m', message], IDENTITY)).trim();
            await git(['--git-dir', repo, 'update-ref', `refs/heads/${BRANCH}`, commit, parent || '0'.repeat(40)]);
          }
          await fs.promises.writeFile(marker, `${want} ${await master()}`);
        } finally {
          await fs.promises.rm(path.dirname(index), { recursive: true, force: true });
        }
      });
    });
  }

  /** Runs git http-backend as a CGI for one request; a push gets its hook's socket. */
  private async backend(principal: Principal, algo: Algorithm, repo: string, req: GitRequest, release: () => void): Promise<GitResponse> {
    // A private directory for the push's hook socket.
    const sockets = await fs.promises.mkdtemp(path.join(os.tmpdir(), 'algohost-git-'));
    const push = serviceOf(req) === 'git-receive-pack' && req.method === 'POST';
    const hookServer = push ? await this.hookServer(principal, algo, repo, path.join(sockets, 'hook.sock')) : undefined;
    // The hook, and the git it runs, inherit this environment.
    const env: Record<string, string> = {
      ...GIT_ENV,
      GIT_PROJECT_ROOT: path.dirname(repo),
      GIT_HTTP_EXPORT_ALL: '1',
      PATH_INFO: `/${path.basename(repo)}${req.path}`,
      REQUEST_METHOD: req.method,
      QUERY_STRING: req.query,
      REMOTE_USER: principal.username,
      REMOTE_ADDR: req.remoteAddr ?? '127.0.0.1',
      GATEWAY_INTERFACE: 'CGI/1.1',
      ...(req.contentType ? { CONTENT_TYPE: req.contentType } : {}),
      ...(req.contentLength ? { CONTENT_LENGTH: req.contentLength } : {}),
      ...(req.contentEncoding ? { HTTP_CONTENT_ENCODING: req.contentEncoding } : {}),
      ...(req.gitProtocol ? { GIT_PROTOCOL: req.gitProtocol } : {}),
      ...(hookServer ? { ALGOHOST_GIT_HOOK_SOCKET: hookServer.path } : {}),
    };
    const child = spawn(GIT_HTTP_BACKEND, [], { env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr = (stderr + s).slice(-4000)));
    const kill = () => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* gone */
      }
    };
    const timer = setTimeout(kill, this.options.timeoutMs);
    const cleanup = () => {
      clearTimeout(timer);
      release();
      hookServer?.close();
      fs.rm(sockets, { recursive: true, force: true }, () => undefined);
    };
    child.once('close', cleanup);
    child.stdin.on('error', () => undefined); // the backend may answer before reading all
    if (req.body) {
      let seen = 0;
      let ended = false;
      req.body.on('data', (chunk: Buffer) => {
        seen += chunk.length;
        if (seen > this.options.maxBodyBytes) {
          req.body!.destroy();
          kill();
        }
      });
      req.body.once('end', () => (ended = true));
      // A client that goes away mid-request would leave the backend waiting for the rest.
      req.body.once('close', () => {
        if (!ended) kill();
      });
      // ...or went away before git started (while the request waited for the repository's
      // lock): its close has come and gone, and git would wait out the timeout, holding the
      // user's git slot (docs/security.md "What one user can hold").
      if (req.body.destroyed && !req.body.readableEnded) kill();
      req.body.pipe(child.stdin);
    } else {
      child.stdin.end();
    }
    try {
      return { ...(await cgiResponse(child.stdout, () => stderr)), abort: kill };
    } catch (err) {
      kill();
      throw err;
    }
  }

  /** The Unix socket the push's hook talks to: it sends the pushed tree, and hears the build. */
  private async hookServer(principal: Principal, algo: Algorithm, repo: string, socketPath: string): Promise<net.Server & { path: string }> {
    // Half-open: the hook ends its side when the archive is sent, and then hears the build.
    const server = net.createServer({ allowHalfOpen: true }, (socket) => {
      void this.receivePush(principal, algo, repo, socket).catch((err: unknown) => {
        socket.end(`algohost: ${err instanceof AppError ? err.message : 'the server could not take this push; its log has the details'}\nalgohost-exit: 1\n`);
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, resolve);
    });
    return Object.assign(server, { path: socketPath });
  }

  private async receivePush(principal: Principal, algo: Algorithm, repo: string, socket: net.Socket): Promise<void> {
    const say = (line: string) => socket.write(`algohost: ${line}\n`);
    // The header line, then the archive.
    const archive = new PassThrough();
    let header = '';
    let headerDone = false;
    socket.on('data', (chunk: Buffer) => {
      if (headerDone) return void archive.write(chunk);
      const nl = chunk.indexOf(10);
      if (nl < 0) return void (header += chunk.toString('utf8'));
      header += chunk.subarray(0, nl).toString('utf8');
      headerDone = true;
      archive.write(chunk.subarray(nl + 1));
    });
    socket.on('end', () => archive.end());
    socket.on('error', () => archive.destroy());
    // One of the user's compiles first: a push at their cap is refused before its source is stored.
    const compiling = await this.builds.holdCompile(principal);
    try {
      const stored = await this.builds.uploadSource(principal, algo.owner, algo.name, archive);
      const push = JSON.parse(header || '{}') as { new?: string };
      say(`stored ${String(push.new ?? '').slice(0, 12)} as the source of ${algo.owner}/${algo.name} (${stored.files} files)`);
      // The push's commit is master once the hook says yes: no commit of this source is needed
      // when someone fetches (if master never moves, the sync sees that and commits it).
      await fs.promises.writeFile(path.join(repo, 'algohost-source'), `${stored.hash} ${push.new ?? ''}`);
      say('building...');
      const { build } = await this.builds.compile(principal, algo.owner, algo.name, compiling);
      if (build.status === 'succeeded') {
        say(`build ${build.hash} succeeded`);
        say(`call it: algo run ${algo.owner}/${algo.name}/${build.hash} -d 'input'; publish it: algo publish --build latest, or POST /v1/algorithms/${algo.owner}/${algo.name}/versions`);
      } else {
        say(`build ${build.hash} FAILED; its log:`);
        const lines = build.logs.trimEnd().split('\n');
        for (const line of lines.slice(-60)) socket.write(`  ${line}\n`);
        say('the source was stored anyway (as an upload would be): fix it and push again');
      }
      socket.end('algohost-exit: 0\n');
    } finally {
      compiling();
    }
  }
}

async function git(args: string[], env: Record<string, string> = {}): Promise<string> {
  const { stdout } = await run(GIT, args, { env: { ...GIT_ENV, ...env }, maxBuffer: 16 * 1024 * 1024 });
  return stdout;
}

/** Reads a CGI response's header block from `out`, and hands on the rest as the body. */
function cgiResponse(out: Readable, stderr: () => string): Promise<GitResponse> {
  return new Promise((resolve, reject) => {
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const crlf = head.indexOf('\r\n\r\n');
      const end = crlf >= 0 ? crlf : head.indexOf('\n\n');
      if (end < 0) {
        if (head.length > 64 * 1024) fail();
        return;
      }
      out.off('data', onData);
      out.off('end', fail);
      const headers: Record<string, string> = {};
      let status = 200;
      for (const line of head.subarray(0, end).toString('latin1').split(/\r?\n/)) {
        const colon = line.indexOf(':');
        if (colon < 0) continue;
        const key = line.slice(0, colon).trim().toLowerCase();
        const value = line.slice(colon + 1).trim();
        if (key === 'status') status = Number(value.split(' ')[0]) || 500;
        else headers[key] = value;
      }
      const body = new PassThrough();
      body.write(head.subarray(end + (crlf >= 0 ? 4 : 2)));
      out.pipe(body);
      resolve({ status, headers, body, abort: () => undefined });
    };
    const fail = () => {
      out.off('data', onData);
      reject(new Error(`git http-backend gave no response: ${stderr().trim().slice(0, 500)}`));
    };
    out.on('data', onData);
    out.once('end', fail);
  });
}

export const GIT_AVAILABLE = fs.existsSync(GIT) && fs.existsSync(GIT_HTTP_BACKEND);
