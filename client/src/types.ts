/**
 * Records the server sends and the request bodies it takes, with the server's field names
 * (snake_case, as on the wire and in the original service's API): what is documented in
 * docs/algorithms.md, docs/auth.md and docs/connectors.md is what a caller gets here.
 */

export interface AlgorithmDetails {
  label: string;
  summary: string;
  tagline: string;
}

export type Language = 'python3' | 'javascript' | 'typescript';

export interface AlgorithmSettings {
  language: Language;
  source_visibility: 'open' | 'closed';
  license: string;
  network_access: 'isolated' | 'full';
  /** May call other algorithms. */
  pipeline_enabled: boolean;
  algorithm_callability: 'public' | 'private';
  royalty_microcredits: number;
  algorithm_environment: string | null;
}

/** Body of create and update: what is not sent keeps its value (or default). */
export interface AlgorithmChanges {
  details?: Partial<AlgorithmDetails>;
  /** `language` also takes the original service's names (`python3-1`, `nodejs`...). */
  settings?: Partial<Omit<AlgorithmSettings, 'language'>> & { language?: Language | (string & {}) };
}

export interface Algorithm {
  id: string;
  name: string;
  owner: string;
  details: AlgorithmDetails;
  settings: AlgorithmSettings;
  resource_type: 'algorithm';
  self_link: string;
  created_at: string;
  updated_at: string;
}

/** What a source upload stored: a content hash of the tree, its file count and size. */
export interface SourceInfo {
  hash: string;
  files: number;
  bytes: number;
}

export interface Build {
  /** 40 hex digits: also a version selector for the owner (`owner/name/<build_id>`). */
  build_id: string;
  commit_sha: string;
  status: 'in-progress' | 'succeeded' | 'failed';
  language: Language;
  entry: string | null;
  started_at: string | null;
  finished_at: string | null;
  resource_type: 'algorithm_build';
  version_info: { git_hash: string };
}

/** A compile's answer: the algorithm, the build, and whether it built (the log either way). */
export interface CompileResult extends Algorithm {
  version_info: { git_hash: string };
  compilation: { successful: boolean; output: string };
  build: Build;
}

export type VersionType = 'major' | 'minor' | 'revision';

export interface PublishRequest {
  /** Sent along, these update the algorithm before it is published. */
  details?: Partial<AlgorithmDetails>;
  settings?: AlgorithmChanges['settings'];
  version_info?: { version_type?: VersionType; release_notes?: string; sample_input?: unknown };
}

/** A published version: the algorithm as published, with the version's facts. */
export interface AlgorithmVersion extends Algorithm {
  version_info: {
    semantic_version: string;
    git_hash: string;
    release_notes: string;
    sample_input: unknown;
  };
  published_at: string | null;
}

/** A page of a list answer (compat.md): `marker` and `next_link` are null on the last. */
export interface Page<T> {
  marker: string | null;
  next_link: string | null;
  results: T[];
}

/** What an API key may do (docs/auth.md). */
export interface KeyPermissions {
  allow_algo: boolean;
  /** `algo://*`, `algo://owner/*`, `algo://owner/name/*`. */
  algo_acl: string[];
  allow_web_algo: boolean;
  referer_host: string | null;
  allow_data: boolean;
  allow_data_write: boolean;
  allow_algo_management: boolean;
}

export interface KeyRecord {
  id: string;
  name: string;
  /** The key's first 8 characters, to tell keys apart. */
  prefix: string;
  created_at: string;
  permissions: KeyPermissions;
}

/** A new key: the only time its secret (`api_key`) is shown. */
export interface CreatedKey extends KeyRecord {
  api_key: string;
}

export interface KeyChanges {
  name?: string;
  /** Merged over the current permissions; a key cannot grant what it lacks. */
  permissions?: Partial<KeyPermissions>;
}

export type ConnectorProtocol = 'objstore' | 'filehost';
export type ConnectorProvider = 's3' | 'webdav' | 'dropbox';

/** A connected account as the server shows it: `cred_data` without its secret fields. */
export interface ConnectedAccount {
  label: string;
  protocol: ConnectorProtocol;
  provider: ConnectorProvider;
  is_default: boolean;
  /** `*`, or a prefix ending in `/*`. */
  path: string;
  writeable: boolean;
  cred_data: Record<string, string | boolean>;
  created_at: string;
  updated_at: string;
}

/** A new account (docs/connectors.md lists `cred_data` per provider). */
export interface NewConnectedAccount {
  label: string;
  protocol: ConnectorProtocol;
  provider?: ConnectorProvider;
  is_default?: boolean;
  cred_data: Record<string, string | boolean>;
  path?: string;
  writeable?: boolean;
}

/** Changes to an account; `cred_data` is merged over what is stored. */
export interface ConnectedAccountChanges {
  is_default?: boolean;
  path?: string;
  writeable?: boolean;
  cred_data?: Record<string, string | boolean>;
}
