import { parseArgs } from 'node:util';
import { AlgorithmError, ApiError, NetworkError } from '../../../client/src/index.ts';
import { CliError, Context, UsageError, type Command, type Env, type Io } from './context.ts';
import { dataCommands } from './commands/data.ts';
import { algorithmCommands } from './commands/algorithms.ts';
import { eventCommands } from './commands/events.ts';

/** Exit codes: 0 done, 1 the server or an algorithm said no, 2 the command was misused. */
export const EXIT = { ok: 0, failed: 1, usage: 2 } as const;

const COMMANDS: Record<string, Command> = { ...algorithmCommands, ...dataCommands, ...eventCommands };

const GLOBAL_USAGE = `usage: algo [--profile NAME] [--json] <command> [args]

The global flags may also come after the command (\`algo ls --json data://.my\`), except that
\`algo run\` takes --json as its JSON input: there, put it first (\`algo --json run ...\`).

Global flags:
  --profile NAME   use this profile of the config file (default: "default", or ALGOHOST_PROFILE)
  --json           machine-readable output on stdout
  -h, --help       this help; \`algo help <command>\` for one command`;

function help(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((n) => n.length));
  const lines = Object.entries(COMMANDS)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`);
  return `${GLOBAL_USAGE}\n\nCommands:\n${lines.join('\n')}\n`;
}

/**
 * Runs one `algo` command line and answers its exit code. Global flags come before the
 * command or anywhere after it (up to `--`), unless the command has an option of that name.
 */
export async function main(argv: string[], env: Env, io: Io): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: { profile: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
      strict: false,
      tokens: true,
    });
  } catch (err) {
    io.stderr.write(`algo: ${(err as Error).message}\n${seeHelp()}\n`);
    return EXIT.usage;
  }
  // Global flags end at the first positional (the command).
  const first = parsed.tokens.find((t) => t.kind === 'positional');
  const commandIndex = first ? first.index : argv.length;
  const globals = parseArgs({
    args: argv.slice(0, commandIndex),
    options: { profile: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
    strict: false,
  }).values;
  const name = argv[commandIndex];
  let rest = argv.slice(commandIndex + 1);
  if (name === undefined || name === 'help' || globals.help) {
    const which = name === 'help' ? rest[0] : undefined;
    if (which && COMMANDS[which]) io.stdout.write(`${COMMANDS[which]!.usage}\n`);
    else io.stdout.write(help());
    return name === undefined && !globals.help ? EXIT.usage : EXIT.ok;
  }
  const command = COMMANDS[name];
  if (!command) {
    io.stderr.write(`algo: unknown command "${name}"\n${seeHelp()} (it lists the commands)\n`);
    return EXIT.usage;
  }
  // Global flags may also follow the command (`algo ls --json x`), up to a `--`.
  let late: { json: boolean; profile: string | undefined };
  try {
    ({ rest, late } = takeGlobals(rest, command.owns ?? []));
  } catch (err) {
    io.stderr.write(`algo ${name}: ${(err as Error).message}\n${seeHelp(name)}\n`);
    return EXIT.usage;
  }
  const profile = late.profile ?? (typeof globals.profile === 'string' ? globals.profile : env.ALGOHOST_PROFILE || 'default');
  const ctx = new Context(io, env, profile, globals.json === true || late.json);
  try {
    if (rest.includes('--help') || rest.includes('-h')) {
      io.stdout.write(`${command.usage}\n`);
      return EXIT.ok;
    }
    await command.run(ctx, rest);
    return EXIT.ok;
  } catch (err) {
    return report(ctx, name, err);
  }
}

/** Takes `--json` and `--profile NAME` out of a command's arguments, except the ones it owns. */
function takeGlobals(args: string[], owns: readonly string[]): { rest: string[]; late: { json: boolean; profile: string | undefined } } {
  const rest: string[] = [];
  const late = { json: false, profile: undefined as string | undefined };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--') {
      rest.push(...args.slice(i));
      break;
    }
    if (arg === '--json' && !owns.includes('json')) {
      late.json = true;
    } else if ((arg === '--profile' || arg.startsWith('--profile=')) && !owns.includes('profile')) {
      const value = arg === '--profile' ? args[++i] : arg.slice('--profile='.length);
      if (value === undefined || value === '') throw new Error('--profile needs a profile name');
      late.profile = value;
    } else {
      rest.push(arg);
    }
  }
  return { rest, late };
}

/** One line a person can act on, then the hint that explains it if any; the exit code says who was at fault. */
function report(ctx: Context, name: string, err: unknown): number {
  const code = explain(ctx, name, err);
  if (ctx.hint) ctx.io.stderr.write(`${ctx.hint}\n`);
  return code;
}

/** After a usage mistake: where the whole usage is, rather than all of it. */
const seeHelp = (name?: string) => `see \`algo ${name ? `${name} ` : ''}--help\``;

function explain(ctx: Context, name: string, err: unknown): number {
  const say = (message: string) => ctx.io.stderr.write(`algo ${name}: ${message}\n`);
  if (err instanceof UsageError) {
    say(err.message);
    ctx.io.stderr.write(`${seeHelp(name)}\n`);
    return EXIT.usage;
  }
  if (err instanceof CliError) {
    say(err.message);
    return EXIT.failed;
  }
  if (err instanceof ApiError) {
    if (err.status === 401 && (err.code === 'invalid_api_key' || err.code === 'api_key_revoked' || err.code === 'auth_required')) {
      say(`API key rejected (${err.message}): run \`algo auth${ctx.profileName === 'default' ? '' : ` --profile ${ctx.profileName}`}\``);
    } else {
      say(err.message);
    }
    return EXIT.failed;
  }
  if (err instanceof AlgorithmError) {
    say(`${err.errorType}: ${err.message}`);
    if (err.stacktrace) ctx.io.stderr.write(`${err.stacktrace}\n`);
    return EXIT.failed;
  }
  if (err instanceof NetworkError) {
    say(`cannot reach the server (${err.message}); check the profile's api_server or ALGOHOST_API`);
    return EXIT.failed;
  }
  const e = err as NodeJS.ErrnoException;
  if (e && typeof e.code === 'string' && e.syscall) {
    // A local file problem (ENOENT, EACCES, EISDIR...): the user's to fix.
    say(`${e.path ?? ''}: ${e.code === 'ENOENT' ? 'no such file or directory' : e.message}`);
    return EXIT.failed;
  }
  say(`unexpected error: ${(err as Error)?.stack ?? String(err)}`);
  return EXIT.failed;
}
