/**
 * Data commands: ls, mkdir, rmdir, rm, cat here; cp in cp.ts. They take data URIs (data://,
 * objstore[+label]://, filehost[+label]://, s3://, dropbox://; without a scheme, data://) and
 * work through the client SDK, so hosted data and connected accounts behave alike.
 */
import { AlgohostError, ApiError, type AclLevel, type DataEntry } from '../../../../client/src/index.ts';
import { CliError, UsageError, type Command, type Context } from '../context.ts';
import { size } from '../progress.ts';
import { cp } from './cp.ts';
import { baseName, dataUri, eachArg, flags, isNotFound, Out, parentUri, plain, remoteKind } from './data-common.ts';

const URI_HELP = `A <uri> is data://.my/<collection>/..., data://<user>/..., or a connected account's
objstore[+label]://, filehost[+label]://, s3://, dropbox://; without a scheme it means data://.`;

/** `YYYY-MM-DD HH:MM:SS` in local time (TZ applies), as ls -l shows it. */
function timestamp(d: Date | undefined): string {
  if (!d || Number.isNaN(d.getTime())) return '-';
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

function longLine(e: DataEntry): string {
  if (e.type === 'dir') return `${''.padEnd(19)}  ${'[dir]'.padStart(10)}  ${e.name}/`;
  return `${timestamp(e.lastModified).padEnd(19)}  ${size(e.size).padStart(10)}  ${e.name}`;
}

function jsonEntry(e: DataEntry): object {
  if (e.type === 'dir') return { type: 'dir', name: e.name, uri: e.uri };
  const modified = e.lastModified && !Number.isNaN(e.lastModified.getTime()) ? e.lastModified.toISOString() : null;
  return { type: 'file', name: e.name, uri: e.uri, size: e.size, last_modified: modified };
}

const ls: Command = {
  summary: 'list a directory of data (every page); -l for sizes and dates',
  usage: `usage: algo ls [-l] [<uri>]

Lists a directory, all of it (the server's pages are followed). Directories end with "/".
Without <uri>: data://.my, your collections. A file is listed as itself.

  -l, --long   long format: modification time (local time), size, name

With --json: a JSON array of {type: "dir"|"file", name, uri, size, last_modified}.
${URI_HELP}`,
  async run(ctx: Context, args: string[]) {
    const { values, positionals } = flags(args, { long: { type: 'boolean', short: 'l' } });
    if (positionals.length > 1) throw new UsageError(`takes one directory, got ${positionals.length} arguments`);
    const uri = dataUri(positionals[0] ?? 'data://.my');
    const client = ctx.client();
    const out = new Out(ctx.io.stdout);
    const show = (e: DataEntry) => (values.long ? longLine(e) : e.type === 'dir' ? `${e.name}/` : e.name);

    const entries = client.dir(uri.uri).list();
    let first: IteratorResult<DataEntry>;
    try {
      first = await entries.next();
    } catch (err) {
      if (isNotFound(err)) throw new CliError(`no such directory ${uri.uri}`);
      if (!(err instanceof AlgohostError && !(err instanceof ApiError) && err.code === 'type_conflict')) throw plain(err);
      // A file: listed as itself, like ls(1) does.
      const info = await client.file(uri.uri).stat();
      const entry: DataEntry = { type: 'file', name: baseName(uri), uri: uri.uri, size: info.size, lastModified: info.lastModified ?? new Date(NaN) };
      if (ctx.json) await out.write(`${JSON.stringify([jsonEntry(entry)])}\n`);
      else await out.write(`${show(entry)}\n`);
      return;
    }
    if (ctx.json) {
      // A JSON array, written as the pages arrive (one entry a line).
      let sep = '[';
      for (let r = first; !r.done && !out.closed; r = await entries.next()) {
        await out.write(`${sep}${JSON.stringify(jsonEntry(r.value))}`);
        sep = ',\n';
      }
      await out.write(sep === '[' ? '[]\n' : ']\n');
    } else {
      for (let r = first; !r.done && !out.closed; r = await entries.next()) await out.write(`${show(r.value)}\n`);
    }
    if (out.closed) await entries.return();
  },
};

/** The ACL levels by the names the original CLI and its users use. */
const ACL_LEVELS: Record<string, AclLevel> = { private: 'private', 'my-algorithms': 'my_algorithms', my_algorithms: 'my_algorithms', public: 'public' };

const mkdir: Command = {
  summary: 'create a directory (its parent must exist)',
  usage: `usage: algo mkdir [--acl private|my-algorithms|public] <uri>...

Creates each directory; its parent must exist. data://.my/<name> is a collection.
  --acl LEVEL   who may read a new collection: private (you, and algorithms you call),
                my-algorithms (also your algorithms, whoever calls them; the default), or
                public (anyone). Only collections have an ACL; their directories share it.
${URI_HELP}`,
  async run(ctx, args) {
    const { positionals, values } = flags(args, { acl: { type: 'string' } });
    if (positionals.length === 0) throw new UsageError('needs a directory');
    const acl = values.acl === undefined ? undefined : ACL_LEVELS[values.acl.toLowerCase()];
    if (values.acl !== undefined && !acl) throw new UsageError(`--acl is one of private, my-algorithms, public (got "${values.acl}")`);
    const client = ctx.client();
    await eachArg(ctx, 'mkdir', positionals.map(dataUri), 'created', async (uri) => {
      let made: string;
      try {
        made = await client.dir(uri.uri).create(acl ? { acl } : {});
      } catch (err) {
        if (isNotFound(err)) throw new CliError(`no such directory ${parentUri(uri)}`);
        if (err instanceof ApiError && err.code === 'already_exists') throw new CliError(`${uri.uri} already exists`);
        throw plain(err);
      }
      ctx.result({ created: made }, () => `Created directory ${made}`);
    });
  },
};

const rmdir: Command = {
  summary: 'delete a directory; -f with everything in it',
  usage: `usage: algo rmdir [-f] <uri>...

Deletes a directory, which must be empty unless -f is given.

  -f, --force   delete the directory with everything in it
${URI_HELP}`,
  async run(ctx, args) {
    const { values, positionals } = flags(args, { force: { type: 'boolean', short: 'f' } });
    if (positionals.length === 0) throw new UsageError('needs a directory');
    const client = ctx.client();
    await eachArg(ctx, 'rmdir', positionals.map(dataUri), 'deleted', async (uri) => {
      // Checked first: a DELETE on a file's URI would delete the file.
      const kind = await remoteKind(client, uri.uri);
      if (kind.type === 'missing') throw new CliError(`no such directory ${uri.uri}`);
      if (kind.type === 'file') throw new CliError(`${uri.uri} is a file: use rm`);
      let deleted: number;
      try {
        deleted = await client.dir(uri.uri).delete({ force: values.force === true });
      } catch (err) {
        if (err instanceof ApiError && err.code === 'directory_not_empty') throw new CliError(`${uri.uri} is not empty: use -f to delete it with everything in it`);
        if (isNotFound(err)) throw new CliError(`no such directory ${uri.uri}`);
        if (err instanceof ApiError && err.deleted !== undefined) throw new CliError(`${uri.uri}: ${err.message} (${err.deleted} files were deleted before)`);
        throw plain(err);
      }
      ctx.result({ deleted: uri.uri, files: deleted }, () => `Deleted directory ${uri.uri}${deleted > 0 ? ` and ${deleted} file${deleted === 1 ? '' : 's'} in it` : ''}`);
    });
  },
};

const rm: Command = {
  summary: 'delete files',
  usage: `usage: algo rm <uri>...

Deletes each file (a directory: use rmdir). Goes on after one that fails.
${URI_HELP}`,
  async run(ctx, args) {
    const { positionals } = flags(args, {});
    if (positionals.length === 0) throw new UsageError('needs a file');
    const client = ctx.client();
    await eachArg(ctx, 'rm', positionals.map(dataUri), 'deleted', async (uri) => {
      // Checked first: a DELETE on an empty directory's URI would delete the directory.
      const kind = await remoteKind(client, uri.uri);
      if (kind.type === 'missing') throw new CliError(`no such file ${uri.uri}`);
      if (kind.type === 'dir') throw new CliError(`${uri.uri} is a directory: use rmdir (-f to delete what is in it)`);
      try {
        await client.file(uri.uri).delete();
      } catch (err) {
        if (isNotFound(err)) throw new CliError(`no such file ${uri.uri}`);
        throw plain(err);
      }
      ctx.result({ deleted: uri.uri }, () => `Deleted file ${uri.uri}`);
    });
  },
};

const cat: Command = {
  summary: 'write files to stdout',
  usage: `usage: algo cat <uri>...

Writes each file's bytes to stdout, one after the other, as they arrive.
${URI_HELP}`,
  async run(ctx, args) {
    const { positionals } = flags(args, {});
    if (positionals.length === 0) throw new UsageError('needs a file');
    const client = ctx.client();
    const out = new Out(ctx.io.stdout);
    await eachArg(ctx, 'cat', positionals.map(dataUri), 'written', async (uri) => {
      if (out.closed) return;
      let body;
      try {
        body = await client.file(uri.uri).stream();
      } catch (err) {
        if (isNotFound(err)) throw new CliError(`no such file ${uri.uri}`);
        if (err instanceof AlgohostError && !(err instanceof ApiError) && err.code === 'type_conflict') throw new CliError(`${uri.uri} is a directory`);
        throw plain(err);
      }
      for await (const chunk of body) {
        await out.write(chunk as Buffer);
        if (out.closed) {
          body.destroy();
          break;
        }
      }
    });
  },
};

/** Data commands: ls, mkdir, rmdir, rm, cat, cp. */
export const dataCommands: Record<string, Command> = { ls, mkdir, rmdir, rm, cat, cp };
