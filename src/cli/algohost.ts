import { parseArgs } from 'node:util';
import { ConfigError, loadConfig } from '../config.ts';
import { AppError } from '../errors.ts';
import { keyCommand, userCommand } from './admin.ts';
import { adminHome, HomeError } from '../home.ts';
import { redactUrl } from '../store/redact.ts';

const USAGE = `usage:
  algohost serve [--port N] [--host H] [--home DIR] [--no-demo]
  algohost user create NAME [--home DIR] [--init]
  algohost user list [--home DIR]
  algohost user delete NAME [--home DIR]
  algohost key create USER [--name NAME] [--permissions JSON] [--home DIR]
  algohost key list USER [--home DIR]
  algohost key revoke USER KEY_ID [--home DIR]
  algohost migrate [--home DIR]

The admin commands (user, key) work on the home named by --home or ALGOHOST_HOME, else on
./.algohost of this directory or its nearest parent that has one; they make a new home only
with --init. They may run beside a server on the same home.`;

class UsageError extends Error {}

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      port: { type: 'string' },
      host: { type: 'string' },
      home: { type: 'string' },
      'no-demo': { type: 'boolean' },
      init: { type: 'boolean' },
      name: { type: 'string' },
      permissions: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command, sub, ...rest] = positionals;
  if (values.help || command === undefined) {
    process.stdout.write(USAGE + '\n');
    return values.help ? 0 : 2;
  }
  let config = loadConfig({ home: values.home, port: values.port, host: values.host, demo: values['no-demo'] ? false : undefined });
  if (command === 'user' || command === 'key' || command === 'migrate') {
    if (config.database) {
      // The users and keys are in the shared database, not in a home.
      process.stderr.write(`algohost: database ${redactUrl(config.database.url)}\n`);
    } else {
      config = { ...config, home: adminHome({ home: config.home, from: config.homeFrom }, values.init === true) };
      // stdout stays the command's JSON; which home was used goes beside it.
      process.stderr.write(`algohost: home ${config.home}\n`);
    }
  } else if (values.init) {
    throw new UsageError('--init is for the admin commands; serve creates its home when it is new');
  }
  switch (command) {
    case 'serve':
      if (sub !== undefined) throw new UsageError(`serve takes no arguments, got "${sub}"`);
      // Loaded only here: admin commands start faster without the HTTP stack.
      await (await import('../main.ts')).serve(config);
      return -1; // keeps running until a signal
    case 'migrate': {
      if (sub !== undefined) throw new UsageError(`migrate takes no arguments, got "${sub}"`);
      // Opening the store runs its pending migrations, under its lock; nothing else starts.
      const { openMetadataStore } = await import('../store/backends.ts');
      const { MIGRATIONS } = await import('../store/migrations.ts');
      const store = await openMetadataStore(config);
      await store.close();
      process.stdout.write(`the ${store.dialect} schema is at step ${MIGRATIONS.length} of ${MIGRATIONS.length}\n`);
      return 0;
    }
    case 'user':
      return userCommand(config, sub, rest, usage);
    case 'key':
      return keyCommand(config, sub, rest, { name: values.name, permissions: values.permissions }, usage);
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

function usage(message: string): never {
  throw new UsageError(message);
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`algohost: ${(err as Error).message}\n${USAGE}\n`);
      process.exitCode = 2;
    } else if (err instanceof AppError || err instanceof ConfigError || err instanceof HomeError) {
      process.stderr.write(`algohost: ${err.message}\n`);
      process.exitCode = 1;
    } else {
      process.stderr.write(`algohost: ${(err as Error).stack ?? String(err)}\n`);
      process.exitCode = 1;
    }
  },
);
