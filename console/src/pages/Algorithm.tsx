import { useEffect, useMemo, useState } from 'preact/hooks';
import type { CallEnvelope, CallFailure } from '../../../client/src/types.ts';
import { authHeaders, client, encodePath, errorFrom, url } from '../api.ts';
import { renderMarkdown } from '../markdown.ts';
import { href } from '../router.ts';
import { CopyButton, ErrorBox, Loading, Title, formatDate, useAction, useLoad } from '../ui.tsx';
import { languageName } from './Marketplace.tsx';
import { all } from './MyAlgorithms.tsx';

type InputKind = 'text' | 'json' | 'file';

function sampleText(sample: unknown): string {
  if (sample === undefined || sample === null) return '';
  return typeof sample === 'string' ? sample : JSON.stringify(sample, null, 2);
}

/** A shell word in single quotes. */
const sh = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
/** A JavaScript or Python string literal (JSON's is both). */
const lit = (s: string) => JSON.stringify(s);

function snippets(ref: string, input: string, kind: InputKind): { label: string; code: string }[] {
  const base = location.origin;
  const json = kind === 'json';
  const pyInput = json ? `json.loads(${lit(input)})` : lit(input);
  return [
    {
      label: 'curl',
      code: `curl -X POST ${base}/v1/algo/${ref} \\\n  -H "Authorization: Simple $ALGORITHMIA_API_KEY" \\\n  -H "Content-Type: ${json ? 'application/json' : 'text/plain'}" \\\n  --data-binary ${sh(input)}`,
    },
    {
      label: 'algo CLI',
      code: `export ALGORITHMIA_API=${base}\nalgo run ${ref} ${json ? '-j' : '-t'} ${sh(input)}`,
    },
    {
      label: 'npm (algorithmia)',
      code: `const Algorithmia = require('algorithmia');\nconst client = Algorithmia.client(process.env.ALGORITHMIA_API_KEY, ${lit(base)});\nclient.algo(${lit(ref)}).pipe(${json ? input.trim() || 'null' : lit(input)}).then((r) => console.log(r.get()));`,
    },
    {
      label: 'Python (Algorithmia)',
      code: `import os${json ? ', json' : ''}\nimport Algorithmia\nclient = Algorithmia.client(os.environ["ALGORITHMIA_API_KEY"], ${lit(base)})\nprint(client.algo(${lit(ref)}).pipe(${pyInput}).result)`,
    },
  ];
}

function Snippets({ algo, input, kind }: { algo: string; input: string; kind: InputKind }) {
  const list = snippets(algo, input, kind === 'file' ? 'text' : kind);
  const [tab, setTab] = useState(0);
  const current = list[tab]!;
  return (
    <section aria-labelledby="snippets-h">
      <h2 id="snippets-h">Call it from code</h2>
      <div role="tablist" aria-label="Languages" class="tabs">
        {list.map((s, i) => (
          <button key={s.label} type="button" role="tab" id={`snip-tab-${i}`} aria-selected={i === tab} aria-controls="snip-panel" onClick={() => setTab(i)}>
            {s.label}
          </button>
        ))}
      </div>
      <div role="tabpanel" id="snip-panel" aria-labelledby={`snip-tab-${tab}`}>
        <pre>
          <code>{current.code}</code>
        </pre>
        <CopyButton text={current.code} label={`Copy the ${current.label} snippet`} />
      </div>
    </section>
  );
}

function base64ToBlob(b64: string): Blob {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Blob([bytes], { type: 'application/octet-stream' });
}

