import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { ERROR_CODES } from '../src/errors.ts';

const read = (p: string) => fs.readFileSync(new URL(`../${p}`, import.meta.url), 'utf8');

test('every error code is in docs/errors.md with its status', () => {
  const doc = read('docs/errors.md');
  for (const [code, status] of Object.entries(ERROR_CODES)) {
    const row = doc.split('\n').find((l) => l.startsWith(`| \`${code}\` |`));
    assert.ok(row, `docs/errors.md has a row for ${code}`);
    assert.match(row, new RegExp(`\\| ${status} \\|`), `docs/errors.md gives ${code} status ${status}`);
  }
});

test('every setting the config module reads is in docs/configuration.md', () => {
  const source = read('src/config.ts');
  const doc = read('docs/configuration.md');
  const vars = new Set(source.match(/ALGOHOST_[A-Z_]+/g));
  assert.ok(vars.size >= 6);
  for (const v of vars) assert.ok(doc.includes(`\`${v}\``), `docs/configuration.md documents ${v}`);
});
