import { AppError } from '../errors.ts';
import { isWellFormed, NOT_WELL_FORMED } from '../wellFormed.ts';

/** A data request's target: which connector, and the path's segments inside it. */
export interface DataTarget {
  /** Lower-cased connector name: `data`, or `<scheme>[+label]` of a connected account. */
  connector: string;
  segments: string[];
}

export const MAX_SEGMENT_BYTES = 255;
export const MAX_PATH_BYTES = 1024;
export const MAX_DEPTH = 32;

/** Route prefixes under which the data API is served; longest first. */
const CONNECTOR_PREFIXES = ['/api/v1/connector/', '/v1/connector/'];
const DATA_PREFIX = '/v1/data';

const SCHEME_IN_PATH = /^([A-Za-z][A-Za-z0-9]*(?:\+[A-Za-z0-9_-]+)?):\/\/?(.*)$/s;
const CONNECTOR_NAME = /^[a-z][a-z0-9]*(\+[a-z0-9_-]{1,64})?$/;
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;

function invalidPath(message: string): AppError {
  return new AppError('invalid_path', message);
}

export function malformedEncoding(): AppError {
  return invalidPath('the path has a malformed percent-encoding (a "%" not followed by two hex digits, or bytes that are not UTF-8)');
}

function decode(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw malformedEncoding();
  }
}

/** Is this raw request path under one of the data API's prefixes? */
export function isDataPath(rawPath: string): boolean {
  return rawPath === DATA_PREFIX || rawPath.startsWith(DATA_PREFIX + '/') || CONNECTOR_PREFIXES.some((p) => rawPath.startsWith(p));
}

/**
 * Reads the target of a data request from the raw request path (before the query string).
 * The path is percent-decoded once, then split on "/", so an encoded slash (Java's client
 * encodes the whole tail) separates segments like a plain one, and every segment is then
 * checked: no empty, "." or ".." segment, no control character, bounded lengths.
 */
export function parseDataPath(rawPath: string): DataTarget {
  let connector: string;
  let tail: string;
  const prefix = CONNECTOR_PREFIXES.find((p) => rawPath.startsWith(p));
  if (prefix) {
    const rest = rawPath.slice(prefix.length);
    const slash = rest.indexOf('/');
    connector = decode(slash < 0 ? rest : rest.slice(0, slash));
    tail = slash < 0 ? '' : rest.slice(slash + 1);
  } else if (rawPath === DATA_PREFIX || rawPath.startsWith(DATA_PREFIX + '/')) {
    connector = 'data';
    tail = rawPath.slice(DATA_PREFIX.length + 1);
  } else {
    throw new AppError('route_not_found', `no data route at ${rawPath.slice(0, 200)}`);
  }

  // Java's client form-encodes the whole tail: "/" as %2F and a space as "+". A tail with an
  // encoded slash and no literal one can only come from such a client.
  const formEncoded = !tail.includes('/') && /%2f/i.test(tail);
  let path = decode(formEncoded ? tail.replace(/\+/g, ' ') : tail);

  // Other clients pass a connector's URI through untranslated: /v1/data/s3+mine://bucket/a,
  // which a proxy may collapse to /v1/data/s3+mine:/bucket/a.
  if (!prefix) {
    const m = SCHEME_IN_PATH.exec(path);
    if (m) {
      connector = m[1]!;
      path = m[2]!;
    }
  }
  connector = connector.toLowerCase();
  if (!CONNECTOR_NAME.test(connector)) {
    throw invalidPath(`"${connector.slice(0, 80)}" is not a connector name (data, or <protocol>+<label>)`);
  }

  if (Buffer.byteLength(path) > MAX_PATH_BYTES) {
    throw invalidPath(`the path is longer than ${MAX_PATH_BYTES} bytes`);
  }
  if (path.endsWith('/')) path = path.slice(0, -1);
  const segments = path === '' ? [] : path.split('/');
  if (segments.length > MAX_DEPTH) throw invalidPath(`the path is deeper than ${MAX_DEPTH} levels`);
  for (const s of segments) checkSegment(s);
  return { connector, segments };
}

/** Checks that a path built from parts (a parent and a new name) stays within the limits. */
export function checkPathLimits(segments: string[]): void {
  if (segments.length > MAX_DEPTH) throw invalidPath(`the path would be deeper than ${MAX_DEPTH} levels`);
  if (Buffer.byteLength(segments.join('/')) > MAX_PATH_BYTES) throw invalidPath(`the path would be longer than ${MAX_PATH_BYTES} bytes`);
}

/** Checks one name (a path segment, or the name of a directory to create). */
export function checkSegment(s: string): string {
  if (s === '') throw invalidPath('the path has an empty segment ("//"); remove the extra slash');
  if (s === '.' || s === '..') throw invalidPath('"." and ".." are not allowed in data paths');
  if (s.includes('/')) throw invalidPath('a name may not contain "/"');
  if (CONTROL.test(s)) throw invalidPath('names may not contain control characters (including NUL)');
  if (!isWellFormed(s)) throw invalidPath(`a name ${NOT_WELL_FORMED}`);
  if (Buffer.byteLength(s) > MAX_SEGMENT_BYTES) throw invalidPath(`a name is longer than ${MAX_SEGMENT_BYTES} bytes`);
  return s;
}

/** Parses a boolean query parameter the way clients send it (true/True/1, false/False/0). */
export function queryBool(name: string, value: string | undefined): boolean {
  if (value === undefined) return false;
  const v = value.toLowerCase();
  if (v === 'true' || v === '1' || v === '') return true;
  if (v === 'false' || v === '0') return false;
  throw new AppError('invalid_query', `query parameter ${name} must be true or false, got "${value.slice(0, 40)}"`);
}
