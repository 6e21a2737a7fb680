import type { Readable, Writable } from 'node:stream';
import { AlgohostClient, DEFAULT_BASE_URL } from '../../../client/src/index.ts';
import { ProfileStore, type Profile } from './profiles.ts';
import { SILENT, TerminalProgress, type Progress } from './progress.ts';

export type Env = Readonly<Record<string, string | undefined>>;

/** The process's streams, handed in so that tests can run commands in-process too. */
export interface Io {
  stdin: Readable & { isTTY?: boolean };
  stdout: Writable & { isTTY?: boolean };
  stderr: Writable & { isTTY?: boolean };
}

/** A mistake in how the command was called: exit code 2, with the command's usage. */
export class UsageError extends Error {}

/** A failure to report as is (no stack): exit code 1. */
export class CliError extends Error {}

export interface Command {
  /** One line for `algo help`. */
  summary: string;
  /** The command's synopsis and flags, shown by `algo help <command>` and on a usage error. */
  usage: string;
  run(ctx: Context, args: string[]): Promise<void>;
  /**
   * Long options of this command that share a name with a global flag (`run`'s `--json DATA`):
   * after the command's name, those are the command's; other global flags are taken anywhere.
   */
  owns?: readonly string[];
}

/** What every command gets: the profile in use, its client, and the output conventions. */
export class Context {
  readonly profiles: ProfileStore;
  private made: AlgohostClient | undefined;

  constructor(
    readonly io: Io,
    readonly env: Env,
    /** `--profile`, else ALGOHOST_PROFILE, else "default". */
    readonly profileName: string,
    /** `--json`: machine-readable output on stdout, nothing else there. */
    readonly json: boolean,
  ) {
    this.profiles = ProfileStore.locate(env);
  }

  profile(): Profile | undefined {
    return this.profiles.get(this.profileName);
  }

  /**
   * The API client: the profile's server and key, overridden by the environment
   * (ALGOHOST_API/ALGOHOST_API_KEY, or the original ALGORITHMIA_ names) as the original CLI did.
   */
  client(): AlgohostClient {
    if (this.made) return this.made;
    const p = this.profile() ?? {};
    const envKey = this.env.ALGOHOST_API_KEY || this.env.ALGORITHMIA_API_KEY;
    const envUrl = this.env.ALGOHOST_API || this.env.ALGORITHMIA_API;
    const apiKey = envKey || p.api_key;
    if (!apiKey) throw new CliError(`no API key for profile "${this.profileName}": run \`algo auth${this.profileName === 'default' ? '' : ` --profile ${this.profileName}`}\``);
    this.made = new AlgohostClient({ apiKey, baseUrl: envUrl || p.api_server || DEFAULT_BASE_URL, env: {} });
    return this.made;
  }

  /** A line of human output on stdout (not in --json mode). */
  print(line: string): void {
    if (!this.json) this.io.stdout.write(`${line}\n`);
  }

  /** A command's result: JSON on stdout with --json, else `human` (if given) as text. */
  result(value: unknown, human?: () => string): void {
    if (this.json) this.io.stdout.write(`${JSON.stringify(value)}\n`);
    else if (human) {
      const text = human();
      if (text !== '') this.io.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
    }
  }

  /** A note for the person at the terminal, on stderr (never mixed into data on stdout). */
  note(line: string): void {
    this.io.stderr.write(`${line}\n`);
  }

  /** A note that explains the error the command is about to fail with: printed after it. */
  hint: string | undefined;

  /** A progress bar on stderr, only on a terminal and not with --json. */
  progress(label: string, total?: number, bytes = true): Progress {
    if (this.json || !this.io.stderr.isTTY) return SILENT;
    return new TerminalProgress(this.io.stderr, label, total, bytes);
  }
}
