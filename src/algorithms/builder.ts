import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { sandboxFailure, spawnSandbox, spawnTool, DEFAULT_LIMITS, type SandboxLimits } from '../runtime/sandbox.ts';
import type { RunnerKind } from '../runtime/contract.ts';
import type { ChildProcess } from 'node:child_process';
import type { Language } from './manifest.ts';
import { fromNpmRegistry, pipIndexOf, type BuildNetwork, type Installer, type InstallerSetup } from './buildNetwork.ts';
import type { FencePolicy } from '../runtime/egressFence.ts';
import type { GvisorOptions } from '../runtime/gvisor.ts';
import { FairSlots } from '../concurrency.ts';

export interface BuildRequest {
  /** Whose build it is: build slots are shared fairly among owners. */
  owner: string;
  /** Algorithm name: the original layout names the entry file after it. */
  name: string;
  language: Language;
  /** The uploaded source (or template), copied into `outDir` by the builder. */
  sourceDir: string;
  /** Empty directory the build is made in. */
  outDir: string;
  /** Called with the whole log so far whenever it grows (at most a few times a second). */
  onLog?: (logSoFar: string) => void;
}

export type BuildResult =
  | { ok: true; runner: RunnerKind; entry: string; logs: string }
  | { ok: false; logs: string };

export interface BuilderOptions {
  /** Run build steps without bubblewrap (only where none works and the operator allowed it). */
  unsandboxed: boolean;
  /** Longest a dependency install may take. */
  installTimeoutMs: number;
  /** The bubblewrap binary (ALGOHOST_BWRAP). */
  bwrapPath?: string | undefined;
  /** Builds under gVisor instead of bubblewrap (ALGOHOST_SANDBOX=gvisor). */
  gvisor?: GvisorOptions | undefined;
  /** Registry, CA and proxy settings of the installers (ALGOHOST_BUILD_*). */
  network?: BuildNetwork;
  /**
   * The egress fence of an install step that may reach `endpoints` (its registries and proxy);
   * undefined: the host's network (ALGOHOST_ALGORITHM_NETWORK=host, or no fence can be made here).
   */
  fence?: (endpoints: string[]) => Promise<FencePolicy | undefined>;
}

const MAX_LOG = 256 * 1024;
/** Build steps get more room than calls (package managers unpack into their caches), within a cgroup. */
const BUILD_LIMITS: SandboxLimits = { ...DEFAULT_LIMITS, heapMb: 1024, tmpBytes: 1024 * 1024 * 1024, maxFileBytes: 1024 * 1024 * 1024, maxOpenFiles: 4096, maxPids: 256 };
/** Builds running at once, server-wide; more wait their turn. */
export const MAX_CONCURRENT_BUILDS = 2;
/** Builds of one owner running at once: a user's burst of compiles waits behind itself, never holds every slot. */
export const MAX_BUILDS_PER_OWNER = 1;
/** npm's entry script, wherever the system's npm lives under /usr (the sandbox sees /usr only). */
function npmCli(): string | undefined {
  for (const candidate of ['/usr/bin/npm', '/usr/lib/node_modules/npm/bin/npm-cli.js', '/usr/share/nodejs/npm/bin/npm-cli.js']) {
    try {
      const real = fs.realpathSync(candidate);
      if (real.startsWith('/usr/')) return real;
    } catch {
      /* not there */
    }
  }
  return undefined;
}
const NPM_CLI = npmCli();

/** The esbuild executable (a static binary): run inside the sandbox for TypeScript. */
function esbuildBinary(): string | undefined {
  const require = createRequire(import.meta.url);
  const candidates = [`@esbuild/${process.platform}-${process.arch}/bin/esbuild`, 'esbuild/bin/esbuild'];
  for (const c of candidates) {
    try {
      const file = require.resolve(c);
      const head = Buffer.alloc(4);
      const fd = fs.openSync(file, 'r');
      fs.readSync(fd, head, 0, 4, 0);
      fs.closeSync(fd);
      if (head.equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))) return file; // ELF, not a JS shim
    } catch {
      /* try the next */
    }
  }
  return undefined;
}

/** Entry files tried in order, per language (the original layout first). */
function entryCandidates(language: Language, name: string): string[] {
  switch (language) {
    case 'python3':
      return [`src/${name}.py`, 'src/main.py'];
    case 'javascript':
      return [`src/${name}.js`, `src/${name}.mjs`, `src/${name}.cjs`, 'src/index.js', 'src/index.mjs', 'src/index.cjs'];
    case 'typescript':
      return ['src/index.ts', 'src/index.mts', `src/${name}.ts`, `src/${name}.mts`];
  }
}

/** How often a growing build log is reported while the build runs. */
const REPORT_MS = 250;

/** Build logs: what each step said, capped (the head and the tail survive). */
class Log {
  private text = '';
  private dropped = 0;
  private lastReport = 0;
  private pending: NodeJS.Timeout | undefined;

