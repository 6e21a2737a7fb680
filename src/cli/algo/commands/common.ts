/**
 * What the account and algorithm commands share: a small argument parser (values are taken
 * verbatim, so `-d -5` sends "-5" as the original CLI did), finding out who the key belongs
 * to, and text tables.
 */
import { ApiError, type AlgohostClient } from '../../../../client/src/index.ts';
import { CliError, UsageError, type Context } from '../context.ts';

export interface OptionSpec {
  /** One letter: `-x`. */
  short?: string;
  /** Takes a value (`--name VALUE`, `--name=VALUE`, `-xVALUE`, `-x VALUE`); else a switch. */
  value?: boolean;
}

export class Args {
  readonly positionals: string[] = [];
  /** Every option in the order given, under its long name. */
  readonly given: Array<{ name: string; value: string | true }> = [];

  /** The last value of a value option. */
  string(name: string): string | undefined {
    const all = this.strings(name);
    return all[all.length - 1];
  }

  strings(name: string): string[] {
    return this.given.filter((g) => g.name === name && typeof g.value === 'string').map((g) => g.value as string);
  }

  flag(name: string): boolean {
    return this.given.some((g) => g.name === name);
  }
}

/** Parses a command's own arguments; a mistake is a UsageError (exit 2). */
export function parseArgs(argv: string[], spec: Record<string, OptionSpec>): Args {
  const out = new Args();
  const byShort = new Map(Object.entries(spec).filter(([, s]) => s.short).map(([name, s]) => [s.short!, name]));
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      out.positionals.push(...argv.slice(i + 1));
      break;
    }
    let name: string | undefined;
    let inline: string | undefined;
    if (arg.startsWith('--')) {
      const eq = arg.indexOf('=');
      name = eq < 0 ? arg.slice(2) : arg.slice(2, eq);
      if (eq >= 0) inline = arg.slice(eq + 1);
      if (!spec[name]) throw new UsageError(unknown(arg));
    } else if (arg.startsWith('-') && arg.length > 1) {
      name = byShort.get(arg[1]!);
      if (!name) throw new UsageError(unknown(arg));
      if (arg.length > 2) inline = arg.slice(2);
    } else {
      out.positionals.push(arg);
      continue;
    }
    const option = spec[name]!;
    if (!option.value) {
      if (inline !== undefined) throw new UsageError(`${arg.startsWith('--') ? `--${name}` : `-${option.short}`} takes no value`);
      out.given.push({ name, value: true });
      continue;
    }
    if (inline === undefined) {
      if (i + 1 >= argv.length) throw new UsageError(`${arg} needs a value`);
      inline = argv[++i]!;
    }
    out.given.push({ name, value: inline });
  }
  return out;
}

function unknown(arg: string): string {
  return `unknown option "${arg}"`;
}

/** Refuses positionals beyond `max`. */
export function noMore(args: Args, max: number): void {
  if (args.positionals.length > max) throw new UsageError(`unexpected argument "${args.positionals[max]}"`);
}

const USERNAME = /^[A-Za-z][A-Za-z0-9_]{0,29}$/;

/**
 * The user the key belongs to (GET /v1/user). Undefined when the server has no such route (not
 * an algohost server). A rejected key throws its ApiError (401), which main reports with the
 * `algo auth` hint.
 */
export async function whoami(client: AlgohostClient): Promise<string | undefined> {
  try {
    const me = await client.whoami();
    return USERNAME.test(me.username) ? me.username : undefined;
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return undefined;
    throw err;
  }
}

/** `explicit` (a flag), else the key's own user; fails with what to do when neither is known. */
export async function resolveUser(ctx: Context, explicit: string | undefined, flag: string): Promise<string> {
  if (explicit !== undefined) {
    if (!USERNAME.test(explicit)) throw new UsageError(`${flag}: "${explicit}" is not a user name (a letter, then letters, digits or "_")`);
    return explicit;
  }
  const name = await whoami(ctx.client());
  if (!name) throw new CliError(`the server did not say which user this key belongs to: pass ${flag} NAME`);
  return name;
}

/** Rows as aligned columns (the last column is not padded). */
export function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  return all.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ').trimEnd()).join('\n');
}

/** A string as one POSIX shell word. */
export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_./:@%+=,-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** Every byte of a stream (stdin for `-`). */
export async function readAll(stream: AsyncIterable<unknown>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
  return Buffer.concat(chunks);
}

/** The bytes as text if they are valid UTF-8, else undefined. */
export function utf8(bytes: Buffer): string | undefined {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
}

/** Whether the text parses as JSON. */
export function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}
