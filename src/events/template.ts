import { AppError } from '../errors.ts';
import type { CloudEvent } from './outbox.ts';

/**
 * A trigger's templates (docs/events.md): `{{name}}` placeholders filled from the event that
 * fired the run. What a placeholder may name:
 *
 * - the event's own fields: `id`, `type`, `subject`, `time`, `sequence`, and `data.<field>`
 *   (`data.size`, `data.content_type`, `data.etag`, `data.by`, … as the event has them);
 * - parts of its subject (a URI): `name` (`a.txt`), `stem` (`a`), `ext` (`txt`, or empty),
 *   `dir` (`data://alice/inbox`), `path` (`inbox/a.txt`: below the user; for a connected
 *   account's `objstore+label://bkt/inbox/a.txt`, all of `bkt/inbox/a.txt`);
 * - the run: `trigger` (`trg_…`) and `run` (`run_…`).
 *
 * A string template renders to a string. A JSON template (an object or a list) is walked: each
 * string in it is rendered, and a string that is one placeholder alone becomes that value
 * itself (`"{{data.size}}"` gives the number 1234, not "1234").
 */

const PLACEHOLDER = /\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*\}\}/g;
const ALONE = /^\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*\}\}$/;
const TOP = new Set(['id', 'type', 'subject', 'time', 'sequence', 'data', 'name', 'stem', 'ext', 'dir', 'path', 'trigger', 'run']);

/** The largest template taken, as JSON text. */
export const MAX_TEMPLATE_BYTES = 16 * 1024;

/** Checks a template's placeholders when a trigger is made; `invalid_trigger` naming the field. */
export function checkTemplate(field: string, template: unknown): void {
  const text = JSON.stringify(template) ?? '';
  if (Buffer.byteLength(text) > MAX_TEMPLATE_BYTES) throw new AppError('invalid_trigger', `${field}: at most ${MAX_TEMPLATE_BYTES / 1024} KiB`);
  for (const m of text.matchAll(PLACEHOLDER)) {
    const name = m[1]!;
    const [head, ...rest] = name.split('.');
    if (!TOP.has(head!) || (head !== 'data' && rest.length > 0) || (head === 'data' && rest.length === 0)) {
      throw new AppError('invalid_trigger', `${field}: {{${name}}} is not a placeholder; use id, type, subject, time, sequence, data.<field>, name, stem, ext, dir, path, trigger or run`);
    }
  }
}

/** What the placeholders of one run are filled from. */
export interface TemplateContext {
  event: CloudEvent;
  trigger: string;
  run: string;
}

function subjectParts(subject: string): Record<string, string> {
  const m = /^([a-z][a-z0-9]*(?:\+[a-z0-9_-]+)?):\/\/(.*)$/is.exec(subject);
  if (!m) return { name: '', stem: '', ext: '', dir: subject, path: '' };
  const [, scheme, rest] = m as unknown as [string, string, string];
  const segments = rest === '' ? [] : rest.split('/');
  // data://user/…: the first segment is the user. A connected account's URI has none.
  const hosted = scheme.toLowerCase() === 'data';
  const below = hosted ? segments.slice(1) : segments;
  const name = below.length > 0 ? below[below.length - 1]! : '';
  const dot = name.lastIndexOf('.');
  return {
    name,
    stem: dot > 0 ? name.slice(0, dot) : name,
    ext: dot > 0 ? name.slice(dot + 1) : '',
    dir: name ? `${scheme}://${segments.slice(0, -1).join('/')}` : subject,
    path: below.join('/'),
  };
}

/** The value of one placeholder; `invalid_trigger` when the event has no such field. */
function lookup(name: string, ctx: TemplateContext, parts: Record<string, string>): unknown {
  const [head, ...rest] = name.split('.');
  const e = ctx.event;
  switch (head) {
    case 'id':
    case 'type':
    case 'subject':
    case 'time':
    case 'sequence':
      return e[head];
    case 'trigger':
      return ctx.trigger;
    case 'run':
      return ctx.run;
    case 'data': {
      let v: unknown = e.data;
      for (const k of rest) {
        if (typeof v !== 'object' || v === null || !Object.prototype.hasOwnProperty.call(v, k)) {
          throw new AppError('invalid_trigger', `{{${name}}}: a ${e.type} event has no ${name}`);
        }
        v = (v as Record<string, unknown>)[k];
      }
      return v;
    }
    default:
      return parts[head!];
  }
}

function asText(v: unknown): string {
  if (typeof v === 'string') return v;
  if (v === null || v === undefined) return '';
  return typeof v === 'object' ? JSON.stringify(v) : String(v as number | boolean);
}

/** A string template, filled. */
export function renderText(template: string, ctx: TemplateContext): string {
  const parts = subjectParts(ctx.event.subject);
  return template.replace(PLACEHOLDER, (_, name: string) => asText(lookup(name, ctx, parts)));
}

/** A template filled: a string stays a string, a JSON template becomes its JSON value. */
export function render(template: unknown, ctx: TemplateContext): unknown {
  const parts = subjectParts(ctx.event.subject);
  const walk = (t: unknown): unknown => {
    if (typeof t === 'string') {
      const alone = ALONE.exec(t);
      if (alone) return lookup(alone[1]!, ctx, parts) ?? null;
      return t.replace(PLACEHOLDER, (_, name: string) => asText(lookup(name, ctx, parts)));
    }
    if (Array.isArray(t)) return t.map(walk);
    if (typeof t === 'object' && t !== null) return Object.fromEntries(Object.entries(t).map(([k, v]) => [k, walk(v)]));
    return t;
  };
  // A string template is text: `{{data.size}}` alone gives "1234".
  return typeof template === 'string' ? renderText(template, ctx) : walk(template);
}
