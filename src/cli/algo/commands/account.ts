import type { ConnectorProtocol, ConnectorProvider, KeyPermissions, KeyRecord, NewConnectedAccount } from '../../../../client/src/index.ts';
import { CliError, UsageError, type Command } from '../context.ts';
import { noMore, parseArgs, resolveUser, table } from './common.ts';
import { Prompter } from './prompt.ts';

function permissionSummary(p: KeyPermissions): string {
  const on = [
    p.allow_algo && 'algo',
    p.allow_web_algo && 'web',
    p.allow_data && 'data',
    p.allow_data_write && 'data-write',
    p.allow_algo_management && 'manage',
  ].filter(Boolean);
  const acl = p.algo_acl.length === 1 && p.algo_acl[0] === 'algo://*' ? '' : ` acl=${p.algo_acl.join(',') || 'none'}`;
  return `${on.join(',') || 'none'}${acl}${p.referer_host ? ` referer=${p.referer_host}` : ''}`;
}

export const keys: Command = {
  summary: 'list, create or revoke your API keys',
  usage: `usage: algo keys [list]
       algo keys create NAME [--permissions JSON]
       algo keys revoke ID|NAME

Your own keys (the key in use needs allow_algo_management). A new key is printed once, on
stdout; without --permissions it gets the permissions of the key in use, and a key can never
grant more than it has. --permissions takes JSON such as '{"allow_data_write": false}'
(fields: allow_algo, algo_acl, allow_web_algo, referer_host, allow_data, allow_data_write,
allow_algo_management).
  --user NAME   whose keys (default: the user the API key belongs to)`,

  async run(ctx, argv) {
    const args = parseArgs(argv, { permissions: { value: true }, user: { value: true } });
    const [action = 'list', arg] = args.positionals;
    const expect = action === 'list' ? 1 : 2;
    if (!['list', 'create', 'revoke'].includes(action)) throw new UsageError(`unknown action "${action}": list, create or revoke`);
    if (action !== 'list' && !arg) throw new UsageError(`algo keys ${action} needs ${action === 'create' ? 'a NAME' : 'an ID or NAME'}`);
    noMore(args, expect);
    let permissions: Partial<KeyPermissions> | undefined;
    const perms = args.string('permissions');
    if (perms !== undefined) {
      if (action !== 'create') throw new UsageError('--permissions goes with create');
      try {
        permissions = JSON.parse(perms) as Partial<KeyPermissions>;
      } catch {
        throw new UsageError('--permissions takes a JSON object, like \'{"allow_data_write": false}\'');
      }
      if (!permissions || typeof permissions !== 'object' || Array.isArray(permissions)) throw new UsageError('--permissions takes a JSON object');
    }
    const user = await resolveUser(ctx, args.string('user'), '--user');
    const api = ctx.client().keys(user);

    if (action === 'list') {
      const list = await api.list();
      ctx.result(list, () => table(['ID', 'NAME', 'PREFIX', 'CREATED', 'PERMISSIONS'], list.map((k) => [k.id, k.name, k.prefix, k.created_at, permissionSummary(k.permissions)])));
    } else if (action === 'create') {
      const key = await api.create({ name: arg!, ...(permissions ? { permissions } : {}) });
      if (!ctx.json) ctx.note(`Created key "${key.name}" (${key.id}, ${permissionSummary(key.permissions)}). This is the only time it is shown:`);
      ctx.result(key, () => key.api_key);
    } else {
      let id = arg!;
      if (!id.startsWith('key_')) {
        const list: KeyRecord[] = await api.list();
        const named = list.filter((k) => k.name === id);
        if (named.length === 0) throw new CliError(`no key with the id or name "${id}" (see \`algo keys\`)`);
        if (named.length > 1) throw new CliError(`${named.length} keys are named "${id}": revoke one by its id (${named.map((k) => k.id).join(', ')})`);
        id = named[0]!.id;
      }
      await api.revoke(id);
      ctx.result({ revoked: id }, () => `Revoked ${id}`);
    }
  },
};

/** cred_data fields that are secrets, by provider: asked for (hidden) when not given. */
const SECRETS: Record<ConnectorProvider, string[]> = {
  s3: ['access_key_id', 'secret_access_key'],
  webdav: ['password'],
  dropbox: ['access_token'],
};
const PROTOCOL: Record<ConnectorProvider, ConnectorProtocol> = { s3: 'objstore', webdav: 'filehost', dropbox: 'filehost' };

