import type { KeyPermissions } from './permissions.ts';
import type { LimitSettings } from '../limits/limits.ts';

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
  /**
   * Set while a trigger's run acts (src/events/triggers.ts), and carried into the requests its
   * algorithm makes: the events its writes raise say so (`data.trigger`), which is how a
   * trigger's own writes never fire it again and chains stop at a depth.
   */
  origin?: TriggerOrigin;
  /** The user's own call limits (user_limits; docs/limits.md), read with the key; absent: the operator's defaults. */
  limits?: LimitSettings | null;
}

/** The trigger run a request is made for. */
export interface TriggerOrigin {
  /** The trigger (`trg_…`). */
  trigger: string;
  /** The run (`run_…`). */
  run: string;
  /** 1 for a run fired by an event no trigger made. */
  depth: number;
  /** The triggers whose runs led here, in order, this one last. */
  chain: string[];
}
