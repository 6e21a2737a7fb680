import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, loadMoveConfig, type Config } from '../config.ts';
import { AppError } from '../errors.ts';
import { keyCommand, userCommand } from './admin.ts';
import { adminHome, HomeError } from '../home.ts';
import { redactUrl } from '../store/redact.ts';

const USAGE = `usage:
  algohost serve [--port N] [--host H] [--home DIR] [--no-demo] [--role all|api]
  algohost worker [--home DIR] [--port N] [--host H]
  algohost doctor [--home DIR] [--json]
  algohost trial cluster [--dir DIR] [--port N] [--workers N] [--json]
  algohost cluster status [--json]
  algohost user create NAME [--password-stdin] [--home DIR] [--init]
  algohost user password NAME [--password-stdin] [--home DIR]
  algohost user list [--home DIR]
  algohost user delete NAME [--home DIR]
  algohost user limits NAME [--calls-per-min N] [--burst N] [--concurrency N]
                    [--compute-seconds-per-month N] [--storage-bytes N] [--share N]
                    [--requests-per-min N] [--request-burst N] [--clear] [--home DIR]
  algohost key create USER [--name NAME] [--permissions JSON] [--home DIR]
  algohost key list USER [--home DIR]
  algohost key revoke USER KEY_ID [--home DIR]
  algohost migrate [--home DIR]
  algohost move [--home DIR] --to postgres://… --blobs s3://…

The admin commands (user, key) work on the home named by --home or ALGOHOST_HOME, else on
./.algohost of this directory or its nearest parent that has one; they make a new home only
with --init. They may run beside a server on the same home.

A user signs in to the web console with a password: --password-stdin reads it from standard
input (its first line), and user password sets a new one the same way (with or without
--password-stdin), or asks for it twice without echo in a terminal. A user without a password uses API keys only.

user limits shows a user's call limits and quotas (and what they used of the quotas), or
sets their own: N a number (0: no limit), or default for the operator's (ALGOHOST_LIMIT_*);
--clear puts every one back to the default. They hold from the user's next call or upload
(docs/limits.md).

move carries a stopped single-machine home (users, keys, data, ACLs, algorithms, builds,
versions, connected accounts, its secret) into an empty shared deployment's PostgreSQL and
S3 store, and reads everything back to verify it; run it again to resume one cut short.
--to and --blobs default to ALGOHOST_DATABASE_URL and ALGOHOST_BLOBS.

doctor checks what this machine needs (sandbox, cgroups, seccomp, git, the build registries, and
with their settings PostgreSQL, S3, NATS, the clock against the database, free disk), one line
each with the fix for each problem; it exits 1 if there is one (docs/deployment.md).

trial cluster starts a whole cluster on this machine's loopback to try (PostgreSQL, an S3 server,
NATS, an API node on --port, default 8080, and --workers worker nodes, default 2), prints how to
reach it, and stops all of it on Ctrl-C; --dir keeps its files for the next trial.

In a cluster (docs/cluster.md), serve --role api takes HTTP and sends every call over NATS
(ALGOHOST_NATS_URL) to the worker nodes, which algohost worker starts; both use the shared
PostgreSQL and S3 store. serve alone (--role all, the default) runs everything itself.`;

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
      to: { type: 'string' },
      blobs: { type: 'string' },
      role: { type: 'string' },
      json: { type: 'boolean' },
      dir: { type: 'string' },
      workers: { type: 'string' },
      'password-stdin': { type: 'boolean' },
      'calls-per-min': { type: 'string' },
      burst: { type: 'string' },
      concurrency: { type: 'string' },
      'compute-seconds-per-month': { type: 'string' },
      'storage-bytes': { type: 'string' },
      'requests-per-min': { type: 'string' },
      'request-burst': { type: 'string' },
      share: { type: 'string' },
      clear: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command, sub, ...rest] = positionals;
  if (values.help || command === undefined) {
    process.stdout.write(USAGE + '\n');
    return values.help ? 0 : 2;
  }
  if (command === 'move') {
    if (sub !== undefined) throw new UsageError(`move takes no arguments, got "${sub}"`);
    return move(values);
  }
  if (values.to !== undefined || values.blobs !== undefined) throw new UsageError('--to and --blobs are for move');
  if (values.json !== undefined && command !== 'cluster' && command !== 'doctor' && command !== 'trial') throw new UsageError('--json is for cluster status, doctor and trial');
  if (command === 'trial') {
    if (sub !== 'cluster' || rest.length > 0) throw new UsageError('usage: algohost trial cluster [--dir DIR] [--port N] [--workers N] [--json]');
    const workers = values.workers === undefined ? 2 : Number(values.workers);
    if (!Number.isInteger(workers) || workers < 1 || workers > 8) throw new UsageError(`--workers is 1 to 8, got "${values.workers}"`);
    const port = values.port === undefined ? 8080 : Number(values.port);
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new UsageError(`--port is a port number, got "${values.port}"`);
    const { trialCluster } = await import('./trial.ts');
    return trialCluster({ dir: values.dir, port, workers, json: values.json === true });
  }
  if (command === 'cluster') {
    if (sub !== 'status' || rest.length > 0) throw new UsageError('usage: algohost cluster status [--json]');
    return clusterStatusCommand(values.json === true);
  }
  let config = loadConfig({ home: values.home, port: values.port, host: values.host, demo: values['no-demo'] ? false : undefined });
  if (command === 'doctor') {
    if (sub !== undefined) throw new UsageError(`doctor takes no arguments, got "${sub}"`);
    const { runDoctor, formatDoctor } = await import('./doctor.ts');
    const results = await runDoctor(config);
    process.stdout.write((values.json ? JSON.stringify({ results }) : formatDoctor(results)) + '\n');
    return results.some((r) => r.status === 'fail') ? 1 : 0;
  }
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
  if (values.role !== undefined && command !== 'serve') throw new UsageError('--role is for serve');
  if (values['password-stdin'] && !(command === 'user' && (sub === 'create' || sub === 'password'))) throw new UsageError('--password-stdin is for user create and user password');
  switch (command) {
    case 'serve': {
      if (sub !== undefined) throw new UsageError(`serve takes no arguments, got "${sub}"`);
      const role = values.role ?? 'all';
      if (role !== 'all' && role !== 'api') throw new UsageError(`--role is all or api (worker nodes are started by algohost worker), got "${role}"`);
      // Loaded only here: admin commands start faster without the HTTP stack.
      await (await import('../main.ts')).serve(config, process.stderr, role);
      return -1; // keeps running until a signal
    }
    case 'worker':
      if (sub !== undefined) throw new UsageError(`worker takes no arguments, got "${sub}"`);
      // --port given: the worker answers GET /health there, and nothing else.
      await (await import('../main.ts')).worker(config, process.stderr, values.port !== undefined ? config.port : undefined);
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
      return userCommand(config, sub, rest, { passwordStdin: values['password-stdin'] === true, limits: { callsPerMin: values['calls-per-min'], burst: values.burst, concurrency: values.concurrency, computeSecondsPerMonth: values['compute-seconds-per-month'], storageBytes: values['storage-bytes'], share: values.share, requestsPerMin: values['requests-per-min'], requestBurst: values['request-burst'], clear: values.clear === true } }, usage);
    case 'key':
      return keyCommand(config, sub, rest, { name: values.name, permissions: values.permissions }, usage);
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

/** `algohost cluster status`: the nodes heard on the bus (ALGOHOST_NATS_URL) and the async queue. */
async function clusterStatusCommand(asJson: boolean): Promise<number> {
  const config = loadConfig({});
  if (!config.natsUrl) throw new UsageError('cluster status needs ALGOHOST_NATS_URL: the NATS server of the cluster');
  const { connectNats, requireClusterKey } = await import('../cluster/nats.ts');
  const { clusterStatus, formatStatus } = await import('../cluster/status.ts');
  const key = requireClusterKey(config, 'cluster status');
  const nc = await connectNats(config.natsUrl, config.natsAuth, 'algohost cluster status', 'admin');
  let status;
  try {
    status = await clusterStatus(nc, key);
  } finally {
    await nc.close();
  }
  const names = await warmBuildNames(config, status.nodes.flatMap((n) => Object.keys(n.warm)));
  process.stdout.write((asJson ? JSON.stringify({ ...status, names: Object.fromEntries(names) }) : formatStatus(status, names)) + '\n');
  return 0;
}

/**
 * The warm builds' owner/name/version from the shared database (ALGOHOST_DATABASE_URL); none
 * without it, or when it does not answer: the table then shows the builds' keys, and says why.
 */
async function warmBuildNames(config: Config, keys: string[]): Promise<Map<string, string>> {
  if (keys.length === 0) return new Map();
  if (!config.database) {
    process.stderr.write('algohost: warm builds are shown by algorithm id and build hash: set ALGOHOST_DATABASE_URL for their names\n');
    return new Map();
  }
  const { openMetadataStore } = await import('../store/backends.ts');
  const { warmNames } = await import('./clusterNames.ts');
  try {
    const store = await openMetadataStore(config, { migrate: false });
    try {
      return await warmNames(store.db, keys);
    } finally {
      await store.close();
    }
  } catch (err) {
    process.stderr.write(`algohost: warm builds are shown by algorithm id and build hash: the database did not answer (${(err as Error).message})\n`);
    return new Map();
  }
}

/**
 * `algohost move`: the home (found as the admin commands find it, never made) is read at rest,
 * under its lock, after the recovery a server would run at start; the target is named by
 * --to/--blobs or the usual settings.
 */
async function move(values: { home?: string | undefined; to?: string | undefined; blobs?: string | undefined }): Promise<number> {
  const settings = loadMoveConfig({ home: values.home, to: values.to, blobs: values.blobs });
  const source = { ...settings.source, home: adminHome({ home: settings.source.home, from: settings.source.homeFrom }, false) };
  const target = { ...settings.target, home: source.home };
  const say = (line: string) => process.stderr.write(`algohost: ${line}\n`);
  say(`moving the home ${source.home} to ${redactUrl(target.database!.url)} and ${target.blobs!.display}`);
  const { HomeLock } = await import('../home.ts');
  const { createServices } = await import('../services.ts');
  const { moveHome } = await import('../move.ts');
  const lock = HomeLock.acquire(source.home);
  try {
    const from = await createServices(source);
    try {
      // What a server would do at start: a crash's leftovers are not carried.
      await from.hosted.recover();
      await from.builds.recover();
      const into = await createServices(target);
      try {
        const report = await moveHome(source.home, from, into, say);
        process.stdout.write(JSON.stringify(report) + '\n');
      } finally {
        await into.close();
      }
    } finally {
      await from.close();
    }
  } finally {
    lock.release();
  }
  return 0;
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
      // The one line that says what is wrong, and where the whole usage is (not all of it).
      process.stderr.write(`algohost: ${(err as Error).message}\nsee \`algohost --help\`\n`);
      process.exitCode = 2;
    } else if (err instanceof AppError || err instanceof ConfigError || err instanceof HomeError || (err as Error).name === 'MoveError') {
      process.stderr.write(`algohost: ${(err as Error).message}\n`);
      process.exitCode = 1;
    } else {
      process.stderr.write(`algohost: ${(err as Error).stack ?? String(err)}\n`);
      process.exitCode = 1;
    }
  },
);