function Answer({ answer, ms }: { answer: CallEnvelope; ms: number }) {
  const url = useMemo(() => ('result' in answer && answer.metadata.content_type === 'binary' && typeof answer.result === 'string' ? URL.createObjectURL(base64ToBlob(answer.result)) : undefined), [answer]);
  useEffect(() => () => url && URL.revokeObjectURL(url), [url]);
  const meta = answer.metadata;
  const contentType = 'content_type' in meta ? meta.content_type : undefined;
  return (
    <section class="answer" aria-live="polite" aria-labelledby="answer-h">
      <h3 id="answer-h">{'error' in answer ? 'The algorithm failed' : 'Result'}</h3>
      <dl class="facts">
        <dt>Content type</dt>
        <dd>{contentType ?? 'error'}</dd>
        <dt>Duration</dt>
        <dd>
          {(meta.duration ?? 0).toFixed(3)} s of compute ({ms} ms in all)
        </dd>
      </dl>
      {'error' in answer ? (
        <pre class="error-output">
          {answer.error.error_type ? `${answer.error.error_type}: ` : ''}
          {answer.error.message}
          {answer.error.stacktrace ? `\n\n${answer.error.stacktrace}` : ''}
        </pre>
      ) : url ? (
        <p>
          Binary result.{' '}
          <a href={url} download="result.bin">
            Download the result
          </a>
        </p>
      ) : (
        <pre class="result">{contentType === 'json' ? JSON.stringify(answer.result, null, 2) : String(answer.result ?? '')}</pre>
      )}
      {meta.stdout !== undefined ? (
        <>
          <h4>Standard output (you own this algorithm)</h4>
          <pre class="stdout">{meta.stdout || '(nothing printed)'}</pre>
        </>
      ) : null}
    </section>
  );
}

function TryIt({ owner, name, version, sample, mine }: { owner: string; name: string; version: string; sample: unknown; mine: boolean }) {
  const [kind, setKind] = useState<InputKind>(typeof sample === 'string' || sample === undefined || sample === null ? 'text' : 'json');
  const [text, setText] = useState(sampleText(sample));
  const [file, setFile] = useState<File | null>(null);
  const [answer, setAnswer] = useState<{ envelope: CallEnvelope; ms: number } | undefined>(undefined);
  const ref = `${owner}/${name}/${version}`;
  const call = useAction(async () => {
    let body: BodyInit;
    let type: string;
    if (kind === 'json') {
      try {
        JSON.parse(text);
      } catch (err) {
        throw new Error(`the input is not JSON: ${(err as Error).message}`);
      }
      body = text;
      type = 'application/json';
    } else if (kind === 'file') {
      if (!file) throw new Error('choose a file to send');
      body = file;
      type = 'application/octet-stream';
    } else {
      body = text;
      type = 'text/plain';
    }
    const started = performance.now();
    // An algorithm's own failure is a 200 or 4xx/5xx envelope of the call, shown as such.
    const res = await fetchCall(ref, body, type, mine);
    setAnswer({ envelope: res, ms: Math.round(performance.now() - started) });
  });
  return (
    <section aria-labelledby="try-h" class="try">
      <h2 id="try-h">Try it</h2>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void call.run();
        }}
      >
        <fieldset>
          <legend>Input as</legend>
          {(['text', 'json', 'file'] as const).map((k) => (
            <label key={k} class="inline">
              <input type="radio" name="kind" value={k} checked={kind === k} onChange={() => setKind(k)} /> {k === 'json' ? 'JSON' : k === 'text' ? 'Text' : 'File'}
            </label>
          ))}
        </fieldset>
        {kind === 'file' ? (
          <label>
            File to send
            <input type="file" onChange={(e) => setFile(e.currentTarget.files?.[0] ?? null)} />
          </label>
        ) : (
          <label>
            Input
            <textarea rows={5} value={text} onInput={(e) => setText(e.currentTarget.value)} spellcheck={false} />
          </label>
        )}
        <button type="submit" disabled={call.busy}>
          {call.busy ? 'Running…' : `Call ${ref}`}
        </button>
      </form>
      <ErrorBox error={call.error} />
      {answer ? <Answer answer={answer.envelope} ms={answer.ms} /> : null}
      <Snippets algo={ref} input={kind === 'file' ? '' : text} kind={kind} />
    </section>
  );
}

/**
 * A call whose envelope is shown whatever its status: an algorithm's own failure (an
 * `error` with `metadata`) is an answer too; anything else (a refused key, a busy server) is
 * an error of the request.
 */
async function fetchCall(ref: string, body: BodyInit, type: string, stdout: boolean): Promise<CallEnvelope> {
  const res = await fetch(url(`/v1/algo/${encodePath(ref)}`, { stdout: stdout ? 'true' : undefined }), {
    method: 'POST',
    body,
    headers: { ...authHeaders(), 'content-type': type },
    credentials: 'same-origin',
  });
  const text = await res.text();
  let parsed: (Partial<CallFailure> & { error?: unknown }) | undefined;
  try {
    parsed = JSON.parse(text) as Partial<CallFailure>;
  } catch {
    // Not an envelope: below, as any other error answer.
  }
  if (parsed && (res.ok || (parsed.error && parsed.metadata))) return parsed as CallEnvelope;
  throw errorFrom(res.status, text);
}

