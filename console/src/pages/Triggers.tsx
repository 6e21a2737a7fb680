import { useState } from 'preact/hooks';
import type { KeyRecord, NewTrigger, Trigger, TriggerRun } from '../../../client/src/types.ts';
import { client } from '../api.ts';
import { typeList } from '../events.ts';
import { href, navigate } from '../router.ts';
import { ErrorBox, Loading, formatDate, formatTime, useAction, useLoad, usePolling } from '../ui.tsx';
import { FilterFields, filterSummary } from './EventFilter.tsx';

const SESSION_KEY = 'you: your own authority (made from this console)';

/** Whose permissions a trigger's runs have. The server answers `key: null` for one made from a console session (the client's type says string). */
function keyName(key: string | null, keys: KeyRecord[] | undefined): string {
  if (key === null) return SESSION_KEY;
  const k = keys?.find((x) => x.id === key);
  return k ? `the key ${k.name} (${k.prefix}…)` : `the key ${key}`;
}

function stateOf(t: Trigger): string {
  if (t.enabled) return 'Enabled';
  return t.disabled_reason ? `Disabled: ${t.disabled_reason}` : 'Disabled';
}

/** The Data page's address of the folder that holds `uri` (`data://.my/out/a.txt` → `#/data/data/.my/out`), if it has one. */
export function folderLink(uri: string): string | undefined {
  const m = /^([A-Za-z][A-Za-z0-9]*(?:\+[A-Za-z0-9_-]+)?):\/\/(.+)$/s.exec(uri);
  if (!m) return undefined;
  const segments = m[2]!.split('/').filter(Boolean);
  if (segments.length < 2) return undefined;
  return href('data', m[1]!, ...segments.slice(0, -1));
}

