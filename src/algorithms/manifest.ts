import { AppError } from '../errors.ts';
import { isWellFormed, NOT_WELL_FORMED } from '../wellFormed.ts';
import type { AlgorithmDetails, AlgorithmSettings, Language } from '../../client/src/types.ts';

// The wire records (the client's types are the one definition): re-exported for the server.
export type { AlgorithmDetails, AlgorithmSettings, Language };

export const ALGORITHM_NAME = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;

/** Language names the original service and its clients use, mapped to ours. */
const LANGUAGES: Record<string, Language> = {
  python3: 'python3',
  'python3-1': 'python3',
  python: 'python3',
  javascript: 'javascript',
  nodejs: 'javascript',
  typescript: 'typescript',
};

export const DEFAULT_SETTINGS: Readonly<AlgorithmSettings> = Object.freeze({
  // The Python client's own tests create an algorithm without a language and expect the
  // Python template: Python is the default.
  language: 'python3',
  source_visibility: 'closed',
  license: 'apl',
  network_access: 'isolated',
  pipeline_enabled: true,
  algorithm_callability: 'public',
  royalty_microcredits: 0,
  algorithm_environment: null,
});

function bad(message: string): AppError {
  return new AppError('invalid_body', message);
}

function object(value: unknown, what: string): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw bad(`${what} must be a JSON object`);
  return value as Record<string, unknown>;
}

function oneOf<T extends string>(field: string, value: unknown, allowed: readonly T[]): T {
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw bad(`settings.${field} must be one of ${allowed.join(', ')}`);
  }
  return value as T;
}

function text(field: string, value: unknown, max: number): string {
  if (typeof value !== 'string' || value.length > max) throw bad(`${field} must be a string of at most ${max} characters`);
  if (!isWellFormed(value)) throw bad(`${field} ${NOT_WELL_FORMED}`);
  return value;
}

export function validateAlgorithmName(name: unknown): string {
  if (typeof name !== 'string' || !ALGORITHM_NAME.test(name)) {
    throw new AppError(
      'invalid_algorithm_name',
      `invalid algorithm name "${String(name).slice(0, 70)}": start with a letter, then letters, digits or underscores, at most 64 characters`,
    );
  }
  return name;
}

/** Reads `details` from a request over `base` (fields not sent keep their value). */
export function parseDetails(input: unknown, base: AlgorithmDetails): AlgorithmDetails {
  const d = object(input, 'details');
  const out = { ...base };
  for (const [k, v] of Object.entries(d)) {
    if (k === 'label') out.label = text('details.label', v, 100);
    else if (k === 'summary') out.summary = text('details.summary', v, 64 * 1024);
    else if (k === 'tagline') out.tagline = text('details.tagline', v, 200);
    else throw bad(`unknown field details.${k.slice(0, 40)}; details take label, summary and tagline`);
  }
  return out;
}

/** Reads `settings` from a request over `base` (fields not sent keep their value). */
export function parseSettings(input: unknown, base: AlgorithmSettings): AlgorithmSettings {
  const s = object(input, 'settings');
  const out = { ...base };
  for (const [k, v] of Object.entries(s)) {
    switch (k) {
      case 'language': {
        const lang = typeof v === 'string' ? LANGUAGES[v.toLowerCase()] : undefined;
        if (!lang) throw bad(`settings.language must be one of ${Object.keys(LANGUAGES).join(', ')}`);
        out.language = lang;
        break;
      }
      case 'source_visibility':
        out.source_visibility = oneOf(k, v, ['open', 'closed']);
        break;
      case 'license':
        if (typeof v !== 'string' || !/^[a-z0-9.+-]{1,32}$/i.test(v)) throw bad('settings.license must be a short license name such as apl, apache2, mit or gpl3');
        out.license = v.toLowerCase();
        break;
      case 'network_access':
        out.network_access = oneOf(k, v, ['isolated', 'full']);
        break;
      case 'pipeline_enabled':
        if (typeof v !== 'boolean') throw bad('settings.pipeline_enabled must be true or false');
        out.pipeline_enabled = v;
        break;
      case 'algorithm_callability':
        out.algorithm_callability = oneOf(k, v, ['public', 'private']);
        break;
      case 'royalty_microcredits':
        if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw bad('settings.royalty_microcredits must be a whole number, 0 or more');
        out.royalty_microcredits = v;
        break;
      case 'max_concurrency':
        if (v === null) {
          delete out.max_concurrency;
          break;
        }
        if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 100_000) throw bad('settings.max_concurrency must be a whole number from 1 to 100,000, or null for no cap');
        out.max_concurrency = v;
        break;
      case 'algorithm_environment':
      case 'environment':
        out.algorithm_environment = v === null ? null : text(`settings.${k}`, v, 100);
        break;
      default:
        throw bad(`unknown field settings.${k.slice(0, 40)}`);
    }
  }
  return out;
}

