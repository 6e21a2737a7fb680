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
