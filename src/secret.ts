import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { MetadataStore } from './store/db.ts';

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

  /**
   * Where several servers share one metadata store they must share the secret too (a list
   * marker made by one is read by another): it is kept in the store's `meta` table, made by
   * whichever server comes first.
   */
  static async fromStore(store: MetadataStore): Promise<ServerSecret> {
    const read = async () => (await store.db.selectFrom('meta').select('value').where('key', '=', SECRET_KEY).executeTakeFirst())?.value;
    let value = await read();
    if (value === undefined) {
      await store.db.insertInto('meta').values({ key: SECRET_KEY, value: crypto.randomBytes(32).toString('base64') }).onConflict((oc) => oc.column('key').doNothing()).execute();
      value = (await read())!;
    }
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
