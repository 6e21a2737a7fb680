import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/** The `meta` row that holds the secret where the store is shared. */
export const SECRET_KEY = 'server_secret';

/**
 * The server secret: 32 random bytes in `<home>/secret` (mode 0600), made on first start.
 * Purpose-specific keys are derived from it with HKDF, so one secret serves markers now and
 * credential encryption later without the uses ever sharing a key.
 */
export class ServerSecret {
  private constructor(private readonly master: Buffer) {}

  static loadOrCreate(home: string): ServerSecret {
    const file = path.join(home, 'secret');
    fs.mkdirSync(home, { recursive: true, mode: 0o700 });
    if (!fs.existsSync(file)) {
      // Written aside, then linked into place: a server and an admin command starting at
      // once never read a half-written secret, and only one of their secrets wins.
      const tmp = `${file}.${process.pid}.${crypto.randomBytes(4).toString('hex')}`;
      fs.writeFileSync(tmp, crypto.randomBytes(32), { flag: 'wx', mode: 0o600 });
      try {
        fs.linkSync(tmp, file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      } finally {
        fs.rmSync(tmp, { force: true });
      }
    }
    const master = fs.readFileSync(file);
    if (master.length < 32) throw new Error(`${file} is damaged (shorter than 32 bytes); restore it from backup`);
    return new ServerSecret(master);
  }

  /** A new secret's value as the shared store keeps it (base64). */
  static fresh(): string {
    return crypto.randomBytes(32).toString('base64');
  }

  /**
   * Where several servers share one metadata store they must share the secret too (a list
   * marker made by one is read by another): it is kept in the store's `meta` table under
   * SECRET_KEY, made by whichever server comes first (services.ts reads it: this module stays
   * below the store, and knows nothing of it).
   */
  static fromShared(value: string): ServerSecret {
    const master = Buffer.from(value, 'base64');
    if (master.length < 32) throw new Error(`the server secret in the metadata store (meta.${SECRET_KEY}) is damaged; restore it from backup`);
    return new ServerSecret(master);
  }

  /** The secret's bytes, for `algohost move` to carry a home's secret to a shared store. */
  get bytes(): Buffer {
    return Buffer.from(this.master);
  }

  derive(purpose: string): Buffer {
    return Buffer.from(crypto.hkdfSync('sha256', this.master, Buffer.alloc(0), `algohost:${purpose}`, 32));
  }
}
