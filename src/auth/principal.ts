import type { KeyPermissions } from './permissions.ts';

/** Who is making a request, as established by authentication. */
export interface Principal {
  userId: number;
  username: string;
  keyId: string;
  permissions: KeyPermissions;
  /**
   * The algorithm on whose behalf a request is made, when it comes from inside a running
   * algorithm (set by the runtime, never by a client). Data ACLs take it into account.
   */
  algorithm?: { owner: string; name: string };
}
