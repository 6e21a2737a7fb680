import fs from 'node:fs';
import path from 'node:path';

/**
 * Where an algorithm's files live under the home: `algorithms/<id>/source-<hash>/` (the
 * uploaded tree) and `algorithms/<id>/builds/<hash>/` (immutable builds). Everything is made
 * in `algorithms/.tmp/` first and renamed into place, so a crash never leaves half a tree
 * where a reader would look; `.tmp` is emptied at start.
 */
export class AlgorithmFiles {
  constructor(readonly root: string) {}

  get tmp(): string {
    return path.join(this.root, '.tmp');
  }
  algorithmDir(id: number): string {
    return path.join(this.root, String(id));
  }
  sourceDir(id: number, hash: string): string {
    return path.join(this.algorithmDir(id), `source-${hash}`);
  }
  buildDir(id: number, hash: string): string {
    return path.join(this.algorithmDir(id), 'builds', hash);
  }
  async scratch(prefix: string): Promise<string> {
    await fs.promises.mkdir(this.tmp, { recursive: true });
    return fs.promises.mkdtemp(path.join(this.tmp, prefix));
  }
  /** At start: what an interrupted upload or build left behind. */
  recover(): void {
    fs.rmSync(this.tmp, { recursive: true, force: true });
  }
  async removeAlgorithm(id: number): Promise<void> {
    await fs.promises.rm(this.algorithmDir(id), { recursive: true, force: true });
  }
  /** The algorithms this home holds files of whose directory is older than `minAgeMs`. */
  async localIds(minAgeMs: number): Promise<number[]> {
    let names: string[];
    try {
      names = await fs.promises.readdir(this.root);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const ids: number[] = [];
    const before = Date.now() - minAgeMs;
    for (const name of names) {
      if (!/^[1-9][0-9]{0,15}$/.test(name)) continue;
      const stat = await fs.promises.stat(path.join(this.root, name)).catch(() => undefined);
      if (stat?.isDirectory() && stat.mtimeMs < before) ids.push(Number(name));
    }
    return ids;
  }
}
