import { AppError } from '../errors.ts';
import type { Principal } from '../auth/principal.ts';
import type { Connector } from './connector.ts';

/**
 * The data API's entry point: picks the connector a request names and applies the key's data
 * permissions, which hold for every connector alike. Connectors are registered by name; the
 * hosted one is `data`, connected accounts (`objstore`, `filehost`, with `+label`) join later.
 */
export class DataService {
  private readonly connectors = new Map<string, Connector>();

  register(name: string, connector: Connector): void {
    this.connectors.set(name.toLowerCase(), connector);
  }

  connector(name: string): Connector {
    const c = this.connectors.get(name);
    if (!c) {
      throw new AppError('unknown_connector', `no data source named "${name}"; hosted data is data://, e.g. /v1/data/.my/<collection>`);
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
