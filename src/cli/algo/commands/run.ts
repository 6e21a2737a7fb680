import fs from 'node:fs/promises';
import { AlgorithmError, type AlgoResponse } from '../../../../client/src/index.ts';
import { UsageError, type Command, type Context } from '../context.ts';
import { isJson, noMore, parseArgs, readAll, utf8, type OptionSpec } from './common.ts';

type Kind = 'auto' | 'text' | 'json' | 'binary';

/** The original CLI's input options: lower case takes the data, upper case a file (`-` = stdin). */
const INPUTS: Record<string, { short: string; kind: Kind; file: boolean }> = {
  data: { short: 'd', kind: 'auto', file: false },
  'data-file': { short: 'D', kind: 'auto', file: true },
  text: { short: 't', kind: 'text', file: false },
  'text-file': { short: 'T', kind: 'text', file: true },
  json: { short: 'j', kind: 'json', file: false },
  'json-file': { short: 'J', kind: 'json', file: true },
  binary: { short: 'b', kind: 'binary', file: false },
  'binary-file': { short: 'B', kind: 'binary', file: true },
};

const SPEC: Record<string, OptionSpec> = {
  ...Object.fromEntries(Object.entries(INPUTS).map(([name, i]) => [name, { short: i.short, value: true }])),
  timeout: { value: true },
  debug: {},
  output: { short: 'o', value: true },
};

/** What is sent: text, a JSON text (sent as it is), or bytes. */
type Input = { kind: 'text'; text: string } | { kind: 'json'; text: string } | { kind: 'binary'; bytes: Buffer };

async function readInput(ctx: Context, name: string, value: string): Promise<Input> {
  const { kind, file } = INPUTS[name]!;
  const flag = `-${INPUTS[name]!.short}`;
  const bytes = file ? (value === '-' ? await readAll(ctx.io.stdin) : await fs.readFile(value)) : Buffer.from(value, 'utf8');
  switch (kind) {
    case 'binary':
      return { kind: 'binary', bytes };
    case 'text': {
      const text = utf8(bytes);
      if (text === undefined) throw new UsageError(`${flag}: the input is not UTF-8 text; send bytes with -b/-B`);
      return { kind: 'text', text };
    }
    case 'json': {
      const text = utf8(bytes);
      if (text === undefined || !isJson(text)) throw new UsageError(`${flag}: the input is not valid JSON; send text with -t/-T`);
      return { kind: 'json', text };
    }
    case 'auto': {
      // As the original: JSON if it parses, else text if it is UTF-8, else bytes.
      const text = utf8(bytes);
      if (text === undefined) return { kind: 'binary', bytes };
      return isJson(text) ? { kind: 'json', text } : { kind: 'text', text };
    }
  }
}

/** The call's answer as the server's envelope (binary results in base64), for --json. */
function envelope(res: AlgoResponse): unknown {
  return { result: Buffer.isBuffer(res.result) ? res.result.toString('base64') : res.result, metadata: res.metadata };
}

/** The result's bytes as written to a file or stdout: text as is, JSON indented, bytes raw. */
function rendered(res: AlgoResponse): Buffer {
  switch (res.metadata.content_type) {
    case 'binary':
      return res.result as Buffer;
    case 'text':
      return Buffer.from(String(res.result), 'utf8');
    case 'json':
      return Buffer.from(`${JSON.stringify(res.result, null, 2)}\n`, 'utf8');
    default:
      return Buffer.alloc(0);
  }
}

const KIND_WORDS: Record<Input['kind'], string> = { text: 'text', json: 'JSON', binary: 'binary data' };
/** How the server's InputError names each type it lists as accepted (the runners' wording). */
const ACCEPTED: Record<Input['kind'], { marker: string; flags: string }> = {
  text: { marker: 'text (', flags: '-t TEXT or -T FILE' },
  json: { marker: 'JSON (', flags: '-j JSON or -J FILE' },
  binary: { marker: 'binary (', flags: '-b DATA or -B FILE' },
};

/**
 * For an InputError that says which input types the algorithm accepts: which flag sends the
 * input as one of them. -d guesses (JSON if it parses), so `-d 17` sends JSON to a text algorithm.
 */
function inputHint(message: string, sent: Input['kind'], flag: string): string | undefined {
  const accepts = /this algorithm accepts (.*) \(its input_types\)$/.exec(message)?.[1];
  if (!accepts) return undefined;
  const kinds = (Object.keys(ACCEPTED) as Input['kind'][]).filter((k) => accepts.includes(ACCEPTED[k].marker));
  if (kinds.length === 0 || kinds.includes(sent)) return undefined;
  const how = flag === '-d' || flag === '-D' ? `${flag} sent the input as ${KIND_WORDS[sent]}${sent === 'json' ? ' (it parses as JSON)' : ''}` : `${flag} sends ${KIND_WORDS[sent]}`;
  return `hint: ${how}, and the algorithm takes ${kinds.map((k) => KIND_WORDS[k]).join(' or ')}: send it with ${kinds.map((k) => ACCEPTED[k].flags).join(', or ')}`;
}

