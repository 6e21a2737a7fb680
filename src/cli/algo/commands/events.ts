/**
 * Events (docs/events.md): `algo events tail` prints the user's events as they happen;
 * `algo subscriptions …` manages webhook subscriptions, `algo triggers …` triggers. All three
 * are the user's own business: the key in use needs allow_algo_management.
 */
import type {
  CloudEvent, Delivery, KeyRecord, NewTrigger, Subscription, SubscriptionChanges, Trigger, TriggerRun,
} from '../../../../client/src/index.ts';
import { CliError, UsageError, type Command, type Context } from '../context.ts';
import { size } from '../progress.ts';
import { noMore, parseArgs, resolveUser, table, type Args } from './common.ts';

/** `a,b , c` as a list; an empty string as the empty list (every type). */
function typeList(value: string): string[] {
  return value.split(',').map((t) => t.trim()).filter(Boolean);
}

/** The one-line summary of what an event says, by its kind (docs/events.md's catalogue). */
export function summary(event: CloudEvent): string {
  const d = (event.data ?? {}) as Record<string, unknown>;
  const str = (v: unknown) => (v === undefined || v === null ? undefined : String(v));
  const by = str(d.by) === undefined ? [] : [`by ${str(d.by)}`];
  if (event.type.startsWith('data.file.')) {
    return [typeof d.size === 'number' ? size(d.size) : undefined, str(d.content_type), ...by].filter(Boolean).join(', ');
  }
  if (event.type.startsWith('data.directory.')) return by.join('');
  if (event.type.startsWith('algorithm.build.')) {
    return [str(d.language), typeof d.duration_ms === 'number' ? `${(d.duration_ms / 1000).toFixed(1)} s` : undefined, str(d.build) && `build ${str(d.build)!.slice(0, 12)}`].filter(Boolean).join(', ');
  }
  if (event.type === 'algorithm.version.published') {
    return [str(d.version) && `version ${str(d.version)}`, str(d.callability), ...by].filter(Boolean).join(', ');
  }
  if (event.type === 'call.completed') {
    return [str(d.status), str(d.http_status) && `HTTP ${str(d.http_status)}`, typeof d.duration_ms === 'number' ? `${d.duration_ms} ms` : undefined, str(d.request_id)].filter(Boolean).join(', ');
  }
  if (event.type === 'trigger.failed') {
    return [str(d.trigger_id), str(d.algorithm), str(d.error)].filter(Boolean).join(': ');
  }
  const text = JSON.stringify(d);
  return text === '{}' ? '' : text.length > 120 ? `${text.slice(0, 117)}...` : text;
}

/** One line per event: time, type, subject, summary. */
export function eventLine(event: CloudEvent): string {
  return [event.time, event.type, event.subject, summary(event)].filter(Boolean).join('  ');
}

const events: Command = {
  summary: 'print your events as they happen (events tail)',
  usage: `usage: algo events tail [--types TYPE,...] [--path PATTERN] [--since EVENT_ID] [--json]

Prints your events as they happen, one line each (time, type, subject, and what it says), or
with --json each CloudEvent as one line of JSON, until Ctrl-C. A dropped connection is
resumed from the last event printed, nothing missed. The key in use needs
allow_algo_management.
  --types T,...   event types, * for one part, ** for any (data.file.*,call.completed)
  --path PATTERN  only events about your data there (data://.my/inbox/**)
  --since ID      first the events after this one (an evt_... id, kept 24 h by default)
  --user NAME     whose events (default: the user the API key belongs to)`,

  async run(ctx, argv) {
    const args = parseArgs(argv, { types: { value: true }, path: { value: true }, since: { value: true }, user: { value: true } });
    const [action] = args.positionals;
    if (action !== 'tail') throw new UsageError(action === undefined ? 'algo events needs an action: tail' : `unknown action "${action}": tail`);
    noMore(args, 1);
    const since = args.string('since');
    if (since !== undefined && !/^evt_[0-9a-f]+$/.test(since)) throw new UsageError(`--since takes an event id (evt_...), got "${since}"`);
    const user = await resolveUser(ctx, args.string('user'), '--user');

    const stop = new AbortController();
    const interrupted = () => stop.abort();
    // `algo events tail | head -1`: once stdout is closed there is nobody to print for.
    const broken = (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE') stop.abort();
    };
    process.once('SIGINT', interrupted);
    process.once('SIGTERM', interrupted);
    ctx.io.stdout.on('error', broken);
    try {
      const stream = ctx.client().events({
        user,
        ...(args.string('types') !== undefined ? { types: typeList(args.string('types')!) } : {}),
        ...(args.string('path') ? { path: args.string('path')! } : {}),
        ...(since ? { lastEventId: since } : {}),
        signal: stop.signal,
        onOpen: ({ reconnected, lastEventId }) => {
          if (reconnected) ctx.note(`Reconnected${lastEventId ? `, resuming after ${lastEventId}` : ''}.`);
          else ctx.note(`Listening for ${user}'s events${since ? ` after ${since}` : ''} (Ctrl-C to stop).`);
        },
        onRetry: ({ error, delayMs }) => {
          ctx.note(`The event stream broke off (${(error as Error)?.message ?? String(error)}); reconnecting in ${(delayMs / 1000).toFixed(1)} s.`);
        },
      });
      for await (const event of stream) {
        if (ctx.json) ctx.io.stdout.write(`${JSON.stringify(event)}\n`);
        else ctx.io.stdout.write(`${eventLine(event)}\n`);
      }
    } finally {
      process.off('SIGINT', interrupted);
      process.off('SIGTERM', interrupted);
      ctx.io.stdout.off('error', broken);
    }
  },
};

