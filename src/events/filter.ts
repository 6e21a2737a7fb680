import { AppError } from '../errors.ts';
import { EVENT_TYPES } from './outbox.ts';

/** What a consumer asks for: event types and a path pattern, each optional (docs/events.md). */
export interface EventFilter {
  /** Whether an event of `type` about `subject` is wanted. */
  matches(type: string, subject: string): boolean;
}

/** Longest type list and path pattern taken. */
const MAX_TYPES = 32;
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
 * The filter of `types` (a list, or comma-separated: `data.file.*,call.completed`) and `path`
 * (`data://.my/inbox/**`; `.my` is `username`), as a user gives them; 400 with what is wrong.
 * A path names the user's own data only: events are only ever about their own things.
 */
export function parseFilter(username: string, types: unknown, path: unknown): EventFilter {
  const list = typeof types === 'string' ? types.split(',').map((t) => t.trim()).filter((t) => t !== '') : types === undefined || types === null ? [] : types;
  if (!Array.isArray(list) || !list.every((t): t is string => typeof t === 'string')) {
    throw new AppError('invalid_query', 'types: a list of event types (strings), e.g. ["data.file.*", "call.completed"]');
  }
  if (list.length > MAX_TYPES) throw new AppError('invalid_query', `types: at most ${MAX_TYPES} patterns`);
  const typeRes = list.map((t) => {
    if (!/^[a-z*]+(\.[a-z*]+)*$/.test(t)) throw new AppError('invalid_query', `types: "${t}" is not an event type or a pattern of one (letters, dots, *)`);
    const re = globRegExp(t, '.');
    if (!EVENT_TYPES.some((known) => re.test(known))) throw new AppError('invalid_query', `types: "${t}" matches no event type; docs/events.md lists them: ${EVENT_TYPES.join(', ')}`);
    return re;
  });
  let pathRe: RegExp | undefined;
  if (path !== undefined && path !== null && path !== '') {
    if (typeof path !== 'string' || path.length > MAX_PATTERN) throw new AppError('invalid_query', `path: a pattern of at most ${MAX_PATTERN} characters, e.g. data://.my/inbox/**`);
    const m = /^([a-z]+):\/\/([^/]+)(\/.*)?$/.exec(path);
    if (!m) throw new AppError('invalid_query', `path: "${path}" is not a data URI pattern, e.g. data://.my/inbox/**`);
    const [, scheme, who, rest] = m;
    if (who !== '.my' && who !== username) {
      throw new AppError('invalid_query', `path: events are about your own data only; name it data://.my/… or ${scheme}://${username}/…`);
    }
    pathRe = globRegExp(`${scheme}://${username}${rest ?? ''}`, '/');
  }
  return {
    matches: (type, subject) => (typeRes.length === 0 || typeRes.some((re) => re.test(type))) && (pathRe === undefined || pathRe.test(subject)),
  };
}
