import { AppError } from '../errors.ts';

/** What one API key may do (field names from the original service's key records): the wire record. */
import type { KeyLimits, KeyPermissions } from '../../client/src/types.ts';
export type { KeyLimits, KeyPermissions };

export const FULL_PERMISSIONS: Readonly<KeyPermissions> = Object.freeze({
  allow_algo: true,
  algo_acl: ['algo://*'],
  allow_web_algo: true,
  referer_host: null,
  allow_data: true,
  allow_data_write: true,
  allow_algo_management: true,
});

const BOOLEAN_FIELDS = ['allow_algo', 'allow_web_algo', 'allow_data', 'allow_data_write', 'allow_algo_management'] as const;
const ALL_FIELDS = new Set<string>([...BOOLEAN_FIELDS, 'algo_acl', 'referer_host', 'limits']);
const LIMIT_FIELDS = ['calls_per_min', 'burst', 'concurrency', 'compute_seconds_per_month', 'storage_bytes', 'requests_per_min'] as const;
/** The largest value of each limit (bytes stored may be large). */
const LIMIT_MAX: Record<(typeof LIMIT_FIELDS)[number], number> = {
  calls_per_min: 10_000_000,
  burst: 10_000_000,
  concurrency: 10_000_000,
  compute_seconds_per_month: 1_000_000_000_000,
  storage_bytes: Number.MAX_SAFE_INTEGER,
  requests_per_min: 10_000_000,
};

const NAME = '[A-Za-z][A-Za-z0-9_]{0,29}';
const ALGO_ACL_ENTRY = new RegExp(`^algo://(\\*|${NAME}/\\*|${NAME}/[A-Za-z][A-Za-z0-9_]{0,63}/\\*)$`);
const REFERER_HOST = /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(:\d{1,5})?$/i;

function invalid(message: string): AppError {
  return new AppError('invalid_permissions', message);
}

/**
 * Reads a (possibly partial) permissions object from a request, over `base`. Unknown fields
 * and wrong types are refused rather than ignored: a typo in a security setting must not
 * silently leave a key more powerful than its owner meant.
 */
export function parsePermissions(input: unknown, base: Readonly<KeyPermissions>): KeyPermissions {
  if (input === undefined || input === null) return { ...base, algo_acl: [...base.algo_acl] };
  if (typeof input !== 'object' || Array.isArray(input)) throw invalid('permissions must be a JSON object');
  const out: KeyPermissions = { ...base, algo_acl: [...base.algo_acl] };
  for (const [field, value] of Object.entries(input as Record<string, unknown>)) {
    if (!ALL_FIELDS.has(field)) {
      throw invalid(`unknown permission "${field}"; known: ${[...ALL_FIELDS].join(', ')}`);
    }
    if ((BOOLEAN_FIELDS as readonly string[]).includes(field)) {
      if (typeof value !== 'boolean') throw invalid(`${field} must be true or false`);
      out[field as (typeof BOOLEAN_FIELDS)[number]] = value;
    } else if (field === 'algo_acl') {
      if (!Array.isArray(value) || value.some((v) => typeof v !== 'string' || !ALGO_ACL_ENTRY.test(v))) {
        throw invalid('algo_acl must be an array of "algo://*", "algo://OWNER/*" or "algo://OWNER/NAME/*"');
      }
      out.algo_acl = [...new Set(value as string[])];
    } else if (field === 'referer_host') {
      if (value !== null && (typeof value !== 'string' || !REFERER_HOST.test(value))) {
        throw invalid('referer_host must be null or a host name such as "example.com" or "*.example.com"');
      }
      out.referer_host = value === null ? null : (value as string).toLowerCase();
    } else if (field === 'limits') {
      out.limits = parseKeyLimits(value);
    }
  }
  return out;
}

/** A key's own limits (`limits`): null, or an object of whole numbers of at least 1. */
function parseKeyLimits(value: unknown): KeyLimits | null {
  if (value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) throw invalid('limits must be null or an object such as {"calls_per_min": 60, "burst": 5, "concurrency": 2, "compute_seconds_per_month": 3600, "storage_bytes": 1000000000}');
  const out: KeyLimits = {};
  for (const [field, n] of Object.entries(value as Record<string, unknown>)) {
    if (!(LIMIT_FIELDS as readonly string[]).includes(field)) throw invalid(`unknown limit "${field}"; known: ${LIMIT_FIELDS.join(', ')}`);
    if (n === null) continue;
    const max = LIMIT_MAX[field as (typeof LIMIT_FIELDS)[number]];
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > max) throw invalid(`limits.${field} must be a whole number from 1 to ${max.toLocaleString('en-US')} (leave it out for the user's)`);
    out[field as (typeof LIMIT_FIELDS)[number]] = n;
  }
  return Object.keys(out).length === 0 ? null : out;
}

/** True when every algorithm that `child` admits is admitted by `parent`. */
function aclCovers(parent: readonly string[], child: string): boolean {
  return parent.some((p) => p === 'algo://*' || child === p || (p.endsWith('/*') && child.startsWith(p.slice(0, -1))));
}

/**
 * A key may only hand out what it has itself: the permissions of a key created or changed
 * by another key must be a subset of the acting key's. Returns the first field that exceeds.
 */
export function exceedingPermission(child: KeyPermissions, parent: KeyPermissions): string | null {
  for (const f of BOOLEAN_FIELDS) {
    if (child[f] && !parent[f]) return f;
  }
  if (child.allow_algo && !child.algo_acl.every((c) => aclCovers(parent.algo_acl, c))) return 'algo_acl';
  if (child.allow_web_algo && parent.referer_host !== null && child.referer_host !== parent.referer_host) {
    return 'referer_host';
  }
  // A key held to a limit hands out no key without it, or with a higher one.
  for (const f of LIMIT_FIELDS) {
    const held = parent.limits?.[f];
    if (held !== undefined && (child.limits?.[f] === undefined || child.limits[f]! > held)) return `limits.${f}`;
  }
  return null;
}
