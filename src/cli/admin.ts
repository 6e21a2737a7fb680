import type { Config } from '../config.ts';
import { createServices, type Services } from '../services.ts';

/** Admin commands open the same home as the server; SQLite's locking makes that safe. */
async function withServices<T>(config: Config, fn: (s: Services) => Promise<T>): Promise<T> {
  const services = await createServices(config);
  try {
    return await fn(services);
  } finally {
    await services.close();
  }
}

function print(value: unknown): void {
  process.stdout.write(JSON.stringify(value) + '\n');
}

type Usage = (message: string) => never;

export async function userCommand(config: Config, sub: string | undefined, args: string[], usage: Usage): Promise<number> {
  switch (sub) {
    case 'create': {
      if (args.length !== 1) usage('user create takes one NAME');
      const { user, apiKey } = await withServices(config, (s) => s.users.create(args[0]!));
      print({ username: user.username, api_key: apiKey });
      return 0;
    }
    case 'list': {
      if (args.length !== 0) usage('user list takes no arguments');
      const users = await withServices(config, (s) => s.users.list());
      print(users.map((u) => ({ username: u.username, created_at: new Date(u.created_at).toISOString() })));
      return 0;
    }
    case 'delete': {
      if (args.length !== 1) usage('user delete takes one NAME');
      await withServices(config, (s) => s.users.delete(args[0]!));
      print({ deleted: args[0] });
      return 0;
    }
    default:
      return usage(`unknown user command "${sub ?? ''}"; use create, list or delete`);
  }
}

export async function keyCommand(
  config: Config,
  sub: string | undefined,
  args: string[],
  flags: { name?: string | undefined; permissions?: string | undefined },
  usage: Usage,
): Promise<number> {
  switch (sub) {
    case 'create': {
      if (args.length !== 1) usage('key create takes one USER');
      let permissions: unknown;
      if (flags.permissions !== undefined) {
        try {
          permissions = JSON.parse(flags.permissions);
        } catch {
          usage('--permissions must be a JSON object, e.g. \'{"allow_data_write": false}\'');
        }
      }
      const { record, apiKey } = await withServices(config, async (s) => {
        const user = await s.users.require(args[0]!);
        return s.keys.create(user.id, { name: flags.name ?? `key-${Date.now()}`, permissions });
      });
      print({ ...record, api_key: apiKey });
      return 0;
    }
    case 'list': {
      if (args.length !== 1) usage('key list takes one USER');
      print(await withServices(config, async (s) => s.keys.list((await s.users.require(args[0]!)).id)));
      return 0;
    }
    case 'revoke': {
      if (args.length !== 2) usage('key revoke takes USER and KEY_ID');
      await withServices(config, async (s) => s.keys.revoke((await s.users.require(args[0]!)).id, args[1]!));
      print({ revoked: args[1] });
      return 0;
    }
    default:
      return usage(`unknown key command "${sub ?? ''}"; use create, list or revoke`);
  }
}
