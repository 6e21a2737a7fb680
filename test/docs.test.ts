import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { ERROR_CODES } from '../src/errors.ts';
import { SETTINGS_BEGIN as BEGIN, SETTINGS_END as END, settingsTable } from '../src/config.ts';

const read = (p: string) => fs.readFileSync(new URL(`../${p}`, import.meta.url), 'utf8');

test('every error code is in docs/errors.md with its status', () => {
  const doc = read('docs/errors.md');
  for (const [code, status] of Object.entries(ERROR_CODES)) {
    const row = doc.split('\n').find((l) => l.startsWith(`| \`${code}\` |`));
    assert.ok(row, `docs/errors.md has a row for ${code}`);
    assert.match(row, new RegExp(`\\| ${status} \\|`), `docs/errors.md gives ${code} status ${status}`);
  }
});

test('every setting the config module reads has its row in the settings table, and the table in docs/configuration.md is the one it makes', () => {
  const source = read('src/config.ts');
  const table = settingsTable();
  // Ours, and the OpenTelemetry specification's that traces honour (docs/traces.md).
  const vars = new Set(source.match(/\b(?:ALGOHOST|OTEL)_[A-Z_]+/g));
  assert.ok(vars.size >= 30);
  const rows = table.split('\n').slice(2);
  for (const v of vars) assert.ok(rows.some((r) => r.split(' | ')[0]!.includes(`\`${v}\``)), `the settings table has a row for ${v}`);
  for (const r of rows) assert.match(r, /^\| `(?:ALGOHOST|OTEL)_[A-Z_]+`.* \|$/, 'a well-formed row');
  const page = read('docs/configuration.md');
  const generated = page.split(BEGIN)[1]?.split(END)[0];
  assert.ok(generated !== undefined, 'docs/configuration.md has the settings markers');
  assert.equal(generated.trim(), table, 'docs/configuration.md is stale: run npm run docs:config');
});

test('the docs only name files that are in the repository, and no feature as still to come', () => {
  const pages = ['README.md', 'client/README.md', ...fs.readdirSync(new URL('../docs', import.meta.url)).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  for (const page of pages) {
    const text = read(page);
    const base = new URL(`../${page}`, import.meta.url);
    // Markdown links to local files, and bare mentions of other .md files, must resolve.
    for (const m of text.matchAll(/\]\(([^)#\s]+\.md)(#[^)]*)?\)|(?<![\w/.-])([\w-]+\.md)\b/g)) {
      const target = m[1] ?? m[3]!;
      if (/^https?:/.test(target)) continue;
      const resolved = m[1] ? new URL(target, base) : [new URL(target, base), new URL(`../docs/${target}`, import.meta.url), new URL(`../${target}`, import.meta.url)].find((u) => fs.existsSync(u));
      assert.ok(resolved && fs.existsSync(resolved), `${page} names ${target}, which is not in the repository`);
    }
    // Pictures too (docs/console.md's screenshots).
    for (const m of text.matchAll(/!\[[^\]]*\]\(([^)\s]+\.(?:png|svg|jpg))\)/g)) {
      assert.ok(fs.existsSync(new URL(m[1]!, base)), `${page} shows ${m[1]}, which is not in the repository`);
    }
    assert.doesNotMatch(text, /later issue|with the algorithms issue|comes with the .* issue/i, `${page} speaks of a later issue`);
  }
});
