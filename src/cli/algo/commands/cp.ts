/**
 * `algo cp`: files and directory trees between local paths and data URIs, and between data
 * URIs. Everything is checked (and directories walked) before the first byte moves, so a
 * mistyped source fails the command without a half-done copy; then the directories are
 * created and the files copied, several at a time, under one progress bar.
 */
import fs from 'node:fs';
import path from 'node:path';
import { ApiError, type AlgohostClient } from '../../../../client/src/index.ts';
import { CliError, UsageError, type Command, type Context } from '../context.ts';
import { size } from '../progress.ts';
import { baseName, dataUri, describe, flags, isDataUri, isFatal, isNotFound, parentUri, plain, remoteKind, type Remote } from './data-common.ts';
import { eachLimit } from '../../../concurrency.ts';
import { copyFile, partials, show, type Job, type Loc } from './transfer.ts';

const DEFAULT_CONCURRENCY = 4;

interface Plan {
  /** Directories to create, each after its parent. */
  dirs: Loc[];
  jobs: Job[];
}

function loc(arg: string): Loc {
  return isDataUri(arg) ? { kind: 'remote', uri: dataUri(arg) } : { kind: 'local', path: arg };
}

function child(parent: Loc, name: string): Loc {
  if (name === '') return parent;
  if (parent.kind === 'local') return { kind: 'local', path: path.join(parent.path, name) };
  const p = parent.uri.path === '' ? name : `${parent.uri.path}/${name}`;
  return { kind: 'remote', uri: { connector: parent.uri.connector, path: p, uri: `${parent.uri.connector}://${p}` } };
}

const base = (l: Loc): string => (l.kind === 'local' ? path.basename(path.resolve(l.path)) : baseName(l.uri));

/** A name that is one path segment and nothing more, wherever it is written. */
const safeName = (name: string) => name !== '' && name !== '.' && name !== '..' && !/[/\0]/.test(name);

async function kindOf(client: AlgohostClient, l: Loc): Promise<Remote> {
  if (l.kind === 'remote') return remoteKind(client, l.uri.uri);
  try {
    const st = await fs.promises.stat(l.path);
    if (st.isDirectory()) return { type: 'dir' };
    if (st.isFile()) return { type: 'file', size: st.size, lastModified: st.mtime };
    throw new CliError(`${l.path} is not a regular file`);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return { type: 'missing' };
    throw err;
  }
}

/** Adds a directory tree's directories and files to the plan (entries that cannot be copied are noted and left out). */
async function walk(ctx: Context, client: AlgohostClient, from: Loc, to: Loc, plan: Plan): Promise<void> {
  plan.dirs.push(to);
  const subdirs: string[] = [];
  const skip = (what: string, why: string) => ctx.note(`algo cp: skipping ${what}: ${why}`);
  if (from.kind === 'remote') {
    for await (const e of client.dir(from.uri.uri).list()) {
      if (!safeName(e.name)) skip(e.uri, 'its name cannot be a file name');
      else if (e.type === 'dir') subdirs.push(e.name);
      else plan.jobs.push({ from: child(from, e.name), to: child(to, e.name), size: e.size });
    }
  } else {
    const entries = await fs.promises.readdir(from.path, { withFileTypes: true });
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      const src = child(from, e.name);
      const where = show(src);
      if (e.isDirectory()) subdirs.push(e.name);
      else if (e.isFile() || e.isSymbolicLink()) {
        // A link to a file is copied as the file; a link to a directory is not followed (no loops).
        const st = await fs.promises.stat(where).catch(() => undefined);
        if (!st) skip(where, 'a broken symbolic link');
        else if (st.isFile()) plan.jobs.push({ from: src, to: child(to, e.name), size: st.size });
        else skip(where, st.isDirectory() ? 'a symbolic link to a directory' : 'not a regular file');
      } else skip(where, 'not a regular file');
    }
  }
  for (const name of subdirs) await walk(ctx, client, child(from, name), child(to, name), plan);
}

