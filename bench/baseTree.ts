/**
 * The code to compare with (bench/callsAB.ts, bench/callParity.ts): `--base DIR` as given, or
 * `--rev REV` (default HEAD) exported with `git archive` into bench/.work/base-<rev>/, with
 * this checkout's node_modules linked in.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { WORK_ROOT } from './common.ts';
import { REPO } from './procs.ts';

export function argOf(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
}

/** The number given after `name` on the command line, else `fallback`. */
export const numArg = (name: string, fallback: number): number => Number(argOf(name) ?? fallback);

export function baseTree(): string {
  const given = argOf('--base');
  if (given) return path.resolve(given);
  const rev = execFileSync('git', ['rev-parse', '--short', argOf('--rev') ?? 'HEAD'], { cwd: REPO, encoding: 'utf8' }).trim();
  const dir = path.join(WORK_ROOT, `base-${rev}`);
  // client/src too: the server imports the wire contract's code from there (a tree exported
  // before it was, without it, is completed).
  if (!fs.existsSync(path.join(dir, 'src')) || !fs.existsSync(path.join(dir, 'client', 'src'))) {
    fs.mkdirSync(dir, { recursive: true });
    const tar = execFileSync('git', ['archive', rev, 'src', 'bench', 'client/src', 'package.json', 'tsconfig.json'], { cwd: REPO, maxBuffer: 1 << 28 });
    execFileSync('tar', ['-x', '-C', dir], { input: tar });
    if (!fs.existsSync(path.join(dir, 'node_modules'))) fs.symlinkSync(path.join(REPO, 'node_modules'), path.join(dir, 'node_modules'));
  }
  return dir;
}