// ---- subscriptions ---------------------------------------------------------------------

function subscriptionStatus(s: Subscription): string {
  if (s.enabled) return s.failing_since ? `failing since ${s.failing_since}` : 'enabled';
  return s.disabled_reason ? `disabled: ${s.disabled_reason}` : 'disabled';
}

function describeSubscription(s: Subscription): string {
  return [
    `id:          ${s.id}`,
    `url:         ${s.url}`,
    `types:       ${s.types.join(', ') || '(every type)'}`,
    `path:        ${s.path ?? '(any)'}`,
    `status:      ${subscriptionStatus(s)}`,
    ...(s.overflowed ? [`overflowed:  ${s.overflowed} events not queued (the queue was full)`] : []),
    `created:     ${s.created_at}`,
    `updated:     ${s.updated_at}`,
  ].join('\n');
}

function lastAttempt(d: Delivery): string {
  const a = d.attempts[d.attempts.length - 1];
  if (!a) return '';
  return a.error ?? (a.status_code === null ? '' : `HTTP ${a.status_code}`);
}

/** --types and --path as the API takes them: an empty --types is every type, an empty --path any. */
function filterOf(args: Args): { types?: string[]; path?: string | null } {
  return {
    ...(args.string('types') !== undefined ? { types: typeList(args.string('types')!) } : {}),
    ...(args.string('path') !== undefined ? { path: args.string('path') || null } : {}),
  };
}

function enabledOf(args: Args): { enabled?: boolean } {
  if (args.flag('enable') && args.flag('disable')) throw new UsageError('--enable or --disable, not both');
  return args.flag('enable') ? { enabled: true } : args.flag('disable') ? { enabled: false } : {};
}

/** The actions a command takes, how many arguments each needs, and which flags go with which. */
function action(args: Args, name: string, actions: Record<string, { args: string[]; flags: string[] }>): { action: string; operands: string[] } {
  const [act = 'list', ...operands] = args.positionals;
  const spec = actions[act];
  if (!spec) throw new UsageError(`unknown action "${act}": ${Object.keys(actions).join(', ')}`);
  if (operands.length < spec.args.length) throw new UsageError(`algo ${name} ${act} needs ${spec.args.join(' ')}`);
  noMore(args, 1 + spec.args.length);
  const stray = args.given.find((g) => g.name !== 'user' && !spec.flags.includes(g.name));
  if (stray) throw new UsageError(`--${stray.name} does not go with ${act}`);
  return { action: act, operands };
}

