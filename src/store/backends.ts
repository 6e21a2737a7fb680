import path from 'node:path';
import type { Config } from '../config.ts';
import type { MetadataStore } from './db.ts';
import { openSqliteStore } from './sqliteStore.ts';
import { openPostgresStore } from './postgresStore.ts';

/**
 * The metadata stores a deployment can pick, each driver with its own config shape
 * (ALGOHOST_DATABASE_URL): nothing else in the code knows which one runs. Unset settings mean
 * the single-machine default, in the home. The blob stores' registry is data/blobBackends.ts.
 */
type MetadataDriver = (config: Config, options: { migrate: boolean }) => Promise<MetadataStore>;

const METADATA_DRIVERS: Record<'sqlite' | 'postgres', MetadataDriver> = {
  // SQLite migrates at every open: it is one file, taken under its own write lock.
  sqlite: async (config) => openSqliteStore(path.join(config.home, 'metadata.sqlite')),
  postgres: async (config, { migrate }) => openPostgresStore({ url: config.database!.url, poolSize: config.database!.poolSize, migrate }),
};

export function metadataDriver(config: Config): keyof typeof METADATA_DRIVERS {
  return config.database ? 'postgres' : 'sqlite';
}

export function openMetadataStore(config: Config, options: { migrate?: boolean } = {}): Promise<MetadataStore> {
  return METADATA_DRIVERS[metadataDriver(config)](config, { migrate: options.migrate ?? true });
}
