import path from 'node:path';
import type { Config } from '../config.ts';
import { LocalBlobStore, type BlobStore } from './blobStore.ts';
import { S3BlobStore } from './s3BlobStore.ts';

/**
 * The blob stores a deployment can pick, each driver with its own config shape
 * (ALGOHOST_BLOBS): nothing else in the code knows which one runs. Unset, the single-machine
 * default, in the home. Here in data, not beside the metadata stores' registry
 * (store/backends.ts): the S3 store is built on the S3 protocol client of data/connectors, and
 * the store layer sits below data.
 */
type BlobDriver = (config: Config) => BlobStore;

const BLOB_DRIVERS: Record<'local' | 's3', BlobDriver> = {
  local: (config) => new LocalBlobStore(path.join(config.home, 'data')),
  s3: (config) => new S3BlobStore(config.blobs!),
};

export function blobDriver(config: Config): keyof typeof BLOB_DRIVERS {
  return config.blobs ? 's3' : 'local';
}

export function openBlobStore(config: Config): BlobStore {
  return BLOB_DRIVERS[blobDriver(config)](config);
}