async function makePlan(ctx: Context, client: AlgohostClient, sources: Loc[], dest: Loc, destIsDir: boolean, recursive: boolean, concurrency: number): Promise<Plan> {
  const destKind = await kindOf(client, dest);
  const destName = show(dest);
  const kinds: Remote[] = new Array(sources.length);
  await eachLimit(sources.map((s, i) => [s, i] as const), concurrency, async ([s, i]) => {
    kinds[i] = await kindOf(client, s);
  });
  // Several sources, or a file to a name ending in "/", go into a directory that must exist (a
  // single directory copied to "new/" creates it, as cp -r does).
  if ((sources.length > 1 || (destIsDir && kinds.some((k) => k.type !== 'dir'))) && destKind.type !== 'dir') {
    throw new CliError(destKind.type === 'missing' ? `no such directory ${destName}` : `${destName} is not a directory`);
  }
  const problems: string[] = [];
  sources.forEach((s, i) => {
    const k = kinds[i]!;
    if (k.type === 'missing') problems.push(`no such file or directory ${show(s)}`);
    else if (k.type === 'dir' && !recursive) problems.push(`${show(s)} is a directory: use -r`);
    else if (k.type === 'dir' && destKind.type === 'file') problems.push(`cannot copy directory ${show(s)} onto file ${destName}`);
  });
  for (const p of problems.slice(0, -1)) ctx.note(`algo cp: ${p}`);
  if (problems.length > 0) throw new CliError(problems.at(-1)!);

  const plan: Plan = { dirs: [], jobs: [] };
  for (const [i, from] of sources.entries()) {
    const k = kinds[i]!;
    const to = destKind.type === 'dir' ? child(dest, base(from)) : dest;
    if (from.kind === 'remote' && to.kind === 'remote' && (to.uri.uri === from.uri.uri || (k.type === 'dir' && to.uri.uri.startsWith(`${from.uri.uri}/`)))) {
      throw new CliError(k.type === 'dir' ? `cannot copy ${from.uri.uri} into itself` : `${from.uri.uri} and ${to.uri.uri} are the same file`);
    }
    if (k.type === 'file') plan.jobs.push({ from, to, size: k.size });
    else await walk(ctx, client, from, to, plan);
  }
  return plan;
}

/** Creates the plan's directories, parents first; one that exists already is fine. */
async function makeDirs(client: AlgohostClient, dirs: Loc[]): Promise<void> {
  for (const d of dirs) {
    if (d.kind === 'local') {
      try {
        await fs.promises.mkdir(d.path);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') throw new CliError(`no such directory ${path.dirname(d.path)}`);
        if (code !== 'EEXIST') throw err;
        if (!(await fs.promises.stat(d.path)).isDirectory()) throw new CliError(`${d.path} exists and is not a directory`);
      }
      continue;
    }
    try {
      await client.dir(d.uri.uri).create();
    } catch (err) {
      if (err instanceof ApiError && err.code === 'already_exists') continue;
      if (isNotFound(err)) throw new CliError(`no such directory ${parentUri(d.uri)}`);
      if (err instanceof ApiError && err.code === 'type_conflict') throw new CliError(`${d.uri.uri} exists and is not a directory`);
      throw plain(err);
    }
  }
}

function count(n: number, what: 'file' | 'directory'): string {
  return n === 1 ? `1 ${what}` : `${n} ${what === 'file' ? 'files' : 'directories'}`;
}

