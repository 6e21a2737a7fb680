import fs from 'node:fs';
import path from 'node:path';
import { VIOLATIONS_FILE } from '../../src/http/openapi/serve.ts';

/**
 * What ALGOHOST_TEST_OPENAPI_CHECK found in the answers of a server of `home`
 * (src/http/openapi/check.ts), one line each; the helpers that start servers turn the check on
 * and fail when they stop one that answered off the document.
 */
export function openapiViolations(home: string): string[] {
  let text: string;
  try {
    text = fs.readFileSync(path.join(home, VIOLATIONS_FILE), 'utf8');
  } catch {
    return [];
  }
  return text.split('\n').filter((l) => l !== '');
}

/**
 * The setting the helpers start servers with: the check on under `node --test` (every test file
 * runs with NODE_TEST_CONTEXT set), off for the benchmarks, which start servers with the same
 * helpers and must measure the server as it runs in production. A caller's own env wins.
 */
export const OPENAPI_CHECK_ENV: Record<string, string> = {
  ALGOHOST_TEST_OPENAPI_CHECK: process.env.NODE_TEST_CONTEXT !== undefined || process.execArgv.includes('--test') ? 'true' : 'false',
};
