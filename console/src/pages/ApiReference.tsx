/**
 * The API reference: the operations of the server's own OpenAPI document (GET /v1/openapi.json,
 * docs/openapi.md), grouped by tag, each with its parameters, body and answers, and the
 * records they send and take. Rendered here from the document: nothing is fetched from elsewhere.
 */
import { useState } from 'preact/hooks';
import { getJson } from '../api.ts';
import { ErrorBox, Loading, Title, useLoad } from '../ui.tsx';

type Schema = {
  $ref?: string;
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  items?: Schema;
  properties?: Record<string, Schema>;
  required?: string[];
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  format?: string;
  description?: string;
  additionalProperties?: Schema | boolean;
};
interface Parameter {
  name: string;
  in: string;
  description?: string;
  required?: boolean;
  schema?: Schema;
}
interface Media {
  schema?: Schema;
}
interface Response {
  $ref?: string;
  description?: string;
  content?: Record<string, Media>;
}
interface Operation {
  operationId: string;
  tags?: string[];
  summary?: string;
  description?: string;
  deprecated?: boolean;
  security?: Record<string, string[]>[];
  parameters?: Parameter[];
  requestBody?: { required?: boolean; description?: string; content: Record<string, Media> };
  responses: Record<string, Response>;
}
interface Document {
  info: { title: string; version: string; description?: string };
  tags?: { name: string; description?: string }[];
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Schema>; responses: Record<string, Response> };
}

const METHODS = ['get', 'head', 'post', 'put', 'patch', 'delete', 'options'];
const refName = (ref: string) => ref.split('/').pop()!;

/** A schema in a few words: `Algorithm`, `string[]`, `"a" | "b"`, `{ name, acl? }`. */
export function typeText(s: Schema | undefined, depth = 0): string {
  if (!s) return 'any';
  if (s.$ref) return refName(s.$ref);
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (s.enum) return s.enum.length > 6 ? `${s.enum.slice(0, 6).map((v) => JSON.stringify(v)).join(' | ')} | …` : s.enum.map((v) => JSON.stringify(v)).join(' | ');
  const alt = s.anyOf ?? s.oneOf;
  if (alt) return alt.map((x) => typeText(x, depth)).join(' | ');
  if (s.allOf) return s.allOf.map((x) => typeText(x, depth)).join(' & ');
  const types = Array.isArray(s.type) ? s.type : s.type ? [s.type] : [];
  const one = (t: string): string => {
    if (t === 'array') return `${typeText(s.items, depth)}[]`;
    if (t === 'object' && s.properties && depth < 1) {
      const req = new Set(s.required ?? []);
      return `{ ${Object.keys(s.properties).map((k) => (req.has(k) ? k : `${k}?`)).join(', ')} }`;
    }
    if (t === 'string' && s.format === 'binary') return 'bytes';
    if (t === 'string' && s.format) return `string (${s.format})`;
    return t;
  };
  if (types.length === 0) return 'any';
  return types.map(one).join(' | ');
}

