import fs from 'node:fs';
import path from 'node:path';

/** One profile: where the server is and which key to use (the original CLI's field names). */
export interface Profile {
  api_key?: string;
  api_server?: string;
}

/**
 * The CLI's config file, TOML like the original `algo` CLI's:
 *
 *   [profiles.default]
 *   api_key = "sim..."
 *   api_server = "http://127.0.0.1:8080"
 *
 * Only this shape is read and written (a table per profile, string values); other lines are
 * ignored on read. The file holds API keys, so it is written with mode 0600.
 */
export class ProfileStore {
  constructor(readonly file: string) {}

  /** `$ALGOHOST_CONFIG`, else `~/.algohost/config`. */
  static locate(env: Readonly<Record<string, string | undefined>>): ProfileStore {
    const home = env.HOME || env.USERPROFILE || '.';
    return new ProfileStore(env.ALGOHOST_CONFIG || path.join(home, '.algohost', 'config'));
  }

  read(): Map<string, Profile> {
    let text: string;
    try {
      text = fs.readFileSync(this.file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new Map();
      throw err;
    }
    return parse(text);
  }

  get(name: string): Profile | undefined {
    return this.read().get(name);
  }

  /** Sets (or replaces) one profile, keeping the others; written atomically, mode 0600. */
  set(name: string, profile: Profile): void {
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(name)) throw new Error(`a profile name is letters, digits, "-" and "_" (got "${name}")`);
    const all = this.read();
    all.set(name, profile);
    fs.mkdirSync(path.dirname(this.file), { recursive: true, mode: 0o700 });
    const tmp = `${this.file}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, serialize(all), { mode: 0o600 });
    fs.renameSync(tmp, this.file);
  }
}

function parse(text: string): Map<string, Profile> {
  const out = new Map<string, Profile>();
  let current: Profile | undefined;
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const table = /^\[\s*profiles\.("?)([A-Za-z0-9_-]+)\1\s*\]$/.exec(line);
    if (table) {
      current = {};
      out.set(table[2]!, current);
      continue;
    }
    if (line.startsWith('[')) {
      current = undefined;
      continue;
    }
    const kv = /^([A-Za-z_]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(#.*)?$/.exec(line);
    if (kv && current && (kv[1] === 'api_key' || kv[1] === 'api_server')) current[kv[1]] = JSON.parse(`"${kv[2]}"`) as string;
  }
  return out;
}

function serialize(all: Map<string, Profile>): string {
  let text = '[profiles]\n';
  for (const [name, p] of all) {
    text += `\n[profiles.${name}]\n`;
    if (p.api_key !== undefined) text += `api_key = ${JSON.stringify(p.api_key)}\n`;
    if (p.api_server !== undefined) text += `api_server = ${JSON.stringify(p.api_server)}\n`;
  }
  return text;
}
