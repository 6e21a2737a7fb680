import type { Db, MetadataStore } from '../store/db.ts';
import { AppError } from '../errors.ts';
import { FULL_PERMISSIONS } from './permissions.ts';
import { generateApiKey, hashApiKey, newKeyId } from './apiKeys.ts';
import { HeldSlots, STREAMS } from '../limits/held.ts';

export const USERNAME_PATTERN = /^[A-Za-z][A-Za-z0-9_]{0,29}$/;

export interface User {
  id: number;
  username: string;
  created_at: number;
}

export function validateUsername(name: string): string {
  if (!USERNAME_PATTERN.test(name)) {
    throw new AppError(
      'invalid_username',
      `invalid username "${name.slice(0, 40)}": start with a letter, then letters, digits or underscores, at most 30 characters`,
    );
  }
  return name;
}

/** Called inside the deletion transaction so the owner's file contents are released too. */
export type OwnerPurge = (trx: Db, ownerId: number) => Promise<string[]>;

export class UserService {
  private readonly db: Db;

  constructor(
    private readonly store: MetadataStore,
    private readonly purgeOwnerData: OwnerPurge,
    private readonly releaseBlobs: (blobIds: string[]) => Promise<void>,
    /** Removes the files (sources, builds) of deleted algorithms, after the commit. */
    private readonly removeAlgorithmFiles: (algorithmIds: number[]) => Promise<void> = async () => undefined,
    /**
     * The slots of the users' live event streams (docs/security.md "What one user can hold"):
     * here because every route of a user's own business has the users at hand.
     */
    readonly streams: HeldSlots = new HeldSlots(STREAMS, { perUser: 0 }),
  ) {
    this.db = store.db;
  }

  /** Creates a user and its `default-key` (all permissions) in one transaction. */
  async create(username: string): Promise<{ user: User; apiKey: string }> {
    validateUsername(username);
    const now = Date.now();
    const apiKey = generateApiKey();
    return this.store.write(async (trx) => {
      const existing = await trx.selectFrom('users').select('id').where('username_lc', '=', username.toLowerCase()).executeTakeFirst();
      if (existing) throw new AppError('user_exists', `user "${username}" already exists`);
      const row = await trx
        .insertInto('users')
        .values({ username, username_lc: username.toLowerCase(), created_at: now })
        .returning(['id', 'username', 'created_at'])
        .executeTakeFirstOrThrow();
      await trx
        .insertInto('api_keys')
        .values({
          id: newKeyId(),
          user_id: row.id,
          name: 'default-key',
          key_hash: hashApiKey(apiKey),
          prefix: apiKey.slice(0, 8),
          permissions: JSON.stringify(FULL_PERMISSIONS),
          created_at: now,
          revoked_at: null,
        })
        .execute();
      return { user: row, apiKey };
    });
  }

  async findByName(username: string): Promise<User | undefined> {
    return this.db
      .selectFrom('users')
      .select(['id', 'username', 'created_at'])
      .where('username_lc', '=', username.toLowerCase())
      .executeTakeFirst();
  }

  async require(username: string): Promise<User> {
    const user = await this.findByName(username);
    if (!user) throw new AppError('unknown_user', `no user named "${username}"`);
    return user;
  }

  async list(): Promise<User[]> {
    return this.db.selectFrom('users').select(['id', 'username', 'created_at']).orderBy('username_lc').execute();
  }

  /** Deletes a user with its keys and all its hosted data. */
  async delete(username: string): Promise<void> {
    const { blobs, algorithms } = await this.store.write(async (trx) => {
      const user = await trx.selectFrom('users').select('id').where('username_lc', '=', username.toLowerCase()).executeTakeFirst();
      if (!user) throw new AppError('unknown_user', `no user named "${username}"`);
      const blobs = await this.purgeOwnerData(trx, user.id);
      const algorithms = (await trx.selectFrom('algorithms').select('id').where('owner_id', '=', user.id).execute()).map((r) => r.id);
      await trx.deleteFrom('api_keys').where('user_id', '=', user.id).execute();
      await trx.deleteFrom('sessions').where('user_id', '=', user.id).execute();
      // Their calls, and the calls to their algorithms, go with them (the rows name them).
      await trx.deleteFrom('usage').where((eb) => eb.or([eb('caller_id', '=', user.id), eb('owner_id', '=', user.id)])).execute();
      await trx.deleteFrom('users').where('id', '=', user.id).execute();
      return { blobs, algorithms };
    });
    await this.releaseBlobs(blobs);
    await this.removeAlgorithmFiles(algorithms);
  }
}
