import { useEffect, useRef, useState } from 'preact/hooks';
import type { Algorithm, AlgorithmVersion, CompileResult, Language, VersionType } from '../../../client/src/types.ts';
import { bytes, client, encodePath, upload } from '../api.ts';
import { href, navigate } from '../router.ts';
import { CopyButton, ErrorBox, Loading, Title, formatDate, useAction, useLoad } from '../ui.tsx';
import { languageName } from './Marketplace.tsx';

const NAME = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;

/** Every item of one of the client's paged listings. */
export async function all<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of items) out.push(x);
  return out;
}

export function MyAlgorithms({ me }: { me: string }) {
  const list = useLoad(() => all(client.algorithms(me)), [me]);
  const [name, setName] = useState('');
  const [language, setLanguage] = useState('python3');
  const [summary, setSummary] = useState('');
  const create = useAction(async () => {
    if (!NAME.test(name)) throw new Error('a name starts with a letter, then letters, digits or underscores (64 at most)');
    await client.algo(`${me}/${name}`).create({ details: { summary }, settings: { language: language as Language } });
    navigate('mine', name);
  });
  return (
    <>
      <Title>My algorithms</Title>
      <ErrorBox error={list.error} />
      {list.data ? (
        list.data.length === 0 ? (
          <p>You have no algorithm yet: create one below.</p>
        ) : (
          <table>
            <caption class="sr-only">Your algorithms</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Language</th>
                <th scope="col">Summary</th>
                <th scope="col">Updated</th>
              </tr>
            </thead>
            <tbody>
              {list.data.map((a: Algorithm) => (
                <tr key={a.id}>
                  <th scope="row">
                    <a href={href('mine', a.name)}>{a.name}</a>
                  </th>
                  <td>{languageName(a.settings.language)}</td>
                  <td>{a.details.summary}</td>
                  <td>{formatDate(a.updated_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )
      ) : (
        <Loading what="your algorithms" />
      )}
      <section aria-labelledby="create-h">
        <h2 id="create-h">Create an algorithm</h2>
        <form
          onSubmit={(e) => {
            e.preventDefault();
            void create.run();
          }}
        >
          <label>
            Name
            <input required value={name} onInput={(e) => setName(e.currentTarget.value)} pattern="[A-Za-z][A-Za-z0-9_]{0,63}" aria-describedby="name-hint" />
          </label>
          <p id="name-hint" class="hint">
            A letter, then letters, digits or underscores. It is called as {me}/<em>name</em>.
          </p>
          <label>
            Language
            <select value={language} onChange={(e) => setLanguage(e.currentTarget.value)}>
              <option value="python3">Python 3</option>
              <option value="javascript">JavaScript</option>
              <option value="typescript">TypeScript</option>
            </select>
          </label>
          <label>
            Summary
            <input value={summary} onInput={(e) => setSummary(e.currentTarget.value)} maxLength={300} />
          </label>
          <ErrorBox error={create.error} />
          <button type="submit" disabled={create.busy}>
            Create
          </button>
        </form>
      </section>
    </>
  );
}

/** Compiles, showing the build's log as it grows (the log is read while the compile request runs). */
function Compile({ me, name, onBuilt }: { me: string; name: string; onBuilt: (b: CompileResult) => void }) {
  const algo = client.algo(`${me}/${name}`);
  const [log, setLog] = useState<string | undefined>(undefined);
  const [result, setResult] = useState<CompileResult | undefined>(undefined);
  const logRef = useRef<HTMLPreElement>(null);
  useEffect(() => {
    if (logRef.current) logRef.current.scrollTop = logRef.current.scrollHeight;
  }, [log]);
  const compile = useAction(async () => {
    setResult(undefined);
    setLog('');
    let done = false;
    const follow = (async () => {
      while (!done) {
        await new Promise((r) => setTimeout(r, 300));
        if (done) break;
        const builds = await algo.builds().catch(() => undefined);
        const running = builds?.find((b) => b.status === 'in-progress');
        if (running) {
          const logs = await algo.buildLogs(running.build_id).catch(() => undefined);
          if (!done && logs !== undefined) setLog(logs);
        }
      }
    })();
    try {
      const r = await algo.compile();
      done = true;
      await follow;
      setLog(r.compilation.output);
      setResult(r);
      onBuilt(r);
    } finally {
      done = true;
    }
  });
  return (
    <section aria-labelledby="compile-h">
      <h2 id="compile-h">Build</h2>
      <button type="button" onClick={() => void compile.run()} disabled={compile.busy}>
        {compile.busy ? 'Building…' : 'Compile'}
      </button>
      <ErrorBox error={compile.error} />
      {result ? (
        <p role="status" class={result.compilation.successful ? 'ok' : 'error'}>
          {result.compilation.successful ? `Built ${result.build.build_id.slice(0, 12)}: ready to publish.` : 'The build failed: see its log.'}
        </p>
      ) : null}
      {log !== undefined ? (
        <pre class="log" ref={logRef} aria-label="Build log" aria-live="polite" tabIndex={0}>
          {log || (compile.busy ? 'Waiting for the build to start…' : '')}
        </pre>
      ) : null}
    </section>
  );
}

function Upload({ me, name, onUploaded }: { me: string; name: string; onUploaded: () => void }) {
  const [progress, setProgress] = useState<{ sent: number; total: number } | undefined>(undefined);
  const [done, setDone] = useState<string | undefined>(undefined);
  const send = useAction(async (file: File) => {
    setDone(undefined);
    const r = (await upload(`/v1/algorithms/${encodePath(me)}/${encodePath(name)}/source`, file, 'application/gzip', (sent, total) => setProgress({ sent, total }))) as {
      source: { files: number; bytes: number };
    };
    setDone(`Uploaded ${r.source.files} files (${bytes(r.source.bytes)}). Compile it next.`);
    onUploaded();
  });
  return (
    <section aria-labelledby="upload-h">
      <h2 id="upload-h">Source</h2>
      <label>
        Upload a source archive (.tar.gz)
        <input type="file" accept=".tar.gz,.tgz,application/gzip" disabled={send.busy} onChange={(e) => e.currentTarget.files?.[0] && void send.run(e.currentTarget.files[0])} />
      </label>
      {progress && send.busy ? <progress max={progress.total} value={progress.sent} aria-label="Upload progress" /> : null}
      <ErrorBox error={send.error} />
      {done ? <p role="status">{done}</p> : null}
      <p>Or push it with git:</p>
      <pre>
        <code>git clone {`${location.origin}/git/${me}/${name}.git`}</code>
      </pre>
      <CopyButton text={`${location.origin}/git/${me}/${name}.git`} label="Copy the git address" />
      <p class="hint">git asks for your user name and an API key as the password.</p>
    </section>
  );
}

function Publish({ me, name, onPublished }: { me: string; name: string; onPublished: (v: AlgorithmVersion) => void }) {
  const [type, setType] = useState<VersionType>('minor');
  const [notes, setNotes] = useState('');
  const [sample, setSample] = useState('');
  const [visibility, setVisibility] = useState<'public' | 'private'>('public');
  const [published, setPublished] = useState<string | undefined>(undefined);
  const publish = useAction(async () => {
    let sampleInput: unknown = undefined;
    if (sample.trim()) {
      try {
        sampleInput = JSON.parse(sample);
      } catch {
        sampleInput = sample;
      }
    }
    const v = await client.algo(`${me}/${name}`).publish({
      settings: { algorithm_callability: visibility },
      version_info: { version_type: type, release_notes: notes, ...(sampleInput !== undefined ? { sample_input: sampleInput } : {}) },
    });
    setPublished(v.version_info.semantic_version);
    onPublished(v);
  });
  return (
    <section aria-labelledby="publish-h">
      <h2 id="publish-h">Publish</h2>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void publish.run();
        }}
      >
        <fieldset>
          <legend>Version</legend>
          {(['major', 'minor', 'revision'] as const).map((t) => (
            <label key={t} class="inline">
              <input type="radio" name="version_type" value={t} checked={type === t} onChange={() => setType(t)} /> {t}
            </label>
          ))}
        </fieldset>
        <fieldset>
          <legend>Who may call it</legend>
          <label class="inline">
            <input type="radio" name="callability" value="public" checked={visibility === 'public'} onChange={() => setVisibility('public')} /> public
          </label>
          <label class="inline">
            <input type="radio" name="callability" value="private" checked={visibility === 'private'} onChange={() => setVisibility('private')} /> private (you only)
          </label>
        </fieldset>
        <label>
          Release notes
          <textarea rows={3} value={notes} onInput={(e) => setNotes(e.currentTarget.value)} />
        </label>
        <label>
          Sample input (JSON, or text)
          <textarea rows={2} value={sample} onInput={(e) => setSample(e.currentTarget.value)} spellcheck={false} />
        </label>
        <ErrorBox error={publish.error} />
        <button type="submit" disabled={publish.busy}>
          Publish the last build
        </button>
      </form>
      {published ? (
        <p role="status" class="ok">
          Published {me}/{name}/{published}. <a href={href('algorithms', me, name)}>Open its page</a>
        </p>
      ) : null}
    </section>
  );
}

export function ManageAlgorithm({ me, name }: { me: string; name: string }) {
  const algo = useLoad(() => client.algo(`${me}/${name}`).info(), [me, name]);
  const versions = useLoad(() => all(client.algo(`${me}/${name}`).versions()), [me, name]);
  if (algo.error) return <ErrorBox error={algo.error} />;
  if (!algo.data) return <Loading what="the algorithm" />;
  const a = algo.data;
  return (
    <>
      <p class="crumbs">
        <a href={href('mine')}>My algorithms</a>
      </p>
      <Title>
        {a.owner}/{a.name}
      </Title>
      <p>
        {languageName(a.settings.language)} · <a href={href('algorithms', a.owner, a.name)}>Public page</a>
      </p>
      <Upload me={me} name={a.name} onUploaded={() => undefined} />
      <Compile me={me} name={a.name} onBuilt={() => undefined} />
      <Publish me={me} name={a.name} onPublished={() => versions.reload()} />
      <section aria-labelledby="versions-h">
        <h2 id="versions-h">Versions</h2>
        <ErrorBox error={versions.error} />
        {versions.data ? (
          versions.data.length === 0 ? (
            <p>No version published yet.</p>
          ) : (
            <ul class="plain">
              {versions.data.map((v: AlgorithmVersion) => (
                <li key={v.version_info.semantic_version}>
                  <strong>{v.version_info.semantic_version}</strong> {v.settings.algorithm_callability} <span class="muted">{v.published_at ? formatDate(v.published_at) : ''}</span>
                  {v.version_info.release_notes ? <p>{v.version_info.release_notes}</p> : null}
                </li>
              ))}
            </ul>
          )
        ) : (
          <Loading what="versions" />
        )}
      </section>
    </>
  );
}
