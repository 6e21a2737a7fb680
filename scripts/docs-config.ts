/**
 * `npm run docs:config`: writes docs/configuration.md's table of settings from src/config.ts's
 * SETTINGS, between its markers. test/docs.test.ts fails while the page is not what this writes.
 */
import fs from 'node:fs';
import path from 'node:path';
import { SETTINGS_BEGIN as BEGIN, SETTINGS_END as END, settingsTable } from '../src/config.ts';

const file = path.resolve(import.meta.dirname, '..', 'docs', 'configuration.md');
const page = fs.readFileSync(file, 'utf8');
const [before, rest] = page.split(BEGIN);
const after = rest?.split(END)[1];
if (before === undefined || after === undefined) throw new Error(`docs/configuration.md has no ${BEGIN} ... ${END} markers`);
fs.writeFileSync(file, `${before}${BEGIN}\n${settingsTable()}\n${END}${after}`);
process.stdout.write('docs/configuration.md: settings table written\n');