export const connectors: Command = {
  summary: 'list, add or remove connected storage accounts (objstore://, filehost://)',
  usage: `usage: algo connectors [list]
       algo connectors add LABEL --provider s3|webdav|dropbox [--cred FIELD=VALUE]...
                           [--default] [--path PATH] [--writeable]
       algo connectors remove LABEL

Your own connected accounts (the key in use needs allow_algo_management); docs/connectors.md
lists each provider's fields. Secret fields (s3: access_key_id, secret_access_key; webdav:
password; dropbox: access_token) not given with --cred are asked for on stdin (not echoed on
a terminal; an empty answer leaves the field out), so they stay out of the process list.
  --provider      s3 (objstore://), webdav or dropbox (filehost://)
  --cred F=V      a cred_data field: endpoint, region, force_path_style (s3), url, username (webdav)
  --default       make it the default account of its protocol (the first one is anyway)
  --path PATH     what it exposes: * (default) or a prefix ending in /* (bucket/reports/*)
  --writeable     allow writes and deletes (default: read only)
  --user NAME     whose accounts (default: the user the API key belongs to)`,

  async run(ctx, argv) {
    const args = parseArgs(argv, {
      provider: { value: true }, protocol: { value: true }, cred: { value: true }, default: {}, path: { value: true },
      writeable: {}, user: { value: true },
    });
    const [action = 'list', label] = args.positionals;
    if (!['list', 'add', 'remove'].includes(action)) throw new UsageError(`unknown action "${action}": list, add or remove`);
    if (action !== 'list' && !label) throw new UsageError(`algo connectors ${action} needs a LABEL`);
    noMore(args, action === 'list' ? 1 : 2);
    const addOnly = ['provider', 'protocol', 'cred', 'default', 'path', 'writeable'].filter((f) => args.flag(f));
    if (action !== 'add' && addOnly.length) throw new UsageError(`--${addOnly[0]} goes with add`);

    let account: NewConnectedAccount | undefined;
    if (action === 'add') {
      const provider = args.string('provider') as ConnectorProvider | undefined;
      if (!provider || !SECRETS[provider]) throw new UsageError(`--provider is one of s3, webdav, dropbox${provider ? ` (got "${provider}")` : ''}`);
      const protocol = (args.string('protocol') ?? PROTOCOL[provider]) as ConnectorProtocol;
      if (protocol !== PROTOCOL[provider]) throw new UsageError(`the ${provider} provider speaks the ${PROTOCOL[provider]} protocol, not "${protocol}"`);
      const cred: Record<string, string | boolean> = {};
      for (const pair of args.strings('cred')) {
        const eq = pair.indexOf('=');
        if (eq <= 0) throw new UsageError(`--cred takes FIELD=VALUE (got "${pair}")`);
        const field = pair.slice(0, eq);
        const value = pair.slice(eq + 1);
        cred[field] = field === 'force_path_style' ? value === 'true' : value;
      }
      const missing = SECRETS[provider].filter((f) => cred[f] === undefined);
      if (missing.length) {
        const prompter = new Prompter(ctx.io);
        try {
          for (const field of missing) {
            const answer = await prompter.ask(`${field}: `, { secret: true });
            if (answer) cred[field] = answer;
          }
        } finally {
          prompter.close();
        }
      }
      account = {
        label: label!, protocol, provider, cred_data: cred,
        ...(args.flag('default') ? { is_default: true } : {}),
        ...(args.string('path') !== undefined ? { path: args.string('path')! } : {}),
        ...(args.flag('writeable') ? { writeable: true } : {}),
      };
    }

    const user = await resolveUser(ctx, args.string('user'), '--user');
    const api = ctx.client().connectors(user);
    if (action === 'list') {
      const list = await api.list();
      ctx.result(list, () => {
        if (list.length === 0) return 'No connected accounts: `algo connectors add` connects one';
        return table(
          ['LABEL', 'URI', 'PROVIDER', 'ACCESS', 'PATH', 'DETAILS'],
          list.map((a) => [
            a.label,
            `${a.protocol}+${a.label}://${a.is_default ? ` (${a.protocol}://)` : ''}`,
            a.provider,
            a.writeable ? 'read-write' : 'read-only',
            a.path,
            Object.entries(a.cred_data).map(([k, v]) => `${k}=${String(v)}`).join(' '),
          ]),
        );
      });
    } else if (action === 'add') {
      const made = await api.create(account!);
      ctx.result(made, () => `Connected ${made.label}: ${made.protocol}+${made.label}://${made.is_default ? ` (the default ${made.protocol}://)` : ''}, ${made.writeable ? 'read-write' : 'read-only'}`);
    } else {
      await api.delete(label!);
      ctx.result({ removed: label }, () => `Removed ${label}`);
    }
  },
};
