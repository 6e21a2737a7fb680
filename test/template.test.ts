/**
 * Trigger templates (src/events/template.ts; docs/events.md "Triggers"): placeholders filled
 * from an event, the parts of hosted and connected subjects, JSON templates keeping a lone
 * placeholder's type, and what is refused.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkTemplate, render, renderText } from '../src/events/template.ts';
import type { CloudEvent } from '../src/events/outbox.ts';

const event = (subject: string, data: Record<string, unknown> = { size: 12, by: 'alice' }): CloudEvent => ({
  specversion: '1.0',
  id: 'evt_0123456789abcdef01234567',
  source: '/v1/users/alice',
  type: 'data.file.created',
  subject,
  time: '2026-11-27T00:00:00.000Z',
  datacontenttype: 'application/json',
  sequence: '00000000000000000007',
  data,
});
const ctx = (subject: string, data?: Record<string, unknown>) => ({ event: event(subject, data), trigger: 'trg_x', run: 'run_y' });
const parts = '{{name}}|{{stem}}|{{ext}}|{{dir}}|{{path}}';

test('the parts of a hosted subject: below the user', () => {
  assert.equal(renderText(parts, ctx('data://alice/inbox/a.b.txt')), 'a.b.txt|a.b|txt|data://alice/inbox|inbox/a.b.txt');
  assert.equal(renderText(parts, ctx('data://alice/inbox')), 'inbox|inbox||data://alice|inbox');
  assert.equal(renderText(parts, ctx('data://alice/.hidden')), '.hidden|.hidden||data://alice|.hidden');
});

test('the parts of a connected subject: labels with dashes, files at the root', () => {
  assert.equal(renderText(parts, ctx('objstore+my-backup://bkt/in/a.txt')), 'a.txt|a|txt|objstore+my-backup://bkt/in|bkt/in/a.txt');
  assert.equal(renderText(parts, ctx('filehost+dav://a.txt')), 'a.txt|a|txt|filehost+dav://|a.txt');
});

test("the event's fields, data by path, and the run", () => {
  assert.equal(renderText('{{id}} {{type}} {{sequence}} {{data.size}} {{data.by}} {{trigger}} {{run}}', ctx('data://alice/a/b')), 'evt_0123456789abcdef01234567 data.file.created 00000000000000000007 12 alice trg_x run_y');
  assert.equal(renderText('{{ data.nested.deep }}', ctx('data://alice/a/b', { nested: { deep: true } })), 'true');
  assert.throws(() => renderText('{{data.missing}}', ctx('data://alice/a/b')), /has no data\.missing/);
});

test('a JSON template: strings filled, a lone placeholder keeps its type', () => {
  assert.deepEqual(render({ uri: '{{subject}}', size: '{{data.size}}', label: 'n={{data.size}}', list: ['{{name}}', 3], keep: null }, ctx('data://alice/in/x')), {
    uri: 'data://alice/in/x',
    size: 12,
    label: 'n=12',
    list: ['x', 3],
    keep: null,
  });
  assert.equal(render('{{data.size}}', ctx('data://alice/in/x')), '12', 'a string template is text');
});

test('unknown placeholders are refused when the template is given', () => {
  assert.doesNotThrow(() => checkTemplate('input', { a: '{{data.anything.at.all}}', b: ['{{stem}}.{{ext}}'] }));
  for (const bad of ['{{secret}}', '{{data}}', '{{name.x}}', { k: '{{env.HOME}}' }]) assert.throws(() => checkTemplate('input', bad), /not a placeholder/);
  assert.throws(() => checkTemplate('input', 'x'.repeat(17 * 1024)), /at most 16 KiB/);
});
