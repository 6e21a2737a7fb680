import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';

/** The file whose presence makes a directory a home: every started home has it. */
export const METADATA_FILE = 'metadata.sqlite';
const LOCK_FILE = 'server.lock';
const PID_FILE = 'server.pid';

/** Refusals a person fixes by hand: the CLI prints the message alone, as one line. */
export class HomeError extends Error {}

export function isHome(dir: string): boolean {
  return fs.existsSync(path.join(dir, METADATA_FILE));
}

/**
 * The exclusive claim of one server on its home, held from before crash recovery until the
 * process ends. It is an OS lock (SQLite's fcntl lock on `server.lock`, kept by an exclusive
 * transaction that is never committed), so it cannot go stale: the kernel drops it when the
 * process dies, however it dies. Admin commands never take it: they work beside a server.
 */
export class HomeLock {
  private constructor(
    private readonly db: Database.Database,
    private readonly pidFile: string,
  ) {}

  /** Takes the lock or throws a HomeError naming the process that holds it. Creates the home. */
  static acquire(home: string): HomeLock {
    fs.mkdirSync(home, { recursive: true, mode: 0o700 });
    const db = new Database(path.join(home, LOCK_FILE));
    try {
      db.pragma('busy_timeout = 0');
      db.pragma('locking_mode = EXCLUSIVE');
      db.exec('BEGIN EXCLUSIVE');
    } catch (err) {
      db.close();
      if ((err as { code?: string }).code !== 'SQLITE_BUSY') throw err;
      throw new HomeError(`the home ${home} is in use by ${holder(home)}; stop it first or choose another --home`);
    }
    // Written after the lock is ours: only read by a process that found the lock taken.
    const pidFile = path.join(home, PID_FILE);
    fs.writeFileSync(pidFile, `${process.pid}\n`, { mode: 0o600 });
    return new HomeLock(db, pidFile);
  }

  release(): void {
    if (!this.db.open) return;
    fs.rmSync(this.pidFile, { force: true });
    this.db.close();
  }
}

function holder(home: string): string {
  try {
    const pid = Number(fs.readFileSync(path.join(home, PID_FILE), 'utf8').trim());
    if (Number.isSafeInteger(pid) && pid > 0) return `process ${pid}`;
  } catch {
    // The holder is between taking the lock and writing its pid, or removed the file.
  }
  return 'another process';
}

/**
 * Which home an admin command works on. Named by `--home` or ALGOHOST_HOME, it must exist;
 * by default it is `./.algohost` of this directory or of the nearest parent that has one (as
 * git finds `.git`), so a command run from a subdirectory of the server's directory finds the
 * server's home instead of making an empty one. A new home is made only when asked (`init`).
 */
export function adminHome(setting: { home: string; from: 'flag' | 'env' | 'default' }, init: boolean, cwd = process.cwd()): string {
  if (init) return setting.home;
  if (setting.from === 'default') {
    const name = path.basename(setting.home);
    for (let dir = cwd; ; dir = path.dirname(dir)) {
      if (isHome(path.join(dir, name))) return path.join(dir, name);
      if (path.dirname(dir) === dir) break;
    }
  } else if (isHome(setting.home)) {
    return setting.home;
  }
  const named = setting.from === 'flag' ? '--home' : setting.from === 'env' ? 'ALGOHOST_HOME' : 'the default home';
  const where = setting.from === 'default' ? `no ${path.basename(setting.home)} home in ${cwd} or its parents` : `${setting.home} (from ${named}) is not an algohost home (no ${METADATA_FILE})`;
  throw new HomeError(`${where}; point at the server's home with --home DIR or ALGOHOST_HOME, or add --init to create a new home`);
}
