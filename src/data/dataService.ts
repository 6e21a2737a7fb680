import { AppError } from '../errors.ts';
import type { Principal } from '../auth/principal.ts';
import type { Connector } from './connector.ts';
import type { HeldSlots } from '../limits/held.ts';

/** Finds the connector of a caller's connected account (`objstore+label`); undefined when the scheme is not an account's. */
export type AccountConnectors = (principal: Principal, name: string) => Promise<Connector | undefined>;

/**
 * The data API's entry point: picks the connector a request names and applies the key's data
 * permissions, which hold for every connector alike. Connectors are registered by name; the
 * hosted one is `data`; connected accounts (`objstore`, `filehost`, `s3`, `dropbox`, with
 * `+label`) are looked up per caller, since each user has their own.
 */
export class DataService {
  private readonly connectors = new Map<string, Connector>();

  constructor(
    private readonly accounts?: AccountConnectors,
    /** A user's uploads in flight at once, capped (docs/security.md "What one user can hold"). */
    readonly uploads?: HeldSlots,
  ) {}

  /**
   * Holds one of the principal's user's uploads in flight: the release to call (once) when it
   * has ended. 429 `too_many_uploads` at their cap, before a byte is read.
   */
  async holdUpload(principal: Principal): Promise<() => void> {
    return (await this.uploads?.hold(principal.userId)) ?? (() => undefined);
  }

  register(name: string, connector: Connector): void {
    this.connectors.set(name.toLowerCase(), connector);
  }

  /** The connector a request names (lower case), as seen by `principal`. */
  async resolve(principal: Principal, name: string): Promise<Connector> {
    const c = this.connectors.get(name) ?? (await this.accounts?.(principal, name));
    if (!c) {
      throw new AppError('unknown_connector', `no data source named "${name}"; hosted data is data:// (e.g. /v1/data/.my/<collection>), connected accounts are objstore:// and filehost:// (also s3:// and dropbox://), with +label for a non-default one`);
    }
    return c;
  }

  requireRead(principal: Principal): void {
    if (!principal.permissions.allow_data) {
      throw new AppError('key_permission_denied', 'this API key may not read data (allow_data is off)');
    }
  }

  requireWrite(principal: Principal): void {
    this.requireRead(principal);
    if (!principal.permissions.allow_data_write) {
      throw new AppError('key_permission_denied', 'this API key may not change data (allow_data_write is off)');
    }
  }
}
