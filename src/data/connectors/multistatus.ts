import { RemoteError } from './remote.ts';

/**
 * A streaming parser of WebDAV multistatus answers (RFC 4918 14.16), for the WebDAV provider:
 * fed the answer piece by piece as it arrives, it hands over each <response> as soon as it is
 * complete and keeps nothing else, so a folder of 100,000 entries costs one entry of memory.
 * It reads the subset of XML such answers use (namespaces by any prefix, entities, CDATA,
 * comments) and refuses the rest (a DOCTYPE, unknown entities, unbounded tokens) as a bad answer.
 */

const bad = (message: string) => new RemoteError('bad_answer', message);

/** One <response> of a multistatus: its href and the properties of its 2xx propstats. */
export interface DavEntry {
  href: string;
  collection: boolean;
  props: Map<string, string>;
}

const MAX_TOKEN = 1 << 20; // a single tag or comment this long is not a multistatus we can use
const MAX_TEXT = 64 * 1024;
const MAX_DEPTH = 64;
const RESPONSE = 'multistatus/response';
const PROPSTAT = `${RESPONSE}/propstat`;
const PROP = `${PROPSTAT}/prop`;
const COLLECTION = `${PROP}/resourcetype/collection`;
/** Elements whose text we keep, by their path of DAV: local names. */
const CAPTURE = new Map<string, string>([
  [`${RESPONSE}/href`, 'href'],
  [`${RESPONSE}/status`, 'status'],
  [`${PROPSTAT}/status`, 'propstat-status'],
  ...['getcontentlength', 'getlastmodified', 'getetag', 'getcontenttype'].map((p): [string, string] => [`${PROP}/${p}`, p]),
]);
/**
 * The paths of the elements we act on, by parent path and DAV: local name: a lookup per element
 * instead of building strings. Any other element has the path "" and so has all it holds.
 */
const CHILDREN = new Map<string, Map<string, string>>();
for (const path of [RESPONSE, PROPSTAT, PROP, `${PROP}/resourcetype`, COLLECTION, ...CAPTURE.keys()]) {
  const cut = path.lastIndexOf('/');
  const parent = path.slice(0, cut);
  CHILDREN.set(parent, (CHILDREN.get(parent) ?? new Map<string, string>()).set(path.slice(cut + 1), path));
}

interface Element {
  name: string;
  /** The path of DAV: local names from the root, or "" for an element we ignore. */
  path: string;
  ns: Map<string, string>;
  capture: string | undefined;
}

/**
 * A streaming parser for exactly what a multistatus needs: elements with namespaces, text,
 * entities, CDATA, comments. Memory is bounded by the longest token and the element depth,
 * never by the document. A DOCTYPE is refused (no entity expansion surprises).
 */
export class MultistatusParser {
  private buf = '';
  private stack: Element[] = [];
  private text: string | undefined;
  private entry: { href?: string; status?: string; collection: boolean; props: Map<string, string> } | undefined;
  private propstat: { status?: string; collection: boolean; props: Map<string, string> } | undefined;
  private state: 'before' | 'in' | 'after' = 'before';

  constructor(private readonly onEntry: (entry: DavEntry) => void) {}

  write(chunk: string): void {
    const b = this.buf + chunk;
    let i = 0;
    while (i < b.length) {
      const lt = b.indexOf('<', i);
      if (lt < 0) {
        this.addText(b.slice(i));
        i = b.length;
        break;
      }
      if (lt > i) this.addText(b.slice(i, lt));
      const next = this.markup(b, lt);
      i = lt;
      if (next < 0) break;
      i = next;
    }
    this.buf = b.slice(i);
    if (this.buf.length > MAX_TOKEN) throw bad('its answer was not a usable multistatus');
  }

  end(): void {
    if (this.state !== 'after' || this.buf.trim() !== '') throw bad('its answer was cut short');
  }

  /** Handles the markup starting at `lt`; answers the index after it, or -1 if it is not complete yet. */
  private markup(b: string, lt: number): number {
    const second = b[lt + 1];
    if (second === undefined) return -1;
    if (second === '?') return after(b, '?>', lt + 2);
    if (second === '!') {
      if (b.startsWith('<!--', lt)) return after(b, '-->', lt + 4);
      if (b.startsWith('<![CDATA[', lt)) {
        const next = after(b, ']]>', lt + 9);
        if (next >= 0) this.addText(b.slice(lt + 9, next - 3).replaceAll('&', '&amp;'));
        return next;
      }
      const rest = b.slice(lt, lt + 9);
      if (rest.length < 9 && ('<![CDATA['.startsWith(rest) || '<!--'.startsWith(rest))) return -1;
      throw bad('its answer declared a document type, which is not accepted');
    }
    let gt = b.indexOf('>', lt);
    if (gt < 0) return -1;
    let tag = b.slice(lt + 1, gt);
    if (tag.includes('"') || tag.includes("'")) {
      // Attribute values may hold ">": find the first one outside quotes.
      let quote = '';
      for (gt = lt + 1; gt < b.length; gt++) {
        const c = b[gt];
        if (quote) quote = c === quote ? '' : quote;
        else if (c === '"' || c === "'") quote = c;
        else if (c === '>') break;
      }
      if (gt === b.length) return -1;
      tag = b.slice(lt + 1, gt);
    }
    if (tag.startsWith('/')) this.close(tag.slice(1).trim());
    else {
      const selfClosing = tag.endsWith('/');
      if (selfClosing) tag = tag.slice(0, -1);
      let n = 0;
      while (n < tag.length && tag.charCodeAt(n) > 0x20) n++; // up to the first space, tab or newline
      const name = tag.slice(0, n);
      if (!name) throw bad('its answer was not valid XML');
      this.open(name, tag.slice(name.length));
      if (selfClosing) this.close(name);
    }
    return gt + 1;
  }