  /** `onChange` hears the log as it grows, throttled: a build may print thousands of lines. */
  constructor(private readonly onChange?: (text: string) => void) {}

  line(s: string): void {
    this.add(`${s}\n`);
  }
  add(s: string): void {
    if (this.text.length + s.length <= MAX_LOG) {
      this.text += s;
    } else {
      this.dropped += s.length;
      this.tail = (this.tail + s).slice(-MAX_LOG / 2);
    }
    this.changed();
  }
  private changed(): void {
    if (!this.onChange || this.pending) return;
    const wait = Math.max(0, this.lastReport + REPORT_MS - Date.now());
    this.pending = setTimeout(() => {
      this.pending = undefined;
      this.lastReport = Date.now();
      this.onChange?.(this.toString());
    }, wait);
  }
  /** Stops reporting (the final log is recorded by whoever asked for the build). */
  close(): void {
    clearTimeout(this.pending);
    this.pending = undefined;
  }
  private tail = '';
  toString(): string {
    return this.dropped === 0 ? this.text : `${this.text.slice(0, MAX_LOG / 2)}\n[... ${this.dropped} characters of output left out ...]\n${this.tail}`;
  }
}

/** Waits for a build step, feeding its output to the log; kills its whole sandbox on timeout. */
function finish(child: ChildProcess, log: Log, timeoutMs: number): Promise<{ code: number | null; timedOut: boolean }> {
  return new Promise((resolve) => {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* gone */
      }
    }, timeoutMs);
    child.stdout?.on('data', (c: Buffer) => log.add(c.toString('utf8')));
    child.stderr?.on('data', (c: Buffer) => log.add(c.toString('utf8')));
    child.once('error', (err) => log.line(`could not start: ${err.message}`));
    child.once('close', (code) => {
      clearTimeout(timer);
      const failure = sandboxFailure(child);
      if (failure) log.line(failure);
      resolve({ code, timedOut });
    });
  });
}

function hasLines(file: string): boolean {
  try {
    return fs
      .readFileSync(file, 'utf8')
      .split('\n')
      .some((l) => l.trim() !== '' && !l.trim().startsWith('#'));
  } catch {
    return false;
  }
}

/** 'none', 'local' (paths, URLs, git only) or 'registry' (some come from the npm registry). */
function npmDependencies(file: string): 'none' | 'local' | 'registry' {
  try {
    const pkg = JSON.parse(fs.readFileSync(file, 'utf8')) as { dependencies?: Record<string, string> };
    if (typeof pkg.dependencies !== 'object' || pkg.dependencies === null || Object.keys(pkg.dependencies).length === 0) return 'none';
    return Object.values(pkg.dependencies).some((spec) => typeof spec !== 'string' || fromNpmRegistry(spec)) ? 'registry' : 'local';
  } catch {
    return 'registry'; // let npm say what is wrong with it
  }
}

/**
 * Turns a source tree into a runnable build: copies it, installs dependencies (npm for
 * package.json, pip for requirements.txt), bundles TypeScript with esbuild, and checks that
 * the entry file loads and exports apply. Every step that reads the user's files runs in the
 * sandbox (a bundler on the host would follow `import "/etc/shadow"`); installers get the
 * network, the entry check does not.
 */
export class Builder {
  private readonly esbuild = esbuildBinary();
  /** The build slots, shared fairly among owners (a build may run 10 minutes and be started at will). */
  readonly slots = new FairSlots(MAX_CONCURRENT_BUILDS, MAX_BUILDS_PER_OWNER);

  constructor(private readonly options: BuilderOptions) {}

  /**
   * Builds in one of the server's slots: a burst of compiles queues instead of exhausting the
   * host, and one owner's builds run one at a time, so the others' are not stuck behind them.
   */
  async build(req: BuildRequest): Promise<BuildResult> {
    const release = await this.slots.acquire(req.owner);
    try {
      return await this.buildNow(req);
    } finally {
      release();
    }
  }

  private async buildNow(req: BuildRequest): Promise<BuildResult> {
    const log = new Log(req.onLog);
    try {
      return await this.buildSteps(req, log);
    } finally {
      log.close();
    }
  }

