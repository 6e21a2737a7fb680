import { AppError } from '../errors.ts';
import type { Principal } from '../auth/principal.ts';

/**
 * The three read ACLs of the contract (spec 2.5): private, the owner's algorithms, public.
 * docs/data.md has the full rule table.
 */
export type ReadAcl = 'private' | 'my_algorithms' | 'public';

export const DEFAULT_ACL: ReadAcl = 'my_algorithms';

const FORMS: Record<ReadAcl, string[]> = {
  private: [],
  my_algorithms: ['algo://.my/*'],
  public: ['user://*'],
};

export function aclToApi(acl: ReadAcl): { read: string[] } {
  return { read: [...FORMS[acl]] };
}

/** Reads `{"read": [...]}` from a request; exactly the three forms are accepted. */
export function parseAcl(input: unknown): ReadAcl {
  const read = (input as { read?: unknown } | null)?.read;
  if (typeof input !== 'object' || input === null || Array.isArray(input) || !Array.isArray(read)) {
    throw new AppError('invalid_acl', 'acl must be an object {"read": [...]}');
  }
  if (read.length === 0) return 'private';
  if (read.length === 1 && read[0] === 'user://*') return 'public';
  if (read.length === 1 && read[0] === 'algo://.my/*') return 'my_algorithms';
  throw new AppError(
    'invalid_acl',
    'acl.read must be [] (private), ["algo://.my/*"] (your algorithms) or ["user://*"] (public)',
  );
}

export function aclFromStored(stored: string | null): ReadAcl {
  return stored === 'private' || stored === 'public' || stored === 'my_algorithms' ? stored : DEFAULT_ACL;
}

export function isOwner(principal: Principal, owner: string): boolean {
  return principal.username.toLowerCase() === owner.toLowerCase();
}

/**
 * May `principal` read a collection of `owner` with this ACL? Deny unless a rule allows:
 * - the owner always reads; so does an algorithm the owner calls, because it acts as its caller;
 * - `public`: any authenticated caller;
 * - `my_algorithms`: also any algorithm owned by the owner, whoever calls it.
 */
export function canRead(principal: Principal, owner: string, acl: ReadAcl): boolean {
  if (isOwner(principal, owner)) return true;
  if (acl === 'public') return true;
  if (acl === 'my_algorithms' && principal.algorithm !== undefined) {
    return principal.algorithm.owner.toLowerCase() === owner.toLowerCase();
  }
  return false;
}