export function AlgorithmPage({ owner, name, me }: { owner: string; name: string; me: string }) {
  const mine = owner.toLowerCase() === me.toLowerCase();
  const algo = useLoad(() => client.algo(`${owner}/${name}`).info(), [owner, name]);
  const versions = useLoad(() => all(client.algo(`${owner}/${name}`).versions()), [owner, name]);
  const [selected, setSelected] = useState<string | undefined>(undefined);
  const list = versions.data ?? [];
  const version = list.find((v) => v.version_info.semantic_version === selected) ?? list[0];
  const readme = useLoad(
    async () => (version ? client.algo(`${owner}/${name}`).readme(version.version_info.semantic_version) : null),
    [owner, name, version?.version_info.semantic_version],
  );
  const html = useMemo(() => (readme.data ? renderMarkdown(readme.data) : ''), [readme.data]);
  if (algo.error) return <ErrorBox error={algo.error} />;
  const a = algo.data;
  if (!a) return <Loading what="the algorithm" />;
  return (
    <article class="algorithm">
      <p class="crumbs">
        <a href="#/">Marketplace</a> / {a.owner}
      </p>
      <Title>
        {a.owner}/{a.name}
      </Title>
      {a.details.summary ? <p class="summary">{a.details.summary}</p> : null}
      <dl class="facts">
        <dt>Language</dt>
        <dd>{languageName(a.settings.language)}</dd>
        <dt>Source</dt>
        <dd>{a.settings.source_visibility === 'open' ? 'open' : 'closed'}</dd>
        <dt>License</dt>
        <dd>{a.settings.license || 'not given'}</dd>
        {mine ? (
          <>
            <dt>Yours</dt>
            <dd>
              <a href={href('mine', a.name)}>Manage this algorithm</a>
            </dd>
          </>
        ) : null}
      </dl>
      <ErrorBox error={versions.error} />
      {versions.loading && !versions.data ? <Loading what="versions" /> : null}
      {version ? (
        <>
          <div class="cols">
            <section aria-labelledby="readme-h" class="readme">
              <h2 id="readme-h">README</h2>
              {readme.loading ? <Loading what="the README" /> : html ? <div class="markdown" dangerouslySetInnerHTML={{ __html: html }} /> : <p class="muted">This version has no README.</p>}
            </section>
            <section aria-labelledby="versions-h" class="versions">
              <h2 id="versions-h">Versions</h2>
              <label>
                Version
                <select value={version.version_info.semantic_version} onChange={(e) => setSelected(e.currentTarget.value)}>
                  {list.map((v) => (
                    <option key={v.version_info.semantic_version} value={v.version_info.semantic_version}>
                      {v.version_info.semantic_version}
                      {v.settings.algorithm_callability === 'private' ? ' (private)' : ''}
                    </option>
                  ))}
                </select>
              </label>
              <ul class="plain">
                {list.map((v) => (
                  <li key={v.version_info.semantic_version}>
                    <strong>{v.version_info.semantic_version}</strong> <span class="muted">{formatDate(v.published_at ?? v.created_at)}</span>
                    {v.version_info.release_notes ? <p>{v.version_info.release_notes}</p> : null}
                  </li>
                ))}
              </ul>
            </section>
          </div>
          {version.version_info.sample_input !== undefined && version.version_info.sample_input !== null ? (
            <section aria-labelledby="sample-h">
              <h2 id="sample-h">Sample input</h2>
              <pre>{sampleText(version.version_info.sample_input)}</pre>
            </section>
          ) : null}
          <TryIt key={version.version_info.semantic_version} owner={a.owner} name={a.name} version={version.version_info.semantic_version} sample={version.version_info.sample_input} mine={mine} />
        </>
      ) : versions.data ? (
        <p role="status">{mine ? 'Not published yet: publish a version from ' : 'No published version yet.'}{mine ? <a href={href('mine', a.name)}>My algorithms</a> : null}</p>
      ) : null}
    </article>
  );
}
