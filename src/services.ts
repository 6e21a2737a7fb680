import path from 'node:path';
import type { Config } from './config.ts';
import { openSqliteStore, type MetadataStore } from './store/db.ts';
import { ServerSecret } from './secret.ts';
import { KeyService } from './auth/keyService.ts';
import { UserService } from './auth/users.ts';
import { LocalBlobStore } from './data/blobStore.ts';
import { HostedConnector, type HostedOptions } from './data/connectors/hosted.ts';
import { DataService } from './data/dataService.ts';
import { MarkerCodec } from './data/marker.ts';
import { AlgorithmRegistry } from './algorithms/registry.ts';
import { probeSandbox, type SandboxSupport } from './runtime/sandbox.ts';

/** Everything the HTTP layer and the commands need, built from one Config. */
export interface Services {
  config: Config;
  store: MetadataStore;
  keys: KeyService;
  users: UserService;
  hosted: HostedConnector;
  data: DataService;
  algorithms: AlgorithmRegistry;
  /** Whether algorithms can run sandboxed here (checked once at start by running bwrap). */
  sandbox: SandboxSupport;
  close(): Promise<void>;
}

export interface ServiceOptions {
  /** Tuning for tests and benchmarks (page size, delete batch); defaults otherwise. */
  hosted?: Partial<Omit<HostedOptions, 'maxUploadBytes'>>;
}

/**
 * Opens the home: metadata store, blob store, secret. The admin CLI uses the same
 * function, so server and CLI always agree on where and how things are stored.
 */
export async function createServices(config: Config, options: ServiceOptions = {}): Promise<Services> {
  const secret = ServerSecret.loadOrCreate(config.home);
  const store = await openSqliteStore(path.join(config.home, 'metadata.sqlite'));
  const blobs = new LocalBlobStore(path.join(config.home, 'data'));
  const markers = new MarkerCodec(secret.derive('list-marker'));
  const hosted = new HostedConnector(store, blobs, markers, {
    maxUploadBytes: config.maxUploadBytes,
    ...options.hosted,
  });
  const data = new DataService();
  data.register('data', hosted);
  const users = new UserService(
    store,
    (trx, ownerId) => hosted.purgeOwner(trx, ownerId),
    (blobIds) => hosted.releaseBlobs(blobIds),
  );
  return {
    config,
    store,
    keys: new KeyService(store.db),
    users,
    hosted,
    data,
    algorithms: new AlgorithmRegistry(store.db, markers),
    sandbox: probeSandbox(config.bwrapPath),
    close: () => store.close(),
  };
}