  private open(name: string, attributes: string): void {
    if (this.state === 'after') throw bad('its answer was not valid XML');
    const parent = this.stack.at(-1);
    let ns = parent?.ns ?? new Map<string, string>();
    if (attributes.includes('xmlns')) {
      for (const m of attributes.matchAll(/([^\s=]+)\s*=\s*(?:"([^"]*)"|'([^']*)')/g)) {
        const key = m[1]!;
        if (key !== 'xmlns' && !key.startsWith('xmlns:')) continue;
        if (ns === parent?.ns) ns = new Map(ns);
        ns.set(key === 'xmlns' ? '' : key.slice(6), decodeEntities(m[2] ?? m[3] ?? ''));
      }
    }
    const colon = name.indexOf(':');
    const local = name.slice(colon + 1);
    const dav = ns.get(colon < 0 ? '' : name.slice(0, colon)) === 'DAV:';
    const path = !dav ? '' : parent ? (CHILDREN.get(parent.path)?.get(local) ?? '') : local === 'multistatus' ? local : '';
    if (!parent && !path) throw bad('its answer was not a multistatus');
    if (this.stack.length >= MAX_DEPTH) throw bad('its answer was nested too deep');
    const capture = CAPTURE.get(path);
    this.stack.push({ name, path, ns, capture });
    this.state = 'in';
    if (capture) this.text = '';
    if (path === RESPONSE) this.entry = { collection: false, props: new Map() };
    else if (path === PROPSTAT) this.propstat = { collection: false, props: new Map() };
    else if (path === COLLECTION && this.propstat) this.propstat.collection = true;
  }

  private close(name: string): void {
    const el = this.stack.pop();
    if (!el || el.name !== name) throw bad('its answer was not valid XML');
    if (this.stack.length === 0) this.state = 'after';
    if (el.capture) {
      const value = decodeEntities(this.text ?? '').trim();
      this.text = undefined;
      if (el.capture === 'href' && this.entry) this.entry.href = value;
      else if (el.capture === 'status' && this.entry) this.entry.status = value;
      else if (el.capture === 'propstat-status' && this.propstat) this.propstat.status = value;
      else this.propstat?.props.set(el.capture, value);
    }
    if (el.path === PROPSTAT) {
      const p = this.propstat;
      this.propstat = undefined;
      if (p && this.entry && isSuccess(p.status)) {
        this.entry.collection ||= p.collection;
        for (const [k, v] of p.props) this.entry.props.set(k, v);
      }
    } else if (el.path === RESPONSE) {
      const e = this.entry;
      this.entry = undefined;
      if (!e?.href) throw bad('its answer had an entry without an href');
      if (isSuccess(e.status)) this.onEntry({ href: e.href, collection: e.collection, props: e.props });
    }
  }

  private addText(raw: string): void {
    if (this.text === undefined) return;
    this.text += raw;
    if (this.text.length > MAX_TEXT) throw bad('its answer had a value too long to use');
  }
}

/** The index just after the next `marker` from `from`, or -1 if it has not arrived yet. */
function after(b: string, marker: string, from: number): number {
  const at = b.indexOf(marker, from);
  return at < 0 ? -1 : at + marker.length;
}

/** A missing status counts as success (a response with only propstats). */
function isSuccess(status: string | undefined): boolean {
  if (status === undefined) return true;
  const code = Number(/^HTTP\/[\d.]+\s+(\d{3})/.exec(status)?.[1]);
  return code >= 200 && code < 300;
}

const NAMED: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

function decodeEntities(raw: string): string {
  if (!raw.includes('&')) return raw;
  return raw.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|[A-Za-z]+);/g, (_, e: string) => {
    if (e[0] !== '#') {
      const c = NAMED[e];
      if (c === undefined) throw bad('its answer used an unknown XML entity');
      return c;
    }
    const code = e[1] === 'x' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10);
    if (!(code >= 0 && code <= 0x10ffff)) throw bad('its answer was not valid XML');
    return String.fromCodePoint(code);
  });
}