export const subscriptions: Command = {
  summary: 'list, create, change or delete webhook subscriptions; their deliveries',
  usage: `usage: algo subscriptions [list]
       algo subscriptions create URL [--types TYPE,...] [--path PATTERN]
       algo subscriptions show ID
       algo subscriptions update ID [--url URL] [--types TYPE,...] [--path PATTERN] [--enable|--disable]
       algo subscriptions delete ID
       algo subscriptions rotate ID
       algo subscriptions test ID
       algo subscriptions deliveries ID [--limit N]
       algo subscriptions redeliver ID DELIVERY_ID

Webhooks: your events POSTed to a URL of yours, signed as Standard Webhooks says
(docs/events.md). create and rotate print the signing secret (whsec_...) on stdout: it is
shown that once, never again. After rotate the old secret signs beside the new one for 24 h.
The key in use needs allow_algo_management.
  --types T,...   event types, * for one part, ** for any (data.file.*); '' for every type
  --path PATTERN  only events about your data there (data://.my/inbox/**); '' for any
  --enable        turn on (also one turned off for failing); --disable turns off
  --limit N       deliveries shown, newest first (default 50, at most 200)
  --user NAME     whose subscriptions (default: the user the API key belongs to)`,

  async run(ctx, argv) {
    const args = parseArgs(argv, {
      url: { value: true }, types: { value: true }, path: { value: true }, enable: {}, disable: {}, limit: { value: true }, user: { value: true },
    });
    const { action: act, operands } = action(args, 'subscriptions', {
      list: { args: [], flags: [] },
      create: { args: ['URL'], flags: ['types', 'path'] },
      show: { args: ['ID'], flags: [] },
      update: { args: ['ID'], flags: ['url', 'types', 'path', 'enable', 'disable'] },
      delete: { args: ['ID'], flags: [] },
      rotate: { args: ['ID'], flags: [] },
      test: { args: ['ID'], flags: [] },
      deliveries: { args: ['ID'], flags: ['limit'] },
      redeliver: { args: ['ID', 'DELIVERY_ID'], flags: [] },
    });
    const [id, delivery] = operands as [string, string];
    let limit: number | undefined;
    if (args.string('limit') !== undefined) {
      limit = Number(args.string('limit'));
      if (!Number.isInteger(limit) || limit < 1 || limit > 200) throw new UsageError('--limit takes a whole number from 1 to 200');
    }
    let changes: SubscriptionChanges | undefined;
    if (act === 'update') {
      changes = { ...(args.string('url') !== undefined ? { url: args.string('url')! } : {}), ...filterOf(args), ...enabledOf(args) };
      if (Object.keys(changes).length === 0) throw new UsageError('algo subscriptions update needs something to change: --url, --types, --path, --enable or --disable');
    }
    const user = await resolveUser(ctx, args.string('user'), '--user');
    const api = ctx.client().subscriptions(user);

    switch (act) {
      case 'list': {
        const list = await api.list();
        ctx.result(list, () => {
          if (list.length === 0) return 'No subscriptions: `algo subscriptions create URL` makes one';
          return table(['ID', 'URL', 'TYPES', 'PATH', 'STATUS'], list.map((s) => [s.id, s.url, s.types.join(',') || '*', s.path ?? '*', subscriptionStatus(s)]));
        });
        break;
      }
      case 'create': {
        const made = await api.create({ url: id, ...filterOf(args) });
        if (!ctx.json) {
          ctx.note(`Created ${made.id}: ${made.url} (${made.types.join(',') || 'every type'}${made.path ? `, ${made.path}` : ''}).`);
          ctx.note('Its signing secret follows. Keep it now: it is not shown again (`algo subscriptions rotate` makes a new one).');
        }
        ctx.result(made, () => made.secret);
        break;
      }
      case 'show': {
        const one = await api.get(id);
        ctx.result(one, () => describeSubscription(one));
        break;
      }
      case 'update': {
        const changed = await api.update(id, changes!);
        ctx.result(changed, () => describeSubscription(changed));
        break;
      }
      case 'delete':
        await api.delete(id);
        ctx.result({ deleted: id }, () => `Deleted ${id}`);
        break;
      case 'rotate': {
        const rotated = await api.rotateSecret(id);
        if (!ctx.json) ctx.note(`A new signing secret for ${id} follows; it is not shown again. The old one signs beside it for 24 hours.`);
        ctx.result(rotated, () => rotated.secret);
        break;
      }
      case 'test': {
        const sent = await api.test(id);
        ctx.result(sent, () => `Queued a webhook.test event for ${id}: delivery ${sent.id} (\`algo subscriptions deliveries ${id}\` shows how it went)`);
        break;
      }
      case 'deliveries': {
        const list = await api.deliveries(id, limit === undefined ? {} : { limit });
        ctx.result(list, () => {
          if (list.length === 0) return `No deliveries for ${id} yet`;
          return table(
            ['DELIVERY', 'EVENT', 'TYPE', 'STATUS', 'ATTEMPTS', 'CREATED', 'LAST'],
            list.map((d) => [d.id, d.event_id, d.event_type, d.status, String(d.attempts.length), d.created_at, lastAttempt(d)]),
          );
        });
        break;
      }
      case 'redeliver': {
        const again = await api.redeliver(id, delivery);
        ctx.result(again, () => `Redelivering ${again.id} (${again.event_type}) now, with the same webhook-id`);
        break;
      }
    }
  },
};