export const cp: Command = {
  summary: 'copy files and directories (-r) to, from and between data URIs',
  usage: `usage: algo cp [-r] [-c N] <source>... <dest>

Copies local files to data URIs, data URIs to local files, or data URIs to data URIs (streamed
from one to the other, not through the disk). Anything with a scheme (data://,
objstore[+label]://, filehost[+label]://, s3://, dropbox://) is a data URI; anything else is a
local path. Into an existing directory, each source goes under its own name (as with cp(1));
several sources need an existing directory. A download is written to a temporary file and
renamed into place once complete. Sources are all checked before anything is copied.

  -r, --recursive         copy directories with everything in them
  -c, --concurrency N     files copied at the same time (default ${DEFAULT_CONCURRENCY})

A progress bar (rate, ETA) is shown on a terminal; none when stderr is not one, nor with --json,
which prints {files: [{from, to, size}], bytes, directories, seconds}.`,
  async run(ctx, args) {
    const { values, positionals } = flags(args, {
      recursive: { type: 'boolean', short: 'r' },
      concurrency: { type: 'string', short: 'c' },
    });
    if (positionals.length < 2) throw new UsageError('needs a source and a destination');
    const concurrency = values.concurrency === undefined ? DEFAULT_CONCURRENCY : Number(values.concurrency);
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64) throw new UsageError(`-c wants a whole number from 1 to 64, got "${values.concurrency}"`);
    const destArg = positionals.at(-1)!;
    const sources = positionals.slice(0, -1).map(loc);
    const dest = loc(destArg);
    if (dest.kind === 'local' && sources.every((s) => s.kind === 'local')) {
      throw new UsageError('neither side is a data URI: one of source and destination must be data://, objstore://, filehost://...');
    }
    const client = ctx.client();
    const started = Date.now();
    const plan = await makePlan(ctx, client, sources, dest, destArg.endsWith('/'), values.recursive === true, concurrency);
    await makeDirs(client, plan.dirs);

    const { jobs } = plan;
    const total = jobs.reduce((sum, j) => sum + j.size, 0);
    const many = jobs.length !== 1;
    const bar = ctx.progress(many ? `0/${count(jobs.length, 'file')}` : base(jobs[0]!.from), total);
    const stop = new AbortController();
    const failures: { job: Job; err: unknown }[] = [];
    let fatal: unknown;
    let done = 0;
    // Ctrl-C: no partial downloads left behind.
    const interrupted = () => {
      for (const p of partials) fs.rmSync(p, { force: true });
      bar.done();
      process.exit(130);
    };
    process.once('SIGINT', interrupted);
    try {
      await eachLimit(jobs, concurrency, async (job, signal) => {
        try {
          await copyFile(client, job, (n) => bar.add(n), signal);
          done++;
          if (many) bar.label(`${done}/${count(jobs.length, 'file')}`);
        } catch (caught) {
          const err = plain(caught);
          if (stop.signal.aborted) return; // a consequence of the fatal one
          if (isFatal(err)) {
            fatal = err;
            stop.abort(err);
          } else failures.push({ job, err });
        }
      }, stop.signal);
    } finally {
      process.off('SIGINT', interrupted);
      bar.done();
    }
    if (fatal !== undefined) throw fatal;
    if (failures.length > 0) {
      if (jobs.length === 1) throw failures[0]!.err;
      for (const f of failures) ctx.note(`algo cp: ${show(f.job.from)}: ${describe(f.err)}`);
      throw new CliError(`${failures.length} of ${count(jobs.length, 'file')} not copied`);
    }
    const seconds = (Date.now() - started) / 1000;
    const bytes = total;
    ctx.result(
      { files: jobs.map((j) => ({ from: show(j.from), to: show(j.to), size: j.size })), bytes, directories: plan.dirs.length, seconds },
      () => {
        const speed = seconds > 0 ? `, ${size(bytes / seconds)}/s` : '';
        const what = many ? `${count(jobs.length, 'file')}${plan.dirs.length ? ` in ${count(plan.dirs.length, 'directory')}` : ''} to ${show(dest)}` : `${show(jobs[0]!.from)} to ${show(jobs[0]!.to)}`;
        return `Copied ${what} (${size(bytes)} in ${seconds.toFixed(1)} s${speed})`;
      },
    );
  },
};
