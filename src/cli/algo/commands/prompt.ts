import readline from 'node:readline';
import { Writable } from 'node:stream';
import { CliError, type Io } from '../context.ts';

/**
 * Questions on stderr, answers from stdin, one line each. Works when stdin is not a terminal
 * (answers piped in by a script or a test); on a terminal a secret answer is not echoed.
 * Close it when done, or the process waits on stdin.
 */
export class Prompter {
  readonly tty: boolean;
  private readonly rl: readline.Interface;
  private readonly lines: string[] = [];
  private waiting: ((line: string | undefined) => void) | undefined;
  private ended = false;
  /** Ctrl-C on a terminal (raw mode: it arrives as a key, not as a signal). */
  private interrupted = false;
  /** No echo except while a question that is not secret waits for its answer (typeahead included). */
  private muted = true;

  constructor(private readonly io: Io) {
    this.tty = io.stdin.isTTY === true;
    // readline echoes what is typed through this (terminals only), and writes the prompts.
    const echo = new Writable({
      write: (chunk: Buffer, _encoding, callback) => {
        if (!this.muted) io.stderr.write(chunk);
        callback();
      },
    });
    this.rl = readline.createInterface({ input: io.stdin, output: echo, terminal: this.tty });
    this.rl.on('line', (line) => {
      if (this.waiting) {
        const w = this.waiting;
        this.waiting = undefined;
        w(line);
      } else {
        this.lines.push(line);
      }
    });
    this.rl.on('SIGINT', () => {
      this.interrupted = true;
      this.rl.close();
    });
    this.rl.on('close', () => {
      this.ended = true;
      this.waiting?.(undefined);
      this.waiting = undefined;
    });
  }

  /** The next answer (without its line end), or undefined when stdin has ended. */
  async ask(question: string, options: { secret?: boolean } = {}): Promise<string | undefined> {
    const hide = options.secret === true && this.tty;
    if (hide) {
      this.io.stderr.write(question);
    } else {
      this.muted = false;
      this.rl.setPrompt(question);
      this.rl.prompt();
    }
    try {
      if (this.lines.length) return this.lines.shift();
      const line = this.ended ? undefined : await new Promise<string | undefined>((resolve) => (this.waiting = resolve));
      if (this.interrupted) throw new CliError('interrupted; nothing was saved');
      return line;
    } finally {
      this.muted = true;
      // A piped answer is not echoed, and a hidden one not either: end the question's line.
      if (hide || !this.tty || this.interrupted) this.io.stderr.write('\n');
    }
  }

  close(): void {
    this.rl.close();
  }
}
