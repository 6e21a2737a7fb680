import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import { buffer } from 'node:stream/consumers';
import { packDirectory } from '../../client/src/pack.ts';
import { AppError } from '../errors.ts';
import type { Language } from './manifest.ts';
import { starterFiles, writeFiles } from './templates.ts';

/**
 * The algorithm environments of the original service's API (`/v1/algorithm-environments/edge`),
 * which the Python CLI lists and takes templates from. Here there is one environment per
 * language: the runner this server has for it. Ids are fixed (derived from the language), so
 * they stay the same across restarts and servers.
 */
export interface LanguageInfo {
  name: string;
  display_name: string;
  /** A JSON document as a string, as the original API gives it. */
  configuration: string;
}

export interface Environment {
  id: string;
  environment_specification_id: string;
  display_name: string;
  description: string;
  created_at: string;
  language: LanguageInfo;
  machine_type: 'CPU';
}

interface Definition {
  language: Language;
  display_name: string;
  environment: string;
  description: string;
  req_files: string[];
}

const DEFINITIONS: readonly Definition[] = [
  {
    language: 'python3',
    display_name: 'Python 3.x',
    environment: 'Python 3 (the server\'s /usr/bin/python3)',
    description: 'Python 3 with the standard library; dependencies from requirements.txt (pip)',
    req_files: ['requirements.txt'],
  },
  {
    language: 'javascript',
    display_name: 'JavaScript (Node.js)',
    environment: 'Node.js (the server\'s /usr/bin/node)',
    description: 'Node.js; dependencies from package.json (npm)',
    req_files: ['package.json'],
  },
  {
    language: 'typescript',
    display_name: 'TypeScript (Node.js)',
    environment: 'TypeScript on Node.js, bundled with esbuild',
    description: 'TypeScript compiled and bundled with esbuild, run on Node.js; dependencies from package.json (npm)',
    req_files: ['package.json'],
  },
];

/** When these definitions were made: an environment's `created_at`. */
const DEFINED_AT = '2026-11-24T00:00:00.000';

/** A UUID-shaped id that depends only on `text`. */
function stableId(text: string): string {
  const h = crypto.createHash('sha256').update(`algohost:${text}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}

function languageInfo(d: Definition): LanguageInfo {
  return { name: d.language, display_name: d.display_name, configuration: `${JSON.stringify({ display_name: d.display_name, req_files: d.req_files }, null, 4)}\n` };
}

function environment(d: Definition): Environment {
  return {
    id: stableId(`environment:${d.language}`),
    environment_specification_id: stableId(`environment-specification:${d.language}`),
    display_name: d.environment,
    description: d.description,
    created_at: DEFINED_AT,
    language: languageInfo(d),
    machine_type: 'CPU',
  };
}

export class Environments {
  /** @param scratch makes an empty temporary directory (the home's, so it is cleaned at start). */
  constructor(private readonly scratch: (prefix: string) => Promise<string>) {}

  languages(): LanguageInfo[] {
    return DEFINITIONS.map(languageInfo);
  }

  /** A language's environments; its name as the original service or its clients spell it. */
  ofLanguage(name: string): Environment[] {
    const d = DEFINITIONS.find((x) => x.language === name.toLowerCase());
    if (!d) {
      throw new AppError('not_found', `no language "${name.slice(0, 40)}" here; the languages are ${DEFINITIONS.map((x) => x.language).join(', ')}`);
    }
    return [environment(d)];
  }

  /** The starter algorithm of an environment specification, as a tar.gz: what `algo init` writes, unnamed. */
  async template(specificationId: string): Promise<Buffer> {
    const d = DEFINITIONS.find((x) => environment(x).environment_specification_id === specificationId.toLowerCase());
    if (!d) throw new AppError('not_found', `no environment specification ${specificationId.slice(0, 60)}; GET /v1/algorithm-environments/edge/languages/<language>/environments lists them`);
    const dir = await this.scratch('template-');
    try {
      await writeFiles(dir, starterFiles(d.language));
      return await buffer(packDirectory(dir));
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  }
}
