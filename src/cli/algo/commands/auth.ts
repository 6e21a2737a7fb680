import { AlgohostClient, ApiError, DEFAULT_BASE_URL, NetworkError } from '../../../../client/src/index.ts';
import { CliError, UsageError, type Command, type Context } from '../context.ts';
import { noMore, parseArgs, whoami } from './common.ts';
import { Prompter } from './prompt.ts';

const PROFILE_NAME = /^[A-Za-z0-9_-]{1,64}$/;
/** Wrong answers allowed on a terminal before giving up; a piped answer gets one chance. */
const TRIES = 3;

/** A problem with the address, or undefined. */
function checkServer(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return `"${text}" is not a URL (like ${DEFAULT_BASE_URL})`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `the API address must start with http:// or https:// (got "${text}")`;
  return undefined;
}

const normalize = (server: string) => new URL(server).href.replace(/\/+$/, '');

/** A problem with the key, or undefined. */
function checkKey(key: string): string | undefined {
  if (key === '') return 'no API key given';
  if (!key.startsWith('sim')) return 'an API key starts with "sim"';
  if (/\s/.test(key)) return 'an API key has no spaces';
  return undefined;
}

/** Asks until the answer passes `check` (on a terminal) or fails saying what was wrong. */
async function askUntil(ctx: Context, prompter: Prompter, question: string, check: (answer: string) => string | undefined, options: { secret?: boolean; fallback?: string } = {}): Promise<string> {
  for (let attempt = 1; ; attempt++) {
    const raw = await prompter.ask(question, options);
    if (raw === undefined) throw new CliError('stdin ended before every question was answered: answer the prompts, or pass --api-server and --api-key; nothing was saved');
    const answer = raw.trim() === '' && options.fallback !== undefined ? options.fallback : raw.trim();
    const problem = check(answer);
    if (!problem) return answer;
    if (!prompter.tty || attempt >= TRIES) throw new CliError(`${problem}; nothing was saved`);
    ctx.note(`${problem}; try again`);
  }
}

/**
 * Checks the key against the server with a request that only a valid key gets an answer to
 * (listing the caller's own collections), then learns whose it is.
 */
async function verify(ctx: Context, server: string, apiKey: string): Promise<string | undefined> {
  const client = new AlgohostClient({ apiKey, baseUrl: server, env: {} });
  try {
    await client.dir('data://.my').page();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) throw new CliError(`${server} rejected the key: ${err.message}; nothing was saved`);
    if (err instanceof NetworkError) throw new CliError(`cannot reach ${server} (${err.message}): check the address; nothing was saved`);
    if (err instanceof ApiError && err.code === 'key_permission_denied') {
      // The key is valid; it just may not read data.
      ctx.note('note: this key may not read data (allow_data is off)');
    } else if (err instanceof ApiError) {
      throw new CliError(`${server} did not accept the check (${err.status} ${err.code}: ${err.message}): is it an algohost server? nothing was saved`);
    } else {
      throw err;
    }
  }
  try {
    return await whoami(client);
  } catch {
    return undefined;
  }
}

export const auth: Command = {
  summary: 'save an API key and the server address in a profile (checked against the server)',
  usage: `usage: algo [--profile NAME] auth [--api-server URL] [--api-key KEY]

Asks for the API address (Enter keeps the default shown) and the API key (starts with
"sim"; not echoed on a terminal), checks the key against the server, and saves both as the
profile (default "default") in $ALGOHOST_CONFIG or ~/.algohost/config (mode 0600). Answers
may be piped on stdin.

  --api-server URL   the address, without asking
  --api-key KEY      the key, without asking (visible to other local users in the process list)`,

  async run(ctx, argv) {
    const args = parseArgs(argv, { 'api-server': { value: true }, 'api-key': { value: true } });
    noMore(args, 0);
    if (!PROFILE_NAME.test(ctx.profileName)) throw new UsageError(`a profile name is letters, digits, "-" and "_" (got "${ctx.profileName}")`);
    let server = args.string('api-server');
    let apiKey = args.string('api-key');
    if (server !== undefined && checkServer(server)) throw new UsageError(`--api-server: ${checkServer(server)}`);
    if (apiKey !== undefined && checkKey(apiKey)) throw new UsageError(`--api-key: ${checkKey(apiKey)}`);

    if (server === undefined || apiKey === undefined) {
      const existing = ctx.profile();
      const fallback = existing?.api_server || ctx.env.ALGOHOST_API || ctx.env.ALGORITHMIA_API || DEFAULT_BASE_URL;
      const prompter = new Prompter(ctx.io);
      try {
        server ??= await askUntil(ctx, prompter, `API address [${fallback}]: `, checkServer, { fallback });
        apiKey ??= await askUntil(ctx, prompter, 'API key: ', checkKey, { secret: true });
      } finally {
        prompter.close();
      }
    }
    server = normalize(server);

    const username = await verify(ctx, server, apiKey);
    ctx.profiles.set(ctx.profileName, { api_key: apiKey, api_server: server });
    if (ctx.env.ALGOHOST_API_KEY || ctx.env.ALGORITHMIA_API_KEY) {
      ctx.note('note: an API key in the environment (ALGOHOST_API_KEY or ALGORITHMIA_API_KEY) still takes precedence over the profile');
    }
    const profileFlag = ctx.profileName === 'default' ? '' : ` --profile ${ctx.profileName}`;
    ctx.result({ profile: ctx.profileName, api_server: server, username: username ?? null, config: ctx.profiles.file }, () =>
      `${username ? `Authenticated as ${username} at ${server}.` : `The key works at ${server}.`} Profile "${ctx.profileName}" saved in ${ctx.profiles.file}.\n` +
      `Try it: algo${profileFlag} keys`,
    );
  },
};
