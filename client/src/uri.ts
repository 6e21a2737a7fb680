/**
 * Data URIs (spec 2.3) and algorithm references (spec 2.1), and the API paths they map to.
 */
import { AlgohostError } from './errors.ts';

/** Sources the server knows: hosted data, and connected accounts by either spelling (compat.md). */
const SCHEMES = ['data', 'objstore', 'filehost', 's3', 'dropbox'];
const URI = /^([A-Za-z][A-Za-z0-9]*)(\+[A-Za-z0-9-]{1,32})?:\/\/(.*)$/s;

export interface DataUri {
  /** `data`, or a connector with its label: `objstore`, `s3+archive`, `filehost+team`. */
  connector: string;
  /** The path inside the source, without leading or trailing slashes ('' for the root). */
  path: string;
  /** The URI written out again: `<connector>://<path>`. */
  uri: string;
}

/**
 * Reads a Data URI. A path without a scheme (`.my/photos/a.jpg`) means hosted data, as it
 * does in the original clients.
 */
export function parseDataUri(input: string): DataUri {
  const m = URI.exec(input);
  if (!m) {
    if (/^[A-Za-z][A-Za-z0-9+-]*:/.test(input)) throw invalid(input);
    const path = trim(input);
    return { connector: 'data', path, uri: `data://${path}` };
  }
  const scheme = m[1]!.toLowerCase();
  const label = m[2] ?? '';
  if (!SCHEMES.includes(scheme) || (scheme === 'data' && label)) throw invalid(input);
  const connector = scheme + label;
  const path = trim(m[3]!);
  return { connector, path, uri: `${connector}://${path}` };
}

function invalid(input: string): AlgohostError {
  return new AlgohostError(
    `"${input.slice(0, 200)}" is not a data URI: use data://, objstore[+label]://, filehost[+label]://, s3[+label]:// or dropbox[+label]://`,
    'invalid_uri',
  );
}

const trim = (path: string) => path.replace(/^\/+/, '').replace(/\/+$/, '');

/** Each segment percent-encoded on its own, so `/` separates and nothing else does. */
export const encodePath = (path: string): string => path.split('/').map(encodeURIComponent).join('/');

/**
 * The API path of a data URI: `/v1/data/<path>` for hosted data (what the original clients
 * send), `/v1/connector/<connector>/<path>` for connected accounts.
 */
export function dataPath(uri: DataUri): string {
  // No encoding survives URL parsing for these: `a/..` would name `a`'s parent. A listing of
  // connected storage can hold such a name (an S3 key `x/../y`); it cannot be addressed.
  if (uri.path.split('/').some((s) => s === '.' || s === '..')) {
    throw new AlgohostError(`${uri.uri.slice(0, 200)} has a "." or ".." segment, which cannot be sent as part of a path`, 'invalid_path');
  }
  const tail = encodePath(uri.path);
  return uri.connector === 'data' ? `/v1/data/${tail}` : `/v1/connector/${encodeURIComponent(uri.connector)}/${tail}`;
}

/** The URI of `name` inside the directory `dir`. */
export function childUri(dir: DataUri, name: string): string {
  return `${dir.connector}://${dir.path ? `${dir.path}/` : ''}${name}`;
}

/** The parent directory's URI and the last segment's name; undefined at a source's root. */
export function splitParent(uri: DataUri): { parent: string; name: string } | undefined {
  if (uri.path === '') return undefined;
  const slash = uri.path.lastIndexOf('/');
  return {
    parent: `${uri.connector}://${slash < 0 ? '' : uri.path.slice(0, slash)}`,
    name: uri.path.slice(slash + 1),
  };
}

export interface AlgoRef {
  owner: string;
  name: string;
  /** A version selector (`1.2.3`, `1.2.*`, `1.*`, `latest`, `latestPrivate`, a build hash), if any. */
  version: string | undefined;
}

/** `owner/name[/version]`, with or without `algo://` and a trailing slash. */
export function parseAlgoRef(input: string): AlgoRef {
  const parts = input.replace(/^algo:\/\//i, '').replace(/\/+$/, '').split('/');
  if (parts.length < 2 || parts.length > 3 || parts.some((p) => p === '')) {
    throw new AlgohostError(`"${input.slice(0, 200)}" is not an algorithm: use owner/name or owner/name/version`, 'invalid_algorithm_ref');
  }
  return { owner: parts[0]!, name: parts[1]!, version: parts[2] };
}
