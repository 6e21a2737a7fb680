import { AppError, type ErrorCode } from '../errors.ts';
import type { SharedLimitStore } from './shared.ts';

/**
 * A cap on something a user keeps until they delete it: API keys, connected accounts,
 * subscriptions, triggers (docs/security.md "What one user can hold"). Past it, 409: waiting
 * frees nothing (docs/decisions/003).
 */
export interface StoredCap {
  code: ErrorCode;
  /** What a user keeps, plural, for the refusal: "API keys". */
  what: string;
  setting: string;
  /** What a refused user can do about it. */
  advice: string;
}

/**
 * Throws the cap's refusal when a user who has `have` already may have at most `cap` (0: no cap).
 * Counted and added in one write by the caller, so that things made at once cannot pass it together.
 */
export function checkStoredCap(kind: StoredCap, have: number | string | bigint | undefined, cap: number): void {
  if (cap > 0 && Number(have ?? 0) >= cap) throw new AppError(kind.code, `you have ${cap} ${kind.what}, as many as one user may (${kind.setting}); ${kind.advice}`, { limit: cap });
}

/** Something a user holds open while it lasts (docs/security.md "What one user can hold"). */
export interface HeldKind {
  /** Its scope in the database's counts (SharedLimitStore): `<name>:u<user id>`. */
  name: string;
  /** The refusal of one more than a user may hold (429). */
  code: ErrorCode;
  /** What a user holds, plural, for the refusal: "event streams open". */
  what: string;
  /** The settings of the caps, named in the refusals. */
  perUserSetting: string;
  perNodeSetting?: string;
  /** What a refused user can do about it. */
  advice: string;
}

/** The caps of one kind; 0 is none. */
export interface HeldCaps {
  /** One user's at once, on every API node together where the store is shared. */
  perUser: number;
  /** This node's at once, every user's together (0: none). */
  perNode?: number;
}

export const STREAMS: HeldKind = {
  name: 'streams',
  code: 'too_many_streams',
  what: 'event streams open',
  perUserSetting: 'ALGOHOST_MAX_STREAMS_PER_USER',
  perNodeSetting: 'ALGOHOST_MAX_STREAMS',
  advice: 'close one first',
};
export const UPLOADS: HeldKind = {
  name: 'uploads',
  code: 'too_many_uploads',
  what: 'uploads in flight',
  perUserSetting: 'ALGOHOST_MAX_UPLOADS_PER_USER',
  advice: 'send it again when one has finished',
};
export const BUILDS: HeldKind = {
  name: 'builds',
  code: 'too_many_builds',
  what: 'compiles running or waiting for a build slot',
  perUserSetting: 'ALGOHOST_MAX_BUILDS_PER_USER',
  advice: 'compile again when one has finished',
};
export const GIT: HeldKind = {
  name: 'git',
  code: 'too_many_git_requests',
  what: 'git requests (clones, fetches, pushes) under way',
  perUserSetting: 'ALGOHOST_MAX_GIT_REQUESTS_PER_USER',
  advice: 'try again when one has finished',
};

/**
 * Slots for what a user holds open while it lasts: live event streams, uploads in flight,
 * compiles, git requests (docs/security.md "What one user can hold"). Each holds a socket,
 * and some a process or a build slot, for as long as the user likes, so what one user may hold
 * at once is capped (one user held 3,000 event streams and slowed everyone), and for streams so
 * is what a node holds, every user together, so that many users at their cap still leave the
 * node its descriptors and its event loop.
 *
 * On PostgreSQL (one or more API nodes) a user's holds are counted in the database, as calls
 * at once are (SharedLimitStore.hold): a user behind a balancer cannot hold the cap on each
 * node. The holds of a node that died are given back by the same sweep as its calls. On
 * SQLite (one node), this process counts them.
 */
export class HeldSlots {
  private readonly users = new Map<number, number>();
  private onNode = 0;

  constructor(
    readonly kind: HeldKind,
    readonly caps: HeldCaps,
    private readonly shared?: { store: SharedLimitStore; instance: string; log?: (err: unknown) => void },
  ) {}

  /**
   * Holds a slot for user `userId`: the release to call (once) when what it holds ends.
   * Throws 429 with the kind's code when the user holds their cap, 503 `server_busy` when the
   * node holds its own.
   */
  async hold(userId: number): Promise<() => void> {
    const { kind } = this;
    const { perUser } = this.caps;
    const perNode = this.caps.perNode ?? 0;
    if (perNode > 0 && this.onNode >= perNode) {
      const e = new AppError('server_busy', `this server has ${perNode} ${kind.what}, as many as it takes (${kind.perNodeSetting}); try again shortly`);
      e.headers = [['retry-after', '5']];
      throw e;
    }
    // Counted before any wait, so that requests at once cannot all pass the check.
    this.onNode++;
    const mine = this.users.get(userId) ?? 0;
    this.users.set(userId, mine + 1);
    let given = false;
    const scope = `${kind.name}:u${userId}`;
    try {
      if (perUser > 0) {
        const held = this.shared ? await this.shared.store.hold(scope, perUser, this.shared.instance) : mine < perUser;
        if (!held) {
          const e = new AppError(kind.code, `you have ${perUser} ${kind.what}, as many as one user may (${kind.perUserSetting}); ${kind.advice}`, { limit: perUser });
          e.headers = [['retry-after', '5']];
          throw e;
        }
      }
      given = true;
    } finally {
      if (!given) this.forget(userId);
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.forget(userId);
      // Retried (releaseSoon): a release lost to a passing fault would hold the user's slot until this node is gone.
      if (this.shared && perUser > 0) this.shared.store.releaseSoon(scope, this.shared.instance, this.shared.log);
    };
  }

  /** Holds on this node: every user's, and one user's. */
  open(userId?: number): number {
    return userId === undefined ? this.onNode : (this.users.get(userId) ?? 0);
  }

  private forget(userId: number): void {
    this.onNode--;
    const n = (this.users.get(userId) ?? 1) - 1;
    if (n <= 0) this.users.delete(userId);
    else this.users.set(userId, n);
  }
}