/** What create and update may say about the next version; the next publish uses it where its own version_info is silent. */
export interface PendingVersionInfo {
  sample_input?: unknown;
  release_notes?: string;
}

const VERSION_INFO_FIELDS = ['version_type', 'release_notes', 'sample_input', 'semantic_version', 'git_hash', 'version_uuid'];

/**
 * Reads a `version_info` object as the official clients send it (publish, and the Python
 * client's create and update). `semantic_version`, `git_hash` and `version_uuid` describe an
 * existing version in the original API's answers and are accepted and ignored in requests.
 */
export function readVersionInfo(raw: unknown): { version_type?: unknown; release_notes?: string; sample_input?: unknown } {
  if (raw === undefined || raw === null) return {};
  if (typeof raw !== 'object' || Array.isArray(raw)) throw bad('version_info must be a JSON object');
  const v = raw as Record<string, unknown>;
  for (const k of Object.keys(v)) {
    if (!VERSION_INFO_FIELDS.includes(k)) throw bad(`unknown field version_info.${k.slice(0, 40)}; it takes version_type, release_notes, sample_input`);
  }
  if (v.release_notes !== undefined && v.release_notes !== null && typeof v.release_notes !== 'string') throw bad('version_info.release_notes must be a string');
  const notes = typeof v.release_notes === 'string' ? v.release_notes : undefined;
  if (notes !== undefined && notes.length > 64 * 1024) throw bad('version_info.release_notes may be at most 65536 characters');
  if (notes !== undefined && !isWellFormed(notes)) throw bad(`version_info.release_notes ${NOT_WELL_FORMED}`);
  if (v.sample_input !== undefined && JSON.stringify(v.sample_input).length > 64 * 1024) throw bad('version_info.sample_input may be at most 64 KiB of JSON');
  return {
    ...(v.version_type !== undefined ? { version_type: v.version_type } : {}),
    ...(notes !== undefined ? { release_notes: notes } : {}),
    ...(v.sample_input !== undefined ? { sample_input: v.sample_input } : {}),
  };
}

const isEmpty = (v: unknown) => v === undefined || v === null || (typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0);

/**
 * `source` and `scmsCredentials`, which the Python client sends with every create, update and
 * publish (empty objects by default). The original service could link an algorithm to an
 * external repository (GitHub, GitLab...); this server keeps sources itself, so only the
 * empty forms and the original's own `internal` repository are accepted.
 */
export function checkSourceFields(input: { source?: unknown; scmsCredentials?: unknown }): void {
  const { source, scmsCredentials } = input;
  if (!isEmpty(source)) {
    const scm = typeof source === 'object' && source !== null && !Array.isArray(source) ? (source as Record<string, unknown>).scm : undefined;
    const keys = typeof source === 'object' && source !== null ? Object.keys(source) : [];
    const internal = keys.length === 1 && typeof scm === 'object' && scm !== null && (scm as Record<string, unknown>).id === 'internal';
    if (!internal) {
      throw bad(
        'this server keeps algorithm sources itself and cannot link an external repository (source.scm): send "source": {} or leave it out, then upload the source (PUT .../source with a tar.gz, or git push to /git/<owner>/<name>.git)',
      );
    }
  }
  if (!isEmpty(scmsCredentials)) {
    throw bad('scmsCredentials are for linking an external repository, which this server does not do: send {} or leave it out');
  }
}