// ---- triggers --------------------------------------------------------------------------

function triggerStatus(t: Trigger): string {
  return t.enabled ? 'enabled' : t.disabled_reason ? `disabled: ${t.disabled_reason}` : 'disabled';
}

function describeTrigger(t: Trigger): string {
  return [
    `id:          ${t.id}`,
    `algorithm:   ${t.algorithm}`,
    `types:       ${t.types.join(', ') || '(every type)'}`,
    `path:        ${t.path ?? '(any)'}`,
    `input:       ${typeof t.input === 'string' ? t.input : `${JSON.stringify(t.input)} (JSON)`}`,
    `output:      ${t.output ?? '(discarded)'}`,
    `key:         ${t.key ?? '(the user\'s own authority)'}`,
    `timeout:     ${t.timeout} s`,
    `status:      ${triggerStatus(t)}`,
    `created:     ${t.created_at}`,
    `updated:     ${t.updated_at}`,
  ].join('\n');
}

/** A key's id from `--key ID|NAME` (a name that one key has). */
async function keyId(ctx: Context, user: string, given: string): Promise<string> {
  if (given.startsWith('key_')) return given;
  const list: KeyRecord[] = await ctx.client().keys(user).list();
  const named = list.filter((k) => k.name === given);
  if (named.length === 0) throw new CliError(`no key with the id or name "${given}" (see \`algo keys\`)`);
  if (named.length > 1) throw new CliError(`${named.length} keys are named "${given}": give one by its id (${named.map((k) => k.id).join(', ')})`);
  return named[0]!.id;
}

/** The trigger's fields the flags give (create and update). */
async function triggerSpec(ctx: Context, user: string, args: Args): Promise<Partial<NewTrigger>> {
  const spec: Partial<NewTrigger> = { ...filterOf(args), ...enabledOf(args) };
  if (args.string('input') !== undefined && args.string('input-json') !== undefined) throw new UsageError('--input or --input-json, not both');
  if (args.string('input') !== undefined) spec.input = args.string('input')!;
  if (args.string('input-json') !== undefined) {
    try {
      spec.input = JSON.parse(args.string('input-json')!) as unknown;
    } catch {
      throw new UsageError('--input-json takes JSON, like \'{"file": "{{subject}}"}\'');
    }
  }
  if (args.string('output') !== undefined) spec.output = args.string('output') || null;
  if (args.string('timeout') !== undefined) {
    const t = Number(args.string('timeout'));
    if (!Number.isInteger(t) || t < 1) throw new UsageError('--timeout takes a whole number of seconds');
    spec.timeout = t;
  }
  if (args.string('algorithm') !== undefined) spec.algorithm = args.string('algorithm')!;
  if (args.string('key') !== undefined) spec.key = await keyId(ctx, user, args.string('key')!);
  return spec;
}

const TRIGGER_FLAGS = ['types', 'path', 'input', 'input-json', 'output', 'key', 'timeout', 'enable', 'disable'];

