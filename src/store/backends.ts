import path from 'node:path';
import type { Config } from '../config.ts';
import type { MetadataStore } from './db.ts';
import { openSqliteStore } from './sqliteStore.ts';
import { openPostgresStore } from './postgresStore.ts';
import { LocalBlobStore, type BlobStore } from '../data/blobStore.ts';
import { S3BlobStore } from '../data/s3BlobStore.ts';

/**
 * The backends a deployment can pick, one registry per family, each driver with its own
 * config shape (ALGOHOST_DATABASE_URL, ALGOHOST_BLOBS): nothing else in the code knows which
 * one runs. Unset settings mean the single-machine defaults, in the home.
 */
type MetadataDriver = (config: Config, options: { migrate: boolean }) => Promise<MetadataStore>;
type BlobDriver = (config: Config) => BlobStore;

const METADATA_DRIVERS: Record<'sqlite' | 'postgres', MetadataDriver> = {
  // SQLite migrates at every open: it is one file, taken under its own write lock.
  sqlite: async (config) => openSqliteStore(path.join(config.home, 'metadata.sqlite')),
  postgres: async (config, { migrate }) => openPostgresStore({ url: config.database!.url, poolSize: config.database!.poolSize, migrate }),
};

const BLOB_DRIVERS: Record<'local' | 's3', BlobDriver> = {
  local: (config) => new LocalBlobStore(path.join(config.home, 'data')),
  s3: (config) => new S3BlobStore(config.blobs!),
};

export function metadataDriver(config: Config): keyof typeof METADATA_DRIVERS {
  return config.database ? 'postgres' : 'sqlite';
}

export function blobDriver(config: Config): keyof typeof BLOB_DRIVERS {
  return config.blobs ? 's3' : 'local';
}

export function openMetadataStore(config: Config, options: { migrate?: boolean } = {}): Promise<MetadataStore> {
  return METADATA_DRIVERS[metadataDriver(config)](config, { migrate: options.migrate ?? true });
}

export function openBlobStore(config: Config): BlobStore {
  return BLOB_DRIVERS[blobDriver(config)](config);
}