export const run: Command = {
  summary: 'call an algorithm and print its result',
  owns: ['json'],
  usage: `usage: algo run <owner/name[/version]> <input option> [--timeout SECONDS] [--debug] [-o FILE]

Input (exactly one; for the upper-case ones a FILE of "-" reads stdin):
  -d, --data DATA         auto-detect: JSON if it parses, else text (else binary for a file)
  -D, --data-file FILE
  -t, --text DATA         text (text/plain)
  -T, --text-file FILE
  -j, --json DATA         JSON (application/json)
  -J, --json-file FILE
  -b, --binary DATA       the bytes as given (application/octet-stream)
  -B, --binary-file FILE

Output: the result on stdout (text as is, JSON indented, binary as raw bytes); an algorithm
error goes to stderr with exit code 1. With the global --json (\`algo --json run ...\`) the
whole answer: {"result", "metadata"}, or {"error", "metadata"}, binary results in base64.
  -o, --output FILE       write the result to FILE instead of stdout
  --debug                 also print what the algorithm wrote to its stdout (its owner only)
  --timeout SECONDS       how long the algorithm may run (server default 300, at most 3000)

Examples:
  algo run demo/Hello -d 'you'
  algo run alice/Greeter/1.0.x -J input.json
  algo run alice/Thumbnail -B in.png -o out.png
  algo run alice/Greeter -t 17 --timeout 2`,

  async run(ctx, argv) {
    const args = parseArgs(argv, SPEC);
    const ref = args.positionals[0];
    if (!ref) throw new UsageError('which algorithm? (owner/name[/version])');
    noMore(args, 1);
    const inputs = args.given.filter((g) => INPUTS[g.name]);
    if (inputs.length === 0) throw new UsageError('give the input with one of -d -t -j -b (or -D -T -J -B FILE)');
    if (inputs.length > 1) throw new UsageError(`give one input, not ${inputs.length} (${inputs.map((i) => `-${INPUTS[i.name]!.short}`).join(' ')})`);
    const options: { timeout?: number; stdout?: boolean } = {};
    const timeout = args.string('timeout');
    if (timeout !== undefined) {
      options.timeout = Number(timeout);
      if (!/^\d+(\.\d+)?$/.test(timeout) || !(options.timeout > 0)) throw new UsageError(`--timeout takes seconds, a number above 0 (got "${timeout}")`);
    }
    const debug = args.flag('debug');
    if (debug) options.stdout = true;
    const outFile = args.string('output');

    const input = await readInput(ctx, inputs[0]!.name, inputs[0]!.value as string);
    const algo = ctx.client().algo(ref);
    let res: AlgoResponse;
    try {
      if (input.kind === 'json') res = await algo.pipeJson(input.text, options);
      else res = await algo.pipe(input.kind === 'text' ? input.text : input.bytes, options);
    } catch (err) {
      if (err instanceof AlgorithmError) {
        const hint = err.errorType === 'InputError' ? inputHint(err.message, input.kind, `-${INPUTS[inputs[0]!.name]!.short}`) : undefined;
        if (hint && !ctx.json) ctx.hint = hint;
        if (ctx.json) {
          const error = { message: err.message, error_type: err.errorType, ...(err.stacktrace ? { stacktrace: err.stacktrace } : {}) };
          ctx.result({ error, metadata: err.metadata });
        } else if (debug && err.metadata.stdout) {
          ctx.io.stdout.write(err.metadata.stdout);
        }
      }
      throw err;
    }

    if (ctx.json) ctx.result(envelope(res));
    const bytes = rendered(res);
    const binaryOnStdout = res.metadata.content_type === 'binary' && outFile === undefined;
    if (debug && !ctx.json) {
      if (res.metadata.stdout === undefined) ctx.note('(no stdout: only the algorithm\'s owner sees it)');
      // Before the result, as the original; on stderr when raw bytes go to stdout.
      else (binaryOnStdout ? ctx.io.stderr : ctx.io.stdout).write(res.metadata.stdout);
      if (res.metadata.stdout_truncated) ctx.note('(stdout truncated)');
    }
    if (outFile !== undefined) {
      await fs.writeFile(outFile, bytes);
    } else if (!ctx.json) {
      ctx.io.stdout.write(bytes);
      if (res.metadata.content_type === 'text' && !String(res.result).endsWith('\n')) ctx.io.stdout.write('\n');
    }
  },
};