export const triggers: Command = {
  summary: 'list, create, change or delete triggers (an algorithm run on your events); their runs',
  usage: `usage: algo triggers [list]
       algo triggers create ALGORITHM [--types TYPE,...] [--path PATTERN] [--input TEMPLATE | --input-json JSON]
                            [--output URI] [--key KEY] [--timeout S] [--disable]
       algo triggers show ID
       algo triggers update ID [--algorithm ALGORITHM] [same flags as create] [--enable|--disable]
       algo triggers delete ID
       algo triggers runs ID [--limit N]

A trigger runs ALGORITHM (owner/name[/version]) on each of your events its filter wants, and
writes the result to --output (docs/events.md). Templates fill {{subject}}, {{name}},
{{data.size}}... The key in use needs allow_algo_management.
  --types T,...     event types, * for one part, ** for any (data.file.created); '' for every type
  --path PATTERN    only events about your data there (data://.my/inbox/**); '' for any
  --input TEMPLATE  the input, sent as text (default: the server's)
  --input-json JSON the input as a JSON template, sent as JSON ('{"file": "{{subject}}"}')
  --output URI      where each result is written (data://.my/out/{{name}}); '' to discard it
  --key KEY         the id or name of your API key whose permissions the runs get (default: the key in use)
  --timeout S       seconds each run may take
  --enable, --disable
  --limit N         runs shown, newest first (default 50)
  --user NAME       whose triggers (default: the user the API key belongs to)`,

  async run(ctx, argv) {
    const args = parseArgs(argv, {
      algorithm: { value: true }, types: { value: true }, path: { value: true }, input: { value: true }, 'input-json': { value: true },
      output: { value: true }, key: { value: true }, timeout: { value: true }, enable: {}, disable: {}, limit: { value: true }, user: { value: true },
    });
    const { action: act, operands } = action(args, 'triggers', {
      list: { args: [], flags: [] },
      create: { args: ['ALGORITHM'], flags: TRIGGER_FLAGS },
      show: { args: ['ID'], flags: [] },
      update: { args: ['ID'], flags: ['algorithm', ...TRIGGER_FLAGS] },
      delete: { args: ['ID'], flags: [] },
      runs: { args: ['ID'], flags: ['limit'] },
    });
    const [id] = operands as [string];
    if (act === 'create' && args.flag('enable')) throw new UsageError('a new trigger is enabled unless --disable');
    let limit: number | undefined;
    if (args.string('limit') !== undefined) {
      limit = Number(args.string('limit'));
      if (!Number.isInteger(limit) || limit < 1) throw new UsageError('--limit takes a whole number from 1');
    }
    const user = await resolveUser(ctx, args.string('user'), '--user');
    const api = ctx.client().triggers(user);

    switch (act) {
      case 'list': {
        const list = await api.list();
        ctx.result(list, () => {
          if (list.length === 0) return 'No triggers: `algo triggers create ALGORITHM` makes one';
          return table(['ID', 'ALGORITHM', 'TYPES', 'PATH', 'OUTPUT', 'STATUS'], list.map((t) => [t.id, t.algorithm, t.types.join(',') || '*', t.path ?? '*', t.output ?? '-', triggerStatus(t)]));
        });
        break;
      }
      case 'create': {
        const made = await api.create({ ...(await triggerSpec(ctx, user, args)), algorithm: id });
        ctx.result(made, () => `Created ${made.id}\n${describeTrigger(made)}`);
        break;
      }
      case 'show': {
        const one = await api.get(id);
        ctx.result(one, () => describeTrigger(one));
        break;
      }
      case 'update': {
        const changes = await triggerSpec(ctx, user, args);
        if (Object.keys(changes).length === 0) throw new UsageError('algo triggers update needs something to change');
        const changed = await api.update(id, changes);
        ctx.result(changed, () => describeTrigger(changed));
        break;
      }
      case 'delete':
        await api.delete(id);
        ctx.result({ deleted: id }, () => `Deleted ${id}`);
        break;
      case 'runs': {
        const list: TriggerRun[] = await api.runs(id, limit === undefined ? {} : { limit });
        ctx.result(list, () => {
          if (list.length === 0) return `No runs of ${id} yet`;
          return table(
            ['RUN', 'CREATED', 'EVENT', 'SUBJECT', 'STATUS', 'HTTP', 'OUTPUT / ERROR'],
            list.map((r) => [r.id, r.created_at, r.event_type, r.subject, r.status, r.http_status === null ? '' : String(r.http_status), r.error ?? r.output ?? '']),
          );
        });
        break;
      }
    }
  },
};

/** events, subscriptions, triggers. */
export const eventCommands: Record<string, Command> = { events, subscriptions, triggers };