function Fields({ schema }: { schema: Schema }) {
  const props = schema.properties ?? {};
  const req = new Set(schema.required ?? []);
  if (Object.keys(props).length === 0) return <p>{typeText(schema)}</p>;
  return (
    <table class="api-fields">
      <thead>
        <tr>
          <th scope="col">Field</th>
          <th scope="col">Type</th>
          <th scope="col">Meaning</th>
        </tr>
      </thead>
      <tbody>
        {Object.entries(props).map(([name, p]) => (
          <tr key={name}>
            <th scope="row">
              <code>{name}</code>
              {req.has(name) ? '' : ' (optional)'}
            </th>
            <td>
              <code>{typeText(p)}</code>
            </td>
            <td>{p.description ?? ''}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Bodies({ content }: { content: Record<string, Media> }) {
  return (
    <ul class="api-media">
      {Object.entries(content).map(([type, m]) => (
        <li key={type}>
          <code>{type}</code>: <code>{typeText(m.schema)}</code>
          {m.schema?.description ? ` (${m.schema.description})` : ''}
        </li>
      ))}
    </ul>
  );
}

function OperationView({ doc, path, method, op }: { doc: Document; path: string; method: string; op: Operation }) {
  const keyed = (op.security ?? [{}]).length > 0;
  return (
    <details class="api-op">
      <summary>
        <code class={`api-method api-${method}`}>{method.toUpperCase()}</code> <code class="api-path">{path}</code> <span>{op.summary}</span>
        {op.deprecated ? <span class="muted"> (deprecated)</span> : null}
      </summary>
      {op.description ? <p>{op.description}</p> : null}
      <p class="muted">{keyed ? 'Needs an API key (Authorization: Simple …) or the console\'s session.' : 'No key needed.'}</p>
      {op.parameters && op.parameters.length > 0 ? (
        <>
          <h4>Parameters</h4>
          <table class="api-fields">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">In</th>
                <th scope="col">Type</th>
                <th scope="col">Meaning</th>
              </tr>
            </thead>
            <tbody>
              {op.parameters.map((p) => (
                <tr key={`${p.in}:${p.name}`}>
                  <th scope="row">
                    <code>{p.name}</code>
                    {p.required ? '' : ' (optional)'}
                  </th>
                  <td>{p.in}</td>
                  <td>
                    <code>{typeText(p.schema)}</code>
                  </td>
                  <td>{p.description ?? ''}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : null}
      {op.requestBody ? (
        <>
          <h4>Request body{op.requestBody.required ? '' : ' (optional)'}</h4>
          {op.requestBody.description ? <p>{op.requestBody.description}</p> : null}
          <Bodies content={op.requestBody.content} />
        </>
      ) : null}
      <h4>Answers</h4>
      <ul class="api-answers">
        {Object.entries(op.responses).map(([status, r0]) => {
          const r = r0.$ref ? doc.components.responses[refName(r0.$ref)] ?? r0 : r0;
          return (
            <li key={status}>
              <strong>{status}</strong> {r0.$ref ? <>error envelope, {r.description}</> : r.description}
              {!r0.$ref && r.content ? <Bodies content={r.content} /> : null}
            </li>
          );
        })}
      </ul>
    </details>
  );
}

export function ApiReference() {
  const { data: doc, error } = useLoad(() => getJson<Document>('/v1/openapi.json'), []);
  const [filter, setFilter] = useState('');
  if (error) return <ErrorBox error={error} />;
  if (!doc) return <Loading what="the API reference" />;
  const f = filter.trim().toLowerCase();
  const ops: { tag: string; path: string; method: string; op: Operation }[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      if (f && !`${method} ${path} ${op.summary ?? ''}`.toLowerCase().includes(f)) continue;
      ops.push({ tag: op.tags?.[0] ?? 'Other', path, method, op });
    }
  }
  const tags = [...(doc.tags ?? []).map((t) => t.name), ...new Set(ops.map((o) => o.tag))].filter((t, i, all) => all.indexOf(t) === i);
  return (
    <>
      <Title>API reference</Title>
      <p>
        {doc.info.title}, from this server's OpenAPI 3.1 description, <a href="/v1/openapi.json">/v1/openapi.json</a> (no key needed; generate a client from it). Calls take{' '}
        <code>Authorization: Simple YOUR_KEY</code>; errors are <code>{'{"error": {"code", "message"}}'}</code>.
      </p>
      <label>
        Find an operation <input type="search" value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} placeholder="e.g. keys, POST, /v1/data" />
      </label>
      {tags.map((tag) => {
        const mine = ops.filter((o) => o.tag === tag);
        if (mine.length === 0) return null;
        const id = `api-tag-${tag.replace(/\W+/g, '-')}`;
        return (
          <section key={tag} aria-labelledby={id}>
            <h2 id={id}>{tag}</h2>
            {doc.tags?.find((t) => t.name === tag)?.description ? <p class="muted">{doc.tags.find((t) => t.name === tag)!.description}</p> : null}
            {mine.map((o) => (
              <OperationView key={`${o.method} ${o.path}`} doc={doc} path={o.path} method={o.method} op={o.op} />
            ))}
          </section>
        );
      })}
      <section aria-labelledby="api-schemas">
        <h2 id="api-schemas">Records</h2>
        {Object.entries(doc.components.schemas).map(([name, s]) => (
          <details key={name} class="api-op">
            <summary>
              <code>{name}</code> {s.description ? <span class="muted">{s.description}</span> : null}
            </summary>
            <Fields schema={s} />
          </details>
        ))}
      </section>
    </>
  );
}
