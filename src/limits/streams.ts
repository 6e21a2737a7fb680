import { AppError } from '../errors.ts';
import type { SharedLimitStore } from './shared.ts';

/** The caps on live event streams (ALGOHOST_MAX_STREAMS_PER_USER, ALGOHOST_MAX_STREAMS); 0 is none. */
export interface StreamCaps {
  /** One user's streams open at once, on every API node together where the store is shared. */
  perUser: number;
  /** Streams open on this node at once, every user's together. */
  perNode: number;
}

/**
 * Slots for live event streams (`GET /v1/users/:user/events`, docs/security.md "What one user
 * can hold"). A stream holds a socket and a listener of the feed for as long as its reader
 * likes, so what one user may hold is capped (one user held 3,000 and slowed everyone), and so
 * is what a node holds, every user together, so that many users at their cap still leave the
 * node its descriptors and its event loop.
 *
 * On PostgreSQL (one or more API nodes) a user's streams are counted in the database, as calls
 * at once are (SharedLimitStore.hold): a user behind a balancer cannot hold the cap on each
 * node. The streams of a node that died are given back by the same sweep as its calls. On
 * SQLite (one node), this process counts them.
 */
export class StreamSlots {
  private readonly users = new Map<number, number>();
  private onNode = 0;

  constructor(
    readonly caps: StreamCaps,
    private readonly shared?: { store: SharedLimitStore; instance: string; log?: (err: unknown) => void },
  ) {}

  /**
   * Holds a slot for one stream of user `userId`: the release to call (once) when the stream
   * ends. Throws 429 `too_many_streams` when the user holds their cap, 503 `server_busy` when
   * the node holds its own.
   */
  async hold(userId: number): Promise<() => void> {
    const { perUser, perNode } = this.caps;
    if (perNode > 0 && this.onNode >= perNode) {
      const e = new AppError('server_busy', `this server has ${perNode} event streams open, as many as it takes (ALGOHOST_MAX_STREAMS); connect again shortly`);
      e.headers = [['retry-after', '5']];
      throw e;
    }
    // Counted before any wait, so that streams opened at once cannot all pass the check.
    this.onNode++;
    const mine = this.users.get(userId) ?? 0;
    this.users.set(userId, mine + 1);
    let given = false;
    const scope = `streams:u${userId}`;
    try {
      if (perUser > 0) {
        const held = this.shared ? await this.shared.store.hold(scope, perUser, this.shared.instance) : mine < perUser;
        if (!held) {
          const e = new AppError('too_many_streams', `you have ${perUser} event streams open, as many as one user may (ALGOHOST_MAX_STREAMS_PER_USER); close one first`, { limit: perUser });
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
      if (this.shared && perUser > 0) {
        this.shared.store.release(scope, this.shared.instance).catch((err: unknown) => this.shared!.log?.(err));
      }
    };
  }

  /** Streams open on this node: every user's, and one user's. */
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