/** `#/events/triggers`: the triggers, and a form for a new one. */
export function Triggers({ me }: { me: string }) {
  const api = client.triggers(me);
  const list = useLoad(() => api.list(), [me]);
  const keys = useLoad(() => client.keys(me).list(), [me]);
  const [types, setTypes] = useState('data.file.created');
  const [path, setPath] = useState('');
  const [algorithm, setAlgorithm] = useState('');
  const [input, setInput] = useState('{{subject}}');
  const [asJson, setAsJson] = useState(false);
  const [output, setOutput] = useState('');
  const [key, setKey] = useState('');
  const [timeout, setTimeoutS] = useState('300');
  const [made, setMade] = useState<Trigger | undefined>(undefined);
  const create = useAction(async () => {
    setMade(undefined);
    let template: unknown = input;
    if (asJson) {
      try {
        template = JSON.parse(input);
      } catch (err) {
        throw new Error(`input: the template is not JSON (${(err as Error).message}); choose "Text" to send it as text`);
      }
    }
    const t = typeList(types);
    const spec: NewTrigger = { algorithm: algorithm.trim(), input: template };
    if (t.length) spec.types = t;
    if (path.trim()) spec.path = path.trim();
    if (output.trim()) spec.output = output.trim();
    if (key) spec.key = key;
    if (timeout.trim()) spec.timeout = Number(timeout);
    setMade(await api.create(spec));
    list.reload();
  });
  const toggle = useAction(async (t: Trigger) => {
    await api.update(t.id, { enabled: !t.enabled });
    list.reload();
  });
  const remove = useAction(async (t: Trigger) => {
    if (!confirm(`Delete the trigger that runs ${t.algorithm}? Its runs are forgotten with it.`)) return;
    await api.delete(t.id);
    if (made?.id === t.id) setMade(undefined);
    list.reload();
  });
  return (
    <>
      <p>A trigger runs an algorithm on each of your events it matches, with an input made from the event, and writes the result to a path made from it. Each run is a call of yours: it counts in your usage.</p>
      <ErrorBox error={list.error ?? toggle.error ?? remove.error} />
      {list.data ? (
        list.data.length === 0 ? (
          <p class="muted">No triggers yet.</p>
        ) : (
          <table class="events">
            <caption class="sr-only">Your triggers</caption>
            <thead>
              <tr>
                <th scope="col">Runs</th>
                <th scope="col">On</th>
                <th scope="col">Writes to</th>
                <th scope="col" class="wide">
                  As
                </th>
                <th scope="col">State</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.data.map((t) => (
                <tr key={t.id}>
                  <th scope="row">
                    <a href={href('events', 'triggers', t.id)}>{t.algorithm}</a>
                  </th>
                  <td class="long">{filterSummary(t.types, t.path)}</td>
                  <td>{t.output ? <code>{t.output}</code> : <span class="muted">nothing (the result is dropped)</span>}</td>
                  <td class="wide">{keyName(t.key, keys.data)}</td>
                  <td class={t.enabled ? undefined : 'error'}>{stateOf(t)}</td>
                  <td class="actions">
                    <a class="button small wide" href={href('events', 'triggers', t.id)} aria-label={`Runs of ${t.algorithm} (${t.id})`}>
                      Runs
                    </a>{' '}
                    <button type="button" class="small" onClick={() => void toggle.run(t)} aria-label={`${t.enabled ? 'Disable' : 'Enable'} ${t.algorithm} (${t.id})`}>
                      {t.enabled ? 'Disable' : 'Enable'}
                    </button>{' '}
                    <button type="button" class="small danger" onClick={() => void remove.run(t)} aria-label={`Delete ${t.algorithm} (${t.id})`}>
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )
      ) : (
        <Loading what="your triggers" />
      )}
      {made ? (
        <p role="status">
          Made the trigger {made.id}: it runs {made.algorithm} from now on. <a href={href('events', 'triggers', made.id)}>See its runs</a>
        </p>
      ) : null}
      <section aria-labelledby="new-trigger-h">
        <h2 id="new-trigger-h">Add a trigger</h2>
        <form
          onSubmit={(e) => {
            e.preventDefault();
            void create.run();
          }}
        >
          <FilterFields id="trg" types={types} path={path} setTypes={setTypes} setPath={setPath} />
          <label>
            Algorithm
            <input required value={algorithm} placeholder={`${me}/Upper/1.*`} onInput={(e) => setAlgorithm(e.currentTarget.value)} aria-describedby="trg-algo-hint" />
          </label>
          <p id="trg-algo-hint" class="hint">
            <code>owner/name</code> (its latest version) or <code>owner/name/version</code>, where the version may be <code>1.*</code> or <code>1.2.3</code>; found anew at each run.
          </p>
          <label>
            Input template
            <textarea rows={3} value={input} onInput={(e) => setInput(e.currentTarget.value)} aria-describedby="trg-input-hint" />
          </label>
          <fieldset>
            <legend>Send the input as</legend>
            <label class="check">
              <input type="radio" name="trg-as" checked={!asJson} onChange={() => setAsJson(false)} /> Text
            </label>
            <label class="check">
              <input type="radio" name="trg-as" checked={asJson} onChange={() => setAsJson(true)} /> JSON (an object or a list)
            </label>
          </fieldset>
          <p id="trg-input-hint" class="hint">
            Placeholders: <code>{'{{subject}}'}</code>, <code>{'{{name}}'}</code>, <code>{'{{stem}}'}</code>, <code>{'{{ext}}'}</code>, <code>{'{{dir}}'}</code>, <code>{'{{path}}'}</code>, <code>{'{{type}}'}</code>, <code>{'{{id}}'}</code>,{' '}
            <code>{'{{time}}'}</code>, <code>{'{{data.size}}'}</code> and the event&rsquo;s other <code>data.</code> fields. In JSON, a string that is one placeholder alone keeps its type.
          </p>
          <label>
            Output path
            <input value={output} placeholder="none: the result is dropped; or data://.my/out/{{stem}}.txt" onInput={(e) => setOutput(e.currentTarget.value)} />
          </label>
          <label>
            Runs with the permissions of
            <select value={key} onChange={(e) => setKey(e.currentTarget.value)}>
              <option value="">None: your own authority (this console session)</option>
              {(keys.data ?? []).map((k) => (
                <option key={k.id} value={k.id}>
                  the key {k.name} ({k.prefix}…)
                </option>
              ))}
            </select>
          </label>
          <ErrorBox error={keys.error} />
          <label>
            Timeout (seconds)
            <input type="number" min={1} value={timeout} onInput={(e) => setTimeoutS(e.currentTarget.value)} />
          </label>
          <ErrorBox error={create.error} />
          <button type="submit" disabled={create.busy}>
            Create the trigger
          </button>
        </form>
      </section>
    </>
  );
}

function RunOutput({ run }: { run: TriggerRun }) {
  if (!run.output) return <span class="muted">—</span>;
  const folder = run.status === 'succeeded' ? folderLink(run.output) : undefined;
  return (
    <>
      <code>{run.output}</code>
      {folder ? (
        <>
          {' '}
          <a href={folder} aria-label={`Open the folder of ${run.output} in Data`}>
            open its folder
          </a>
        </>
      ) : null}
    </>
  );
}

/** `#/events/triggers/ID`: one trigger, what can be done to it, and its runs. */
export function TriggerPage({ me, id }: { me: string; id: string }) {
  const api = client.triggers(me);
  const trigger = useLoad(() => api.get(id), [me, id]);
  const runs = useLoad(() => api.runs(id), [me, id]);
  const keys = useLoad(() => client.keys(me).list(), [me]);
  usePolling(runs.reload, 2000);
  const toggle = useAction(async (t: Trigger) => {
    await api.update(t.id, { enabled: !t.enabled });
    trigger.reload();
  });
  const remove = useAction(async (t: Trigger) => {
    if (!confirm(`Delete the trigger that runs ${t.algorithm}? Its runs are forgotten with it.`)) return;
    await api.delete(t.id);
    navigate('events', 'triggers');
  });
  const t = trigger.data;
  return (
    <>
      <p class="crumbs">
        <a href={href('events', 'triggers')}>All triggers</a>
      </p>
      <ErrorBox error={trigger.error} />
      {t ? (
        <section aria-labelledby="trg-h">
          <h2 id="trg-h">Trigger running {t.algorithm}</h2>
          <dl class="facts">
            <dt>On</dt>
            <dd>{filterSummary(t.types, t.path)}</dd>
            <dt>Input</dt>
            <dd>
              <pre>{typeof t.input === 'string' ? t.input : JSON.stringify(t.input, null, 2)}</pre>
            </dd>
            <dt>Writes to</dt>
            <dd>{t.output ? <code>{t.output}</code> : 'nothing (the result is dropped)'}</dd>
            <dt>As</dt>
            <dd>{keyName(t.key, keys.data)}</dd>
            <dt>Timeout</dt>
            <dd>{t.timeout} s</dd>
            <dt>State</dt>
            <dd class={t.enabled ? undefined : 'error'}>{stateOf(t)}</dd>
            <dt>Created</dt>
            <dd>{formatDate(t.created_at)}</dd>
            <dt>Id</dt>
            <dd>
              <code>{t.id}</code>
            </dd>
          </dl>
          <div class="row">
            <button type="button" class="small" onClick={() => void toggle.run(t)} disabled={toggle.busy}>
              {t.enabled ? 'Disable' : 'Enable'}
            </button>
            <button type="button" class="small danger" onClick={() => void remove.run(t)} disabled={remove.busy}>
              Delete
            </button>
          </div>
          <ErrorBox error={toggle.error ?? remove.error} />
        </section>
      ) : trigger.error ? null : (
        <Loading what="the trigger" />
      )}
      <section aria-labelledby="runs-h">
        <h2 id="runs-h">Runs</h2>
        <p class="muted">The latest 50, newest first (runs are kept 7 days); this list refreshes itself. A run&rsquo;s answer is at <code>GET /v1/requests/REQUEST_ID</code> for a while.</p>
        <ErrorBox error={runs.error} />
        {runs.data ? (
          runs.data.length === 0 ? (
            <p class="muted">No runs yet.</p>
          ) : (
            <table class="events">
              <caption class="sr-only">Runs of this trigger</caption>
              <thead>
                <tr>
                  <th scope="col">Event</th>
                  <th scope="col">Status</th>
                  <th scope="col" class="wide">
                    Depth
                  </th>
                  <th scope="col" class="wide">
                    Attempts
                  </th>
                  <th scope="col">Output</th>
                  <th scope="col">Request</th>
                </tr>
              </thead>
              <tbody>
                {runs.data.map((r) => (
                  <tr key={r.id}>
                    <th scope="row">
                      {r.subject}
                      <br />
                      <span class="muted">
                        {r.event_type}, {formatTime(r.created_at)}
                      </span>
                    </th>
                    <td class={r.status === 'succeeded' ? 'ok' : r.status === 'failed' ? 'error' : undefined}>
                      {r.status}
                      {r.http_status !== null && r.status === 'failed' ? ` (HTTP ${r.http_status})` : ''}
                      {r.error ? <span class="error run-error">: {r.error}</span> : null}
                    </td>
                    <td class="wide">{r.depth}</td>
                    <td class="wide">{r.attempts}</td>
                    <td>
                      <RunOutput run={r} />
                    </td>
                    <td>
                      <code>{r.request_id}</code>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )
        ) : runs.error ? null : (
          <Loading what="runs" />
        )}
      </section>
    </>
  );
}