  private async buildSteps(req: BuildRequest, log: Log): Promise<BuildResult> {
    const started = Date.now();
    const fail = (why: string): BuildResult => {
      log.line(`build failed: ${why}`);
      return { ok: false, logs: log.toString() };
    };
    log.line(`building ${req.name} (${req.language})${this.options.unsandboxed ? ' WITHOUT a sandbox' : ''}`);
    await fs.promises.cp(req.sourceDir, req.outDir, { recursive: true, verbatimSymlinks: true, errorOnExist: true, force: false });
    const out = req.outDir;

    const candidates = entryCandidates(req.language, req.name);
    const source = candidates.find((c) => {
      const st = fs.lstatSync(path.join(out, c), { throwIfNoEntry: false });
      return st?.isFile() === true;
    });
    if (!source) return fail(`no entry point; expected one of ${candidates.join(', ')}`);
    log.line(`entry point: ${source}`);
    await fs.promises.mkdir(path.join(out, '.algohost'), { recursive: true });

    const packageJson = path.join(out, 'package.json');
    const npmDeps = req.language !== 'python3' && fs.existsSync(packageJson) ? npmDependencies(packageJson) : 'none';
    if (npmDeps !== 'none') {
      const npm = NPM_CLI;
      if (!npm) return fail('package.json lists dependencies, but npm is not installed on this server (under /usr)');
      const setup = await this.options.network?.setup('npm', !this.options.unsandboxed);
      if (npmDeps === 'registry' && this.options.network) {
        const registry = await this.options.network.registry('npm');
        log.line(`checking that the npm registry ${registry} answers`);
        const problem = await this.options.network.check('npm', registry);
        if (problem) return fail(problem);
      }
      log.line('$ npm install --omit=dev');
      const r = await this.tool(out, (algo) => ['/usr/bin/node', npm, 'install', '--omit=dev', '--no-audit', '--no-fund', '--no-update-notifier', '--loglevel=warn', '--prefix', algo], 'npm', log, {}, setup);
      if (r) return fail(`npm install ${r}`);
    }
    const requirements = path.join(out, 'requirements.txt');
    if (req.language === 'python3' && hasLines(requirements)) {
      const setup = await this.options.network?.setup('pip', !this.options.unsandboxed);
      const named = pipIndexOf(fs.readFileSync(requirements, 'utf8'));
      if (named !== undefined && this.options.network) {
        const index = named || (await this.options.network.registry('pip'));
        log.line(`checking that the Python package index ${index} answers`);
        const problem = await this.options.network.check('pip', index, named !== '');
        if (problem) return fail(problem);
      }
      log.line('$ pip install --target .algohost/python -r requirements.txt');
      const r = await this.tool(
        out,
        (algo) => ['/usr/bin/python3', '-m', 'pip', 'install', '--no-cache-dir', '--disable-pip-version-check', '--no-input', '--retries', '1', '--timeout', '15', '--target', `${algo}/.algohost/python`, '-r', `${algo}/requirements.txt`],
        'pip',
        log,
        {},
        setup,
      );
      if (r) return fail(`pip install ${r} (is a package index reachable from this server? see ALGOHOST_BUILD_PIP_INDEX_URL in docs/configuration.md)`);
    }

    let entry = source;
    if (req.language === 'typescript') {
      if (!this.esbuild) return fail('esbuild is not installed on this server (npm install in the server directory)');
      log.line('$ esbuild --bundle (TypeScript to JavaScript)');
      const bin = this.esbuild;
      const r = await this.tool(
        out,
        (algo) => [algo === '/algo' ? '/tools/esbuild' : bin, `${algo}/${source}`, '--bundle', '--platform=node', '--format=esm', '--target=node20', '--packages=external', '--sourcemap=inline', '--log-level=warning', `--outfile=${algo}/.algohost/entry.mjs`],
        undefined,
        log,
        { [bin]: '/tools/esbuild' },
      );
      if (r) return fail(`TypeScript did not compile: esbuild ${r}`);
      entry = '.algohost/entry.mjs';
    }

    const runner: RunnerKind = req.language === 'python3' ? 'python' : 'node';
    log.line(`checking that ${source} loads and exports apply`);
    const check = await finish(spawnSandbox({ runner, algoDir: out, entry, network: false, limits: DEFAULT_LIMITS, unsandboxed: this.options.unsandboxed, bwrap: this.options.bwrapPath, gvisor: this.options.gvisor, check: true }), log, 60_000);
    if (check.timedOut) return fail(`loading ${source} took longer than 60 s`);
    if (check.code !== 0) return fail(`${source} does not load (see above)`);
    log.line(`build succeeded in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return { ok: true, runner, entry, logs: log.toString() };
  }

  /** Runs one build step; undefined when it succeeded, else what went wrong. `installer`: it fetches packages (the network, fenced to its registries). */
  private async tool(dir: string, argv: (algo: string) => string[], installer: Installer | undefined, log: Log, binds: Record<string, string> = {}, setup?: InstallerSetup): Promise<string | undefined> {
    const network = installer !== undefined;
    const endpoints = installer && this.options.network ? await this.options.network.endpoints(installer) : [];
    const fence = network ? await this.options.fence?.(endpoints) : undefined;
    const child = spawnTool({ algoDir: dir, argv, network, fence, limits: BUILD_LIMITS, unsandboxed: this.options.unsandboxed, binds: { ...binds, ...setup?.binds }, env: setup?.env, bwrap: this.options.bwrapPath, gvisor: this.options.gvisor });
    const r = await finish(child, log, this.options.installTimeoutMs);
    if (r.timedOut) return `took longer than ${Math.round(this.options.installTimeoutMs / 1000)} s`;
    return r.code === 0 ? undefined : `exited with code ${r.code}`;
  }
}
