import { computeUsedS, NO_SETTINGS, readUserLimits, writeUserLimits } from '../limits/userLimits.ts';
import { MAX_WEIGHT } from '../fairQueue.ts';
import type { Config } from '../config.ts';
import { createServices, type Services } from '../services.ts';
import { AppError } from '../errors.ts';
import { validatePassword } from '../auth/passwords.ts';

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

/**
 * A password from standard input: its first line when piped (`--password-stdin`, as `docker
 * login` takes it), or typed twice without echo in a terminal.
 */
export async function readPassword(input: NodeJS.ReadStream = process.stdin, prompt: NodeJS.WriteStream = process.stderr): Promise<string> {
  if (!input.isTTY) {
    const chunks: Buffer[] = [];
    for await (const chunk of input) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString('utf8').split(/\r?\n/)[0]!;
  }
  const ask = (question: string) =>
    new Promise<string>((resolve, reject) => {
      prompt.write(question);
      input.setRawMode(true);
      input.resume();
      let typed = '';
      const onData = (chunk: Buffer) => {
        for (const ch of chunk.toString('utf8')) {
          if (ch === '\r' || ch === '\n') return done(undefined);
          if (ch === '\u0003') return done(new Error('interrupted'));
          if (ch === '\u007f' || ch === '\b') typed = typed.slice(0, -1);
          else typed += ch;
        }
      };
      const done = (err: Error | undefined) => {
        input.off('data', onData);
        input.setRawMode(false);
        input.pause();
        prompt.write('\n');
        if (err) reject(err);
        else resolve(typed);
      };
      input.on('data', onData);
    });
  const first = await ask('new password: ');
  const again = await ask('the same again: ');
  if (first !== again) throw new AppError('invalid_password', 'the two passwords differ; nothing was changed');
  return first;
}

/** The limit flags of `user limits`, as typed. */
export interface LimitFlags {
  callsPerMin?: string | undefined;
  burst?: string | undefined;
  concurrency?: string | undefined;
  computeSecondsPerMonth?: string | undefined;
  storageBytes?: string | undefined;
  share?: string | undefined;
  requestsPerMin?: string | undefined;
  requestBurst?: string | undefined;
  clear?: boolean;
}

/** A limit flag: undefined when not given, null for `default`, else a whole number. */
function limitFlag(name: string, raw: string | undefined, usage: Usage): number | null | undefined {
  if (raw === undefined) return undefined;
  if (raw === 'default') return null;
  if (!/^\d{1,15}$/.test(raw)) usage(`--${name} takes a whole number (0: no limit) or default, not "${raw}"`);
  return Number(raw);
}

/** `--share`: undefined when not given, null for `default`, else a whole number from 1 to MAX_WEIGHT (a share is never "none"). */
function shareFlag(raw: string | undefined, usage: Usage): number | null | undefined {
  if (raw === undefined) return undefined;
  if (raw === 'default') return null;
  if (!/^\d{1,4}$/.test(raw) || Number(raw) < 1 || Number(raw) > MAX_WEIGHT) usage(`--share takes a whole number from 1 to ${MAX_WEIGHT} (the calls of theirs served a turn while calls wait for a worker) or default, not "${raw}"`);
  return Number(raw);
}

export async function userCommand(config: Config, sub: string | undefined, args: string[], flags: { passwordStdin: boolean; limits?: LimitFlags }, usage: Usage): Promise<number> {
  switch (sub) {
    case 'create': {
      if (args.length !== 1) usage('user create takes one NAME');
      // Read and checked before the user exists: a bad password leaves nothing half-made.
      const password = flags.passwordStdin ? validatePassword(await readPassword()) : undefined;
      const { user, apiKey } = await withServices(config, async (s) => {
        const made = await s.users.create(args[0]!);
        if (password !== undefined) await s.sessions.setPassword(made.user.username, password);
        return made;
      });
      print({ username: user.username, api_key: apiKey, ...(password !== undefined ? { password_set: true } : {}) });
      return 0;
    }
    case 'password': {
      if (args.length !== 1) usage('user password takes one NAME');
      const name = args[0]!;
      await withServices(config, async (s) => {
        await s.users.require(name);
        await s.sessions.setPassword(name, validatePassword(await readPassword()));
      });
      print({ username: name, password_set: true });
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
    case 'limits': {
      if (args.length !== 1) usage('user limits takes one NAME');
      const f = flags.limits ?? {};
      const change = {
        calls_per_min: limitFlag('calls-per-min', f.callsPerMin, usage),
        burst: limitFlag('burst', f.burst, usage),
        concurrency: limitFlag('concurrency', f.concurrency, usage),
        compute_seconds_per_month: limitFlag('compute-seconds-per-month', f.computeSecondsPerMonth, usage),
        storage_bytes: limitFlag('storage-bytes', f.storageBytes, usage),
        share: shareFlag(f.share, usage),
        requests_per_min: limitFlag('requests-per-min', f.requestsPerMin, usage),
        request_burst: limitFlag('request-burst', f.requestBurst, usage),
      };
      const changing = f.clear === true || Object.values(change).some((v) => v !== undefined);
      if (f.clear === true && Object.values(change).some((v) => v !== undefined)) usage('user limits: --clear puts every limit back to the default; give it alone');
      const shown = await withServices(config, async (s) => {
        const user = await s.users.require(args[0]!);
        const own = changing ? await writeUserLimits(s.store, user.id, change, f.clear === true) : await readUserLimits(s.store.db, user.id);
        const inForce = s.limits.of({ userId: user.id, limits: own });
        const quotas = s.limits.quotasOf({ userId: user.id, limits: own });
        const requests = s.limits.requestLimitsOf({ userId: user.id, limits: own });
        const none = (n: number) => (n === 0 ? null : n);
        return {
          username: user.username,
          own: own ?? { ...NO_SETTINGS },
          in_force: {
            calls_per_min: none(inForce.callsPerMin),
            burst: none(inForce.burst),
            concurrency: none(inForce.concurrency),
            compute_seconds_per_month: none(quotas.computeSecondsPerMonth),
            storage_bytes: none(quotas.storageBytes),
            share: s.limits.shareOf({ userId: user.id, limits: own }),
            requests_per_min: none(requests.callsPerMin),
            request_burst: none(requests.burst),
          },
          // What the store has counted (a server's last second or so of calls is written with its next flush).
          used: { compute_seconds_this_month: await computeUsedS(s.store.db, user.id, Date.now()), storage_bytes: await s.hosted.storedBytes(user.id) },
        };
      });
      print(shown);
      return 0;
    }
    default:
      return usage(`unknown user command "${sub ?? ''}"; use create, password, list, delete or limits`);
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
