import { AppError } from '../errors.ts';
import { EVENT_TYPES } from './outbox.ts';

/** What a consumer asks for: event types and a path pattern, each optional (docs/events.md). */
export interface EventFilter {
  /** Whether an event of `type` about `subject` is wanted. */
  matches(type: string, subject: string): boolean;
}

/** Longest type list, type pattern and path pattern taken. */
const MAX_TYPES = 32;
const MAX_TYPE = 64;
const MAX_PATTERN = 1024;

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * A glob as a regular expression: `*` within one segment (between `separator`s), a segment of
 * `**` for any number of segments, none included (`data://a/inbox/**` matches the directory
 * itself and everything below it).
 */
export function globRegExp(glob: string, separator: string): RegExp {
  const sep = escape(separator);
  let re = '';
  glob.split(separator).forEach((part, i) => {
    if (part === '**') re += i === 0 ? '.*' : `(?:${sep}.*)?`;
    else re += (i === 0 ? '' : sep) + part.split('*').map(escape).join(`[^${sep}]*`);
  });
  return new RegExp(`^${re}$`);
}

/**
 * The schemes of connected accounts a path pattern may use, and the protocol each names (the
 * data API's spellings: docs/connectors.md). Events of connected storage have the subject
 * `<protocol>+<label>://<path>`, the label in lower case (src/data/connectors/external.ts).
 */
const ACCOUNT_SCHEMES = new Map([
  ['objstore', 'objstore'],
  ['s3', 'objstore'],
  ['filehost', 'filehost'],
  ['dropbox', 'filehost'],
]);

/**
 * The filter of `types` (a list, or comma-separated: `data.file.*,call.completed`) and `path`,
 * as a user gives them; 400 with what is wrong. A path names the user's own data only: events
 * are only ever about their own things.
 *
 * - `data://.my/inbox/**` (`.my` is `username`; another user's name is refused);
 * - `objstore+backup://bucket/in/**` (or `s3+backup://`): the account labelled `backup` (any
 *   case); `filehost+label://dir/**` (or `dropbox+label://`) likewise. The accounts are the
 *   user's own already, so their paths start at the account's root, as in the data API;
 * - `objstore://bucket/**` without a label: every objstore account of the user's (the subject
 *   names the account by its label, and which one is the default may change), and
 *   `filehost://…` every filehost account.
 */
export function parseFilter(username: string, types: unknown, path: unknown): EventFilter {
  const list = typeof types === 'string' ? types.split(',').map((t) => t.trim()).filter((t) => t !== '') : types === undefined || types === null ? [] : types;
  if (!Array.isArray(list) || !list.every((t): t is string => typeof t === 'string')) {
    throw new AppError('invalid_query', 'types: a list of event types (strings), e.g. ["data.file.*", "call.completed"]');
  }
  if (list.length > MAX_TYPES) throw new AppError('invalid_query', `types: at most ${MAX_TYPES} patterns`);
  const typeRes = list.map((t) => {
    // Each becomes a regular expression: a huge one is refused here, not by V8's compiler.
    if (t.length > MAX_TYPE) throw new AppError('invalid_query', `types: "${t.slice(0, 40)}…" is longer than any event type or pattern of one (${MAX_TYPE} characters at most)`);
    if (!/^[a-z*]+(\.[a-z*]+)*$/.test(t)) throw new AppError('invalid_query', `types: "${t}" is not an event type or a pattern of one (letters, dots, *)`);
    const re = globRegExp(t, '.');
    if (!EVENT_TYPES.some((known) => re.test(known))) throw new AppError('invalid_query', `types: "${t}" matches no event type; docs/events.md lists them: ${EVENT_TYPES.join(', ')}`);
    return re;
  });
  let pathRe: RegExp | undefined;
  if (path !== undefined && path !== null && path !== '') {
    if (typeof path !== 'string' || path.length > MAX_PATTERN) throw new AppError('invalid_query', `path: a pattern of at most ${MAX_PATTERN} characters, e.g. data://.my/inbox/**`);
    pathRe = globRegExp(pathGlob(username, path), '/');
  }
  return {
    matches: (type, subject) => (typeRes.length === 0 || typeRes.some((re) => re.test(type))) && (pathRe === undefined || pathRe.test(subject)),
  };
}

/** A path pattern as the glob of the subjects it matches. */
function pathGlob(username: string, path: string): string {
  const m = /^([A-Za-z][A-Za-z0-9]*)(?:\+([A-Za-z0-9_-]+))?:\/\/(.*)$/s.exec(path);
  if (!m) throw new AppError('invalid_query', `path: "${path}" is not a data URI pattern, e.g. data://.my/inbox/** or objstore+label://bucket/**`);
  const scheme = m[1]!.toLowerCase();
  const label = m[2]?.toLowerCase();
  const rest = m[3]!;
  if (scheme === 'data') {
    if (label !== undefined) throw new AppError('invalid_query', `path: hosted data has no labels; name it data://.my/…`);
    const slash = rest.indexOf('/');
    const who = slash < 0 ? rest : rest.slice(0, slash);
    if (who === '') throw new AppError('invalid_query', `path: "${path}" names no user; name your own data data://.my/…`);
    if (who !== '.my' && who !== username) {
      throw new AppError('invalid_query', `path: events are about your own data only; name it data://.my/… or data://${username}/…`);
    }
    return `data://${username}${slash < 0 ? '' : rest.slice(slash)}`;
  }
  const protocol = ACCOUNT_SCHEMES.get(scheme);
  if (!protocol) {
    throw new AppError('invalid_query', `path: "${scheme}://" is no data source; events tell of data://, objstore:// and filehost:// (also s3:// and dropbox://, with +label)`);
  }
  // `.my` means nothing here (a connected account is the caller's own), and for filehost it
  // could be a real folder's name: refused rather than read one way or the other.
  if (rest === '.my' || rest.startsWith('.my/')) {
    throw new AppError('invalid_query', `path: connected accounts are your own already, and their paths start at the account's root: ${scheme}${m[2] ? `+${m[2]}` : ''}://${rest.slice(4) || '…'} (no .my)`);
  }
  return `${protocol}+${label ?? '*'}://${rest}`;
}
