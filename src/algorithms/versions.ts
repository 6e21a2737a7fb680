import { AppError } from '../errors.ts';
import type { VersionType } from '../../client/src/types.ts';

export type { VersionType };

/** A published version of an algorithm. */
export interface SemVer {
  major: number;
  minor: number;
  patch: number;
}

export interface PublishedVersion extends SemVer {
  /** Build the version was published from (40 hex). */
  buildHash: string;
  /** Public versions are callable by anyone; private ones only by the owner. */
  public: boolean;
}

/**
 * What the version part of an algorithm call may say (spec 9.2 and compat.md): nothing or
 * `latest`, `latestPrivate`, `X.Y.Z`, `X.Y.*` or `X.Y`, `X.*`, or a build hash (owner only).
 */
export type Selector =
  | { kind: 'latest' }
  | { kind: 'latestPrivate' }
  | { kind: 'exact'; version: SemVer }
  | { kind: 'minor'; major: number; minor: number }
  | { kind: 'major'; major: number }
  | { kind: 'build'; hash: string };

const NUM = '(0|[1-9]\\d{0,8})';
const EXACT = new RegExp(`^${NUM}\\.${NUM}\\.${NUM}$`);
const MINOR = new RegExp(`^${NUM}\\.${NUM}(?:\\.\\*)?$`);
const MAJOR = new RegExp(`^${NUM}\\.\\*$`);
const HASH = /^[0-9a-f]{40}$/;

export function parseSelector(text: string | undefined): Selector {
  // `1.x` and `1.2.x` are common spellings of `1.*` and `1.2.*`.
  const s = (text ?? '').trim().replace(/\.x$/i, '.*');
  if (s === '' || s === 'latest') return { kind: 'latest' };
  if (s === 'latestPrivate') return { kind: 'latestPrivate' };
  let m = EXACT.exec(s);
  if (m) return { kind: 'exact', version: { major: Number(m[1]), minor: Number(m[2]), patch: Number(m[3]) } };
  m = MINOR.exec(s);
  if (m) return { kind: 'minor', major: Number(m[1]), minor: Number(m[2]) };
  m = MAJOR.exec(s);
  if (m) return { kind: 'major', major: Number(m[1]) };
  if (HASH.test(s.toLowerCase())) return { kind: 'build', hash: s.toLowerCase() };
  throw new AppError(
    'invalid_version',
    `"${s.slice(0, 60)}" is not a version: use 1.2.3, 1.2.*, 1.2, 1.*, latest, latestPrivate or a 40-hex build hash`,
  );
}

export function compareSemVer(a: SemVer, b: SemVer): number {
  return a.major - b.major || a.minor - b.minor || a.patch - b.patch;
}

export function formatSemVer(v: SemVer): string {
  return `${v.major}.${v.minor}.${v.patch}`;
}

/**
 * The version a selector names among the published ones, as seen by the caller: partial
 * selectors and `latest` pick the highest public version; `latestPrivate` and an exact version
 * may also pick a private one, for the owner only. Build hashes are resolved by the caller
 * (they name builds, not versions). Undefined when nothing matches.
 */
export function resolveVersion<V extends PublishedVersion>(versions: readonly V[], selector: Selector, isOwner: boolean): V | undefined {
  const highest = (candidates: V[]) =>
    candidates.reduce<V | undefined>((best, v) => (!best || compareSemVer(v, best) > 0 ? v : best), undefined);
  switch (selector.kind) {
    case 'latest':
      return highest(versions.filter((v) => v.public));
    case 'latestPrivate':
      return highest(versions.filter((v) => v.public || isOwner));
    case 'exact': {
      const v = versions.find((c) => compareSemVer(c, selector.version) === 0);
      return v && (v.public || isOwner) ? v : undefined;
    }
    case 'minor':
      return highest(versions.filter((v) => v.public && v.major === selector.major && v.minor === selector.minor));
    case 'major':
      return highest(versions.filter((v) => v.public && v.major === selector.major));
    case 'build':
      return undefined;
  }
}

/** The version a publish of `type` gets after `latest` (none yet: 1.0.0, 0.1.0 or 0.0.1). */
export function nextVersion(latest: SemVer | undefined, type: VersionType): SemVer {
  const base = latest ?? { major: 0, minor: 0, patch: 0 };
  switch (type) {
    case 'major':
      return { major: base.major + 1, minor: 0, patch: 0 };
    case 'minor':
      return { major: base.major, minor: base.minor + 1, patch: 0 };
    case 'revision':
      return { major: base.major, minor: base.minor, patch: base.patch + 1 };
  }
}
