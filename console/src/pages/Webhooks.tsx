import { useState } from 'preact/hooks';
import type { Delivery, Subscription, SubscriptionWithSecret } from '../../../client/src/types.ts';
import { client } from '../api.ts';
import { typeList } from '../events.ts';
import { href, navigate } from '../router.ts';
import { CopyButton, ErrorBox, Loading, formatDate, formatTime, useAction, useLoad, usePolling } from '../ui.tsx';
import { FilterFields, filterSummary } from './EventFilter.tsx';

/** A secret made or rotated: shown once, here, and never again. */
function SecretNotice({ made, rotated, onDone }: { made: SubscriptionWithSecret; rotated: boolean; onDone: () => void }) {
  return (
    <div class="notice" role="alert">
      <p>
        {rotated ? 'The new signing secret' : 'The signing secret'} of the subscription to <strong>{made.url}</strong>.{' '}
        <strong>Copy it now: it is shown this once and cannot be read again.</strong>
        {rotated ? ' The old secret goes on signing beside it for 24 hours.' : ''} Your endpoint verifies each delivery&rsquo;s <code>webhook-signature</code> with it.
      </p>
      <p>
        <code class="secret">{made.secret}</code> <CopyButton text={made.secret} label="Copy the secret" />
      </p>
      <button type="button" class="small" onClick={onDone}>
        I have copied it
      </button>
    </div>
  );
}

function stateOf(s: Subscription): string {
  if (s.enabled) return s.failing_since ? `Enabled, failing since ${formatDate(s.failing_since)}` : 'Enabled';
  return s.disabled_reason ? `Disabled: ${s.disabled_reason}` : 'Disabled';
}

/** `#/events` (the default tab): the subscriptions, and a form for a new one. */
export function Webhooks({ me }: { me: string }) {
  const api = client.subscriptions(me);
  const list = useLoad(() => api.list(), [me]);
  const [url, setUrl] = useState('');
  const [types, setTypes] = useState('');
  const [path, setPath] = useState('');
  const [made, setMade] = useState<SubscriptionWithSecret | undefined>(undefined);
  const create = useAction(async () => {
    const t = typeList(types);
    const created = await api.create({ url: url.trim(), ...(t.length ? { types: t } : {}), ...(path.trim() ? { path: path.trim() } : {}) });
    setMade(created);
    setUrl('');
    setTypes('');
    setPath('');
    list.reload();
  });
  const toggle = useAction(async (s: Subscription) => {
    await api.update(s.id, { enabled: !s.enabled });
    list.reload();
  });
  const remove = useAction(async (s: Subscription) => {
    if (!confirm(`Delete the subscription to ${s.url}? Its pending deliveries go with it.`)) return;
    await api.delete(s.id);
    if (made?.id === s.id) setMade(undefined);
    list.reload();
  });
  return (
    <>
      <p>
        A subscription sends your events to a URL of yours as they happen: a signed <code>POST</code> (
        <a href="https://www.standardwebhooks.com/" rel="noreferrer">Standard Webhooks</a>) whose body is the event, tried again for about a day until your endpoint answers 2xx.
      </p>
      {made ? <SecretNotice made={made} rotated={false} onDone={() => setMade(undefined)} /> : null}
      <ErrorBox error={list.error ?? toggle.error ?? remove.error} />
      {list.data ? (
        list.data.length === 0 ? (
          <p class="muted">No subscriptions yet.</p>
        ) : (
          <table class="events">
            <caption class="sr-only">Your webhook subscriptions</caption>
            <thead>
              <tr>
                <th scope="col">URL</th>
                <th scope="col">Sends</th>
                <th scope="col">State</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.data.map((s) => (
                <tr key={s.id}>
                  <th scope="row">
                    <a href={href('events', 'webhooks', s.id)}>{s.url}</a>
                  </th>
                  <td class="long">{filterSummary(s.types, s.path)}</td>
                  <td class={s.enabled ? undefined : 'error'}>
                    {stateOf(s)}
                    {s.overflowed > 0 ? `; ${s.overflowed.toLocaleString()} events not queued (queue full)` : ''}
                  </td>
                  <td class="actions">
                    <a class="button small wide" href={href('events', 'webhooks', s.id)} aria-label={`Deliveries to ${s.url}`}>
                      Deliveries
                    </a>{' '}
                    <button type="button" class="small" onClick={() => void toggle.run(s)} aria-label={`${s.enabled ? 'Disable' : 'Enable'} ${s.url}`}>
                      {s.enabled ? 'Disable' : 'Enable'}
                    </button>{' '}
                    <button type="button" class="small danger" onClick={() => void remove.run(s)} aria-label={`Delete ${s.url}`}>
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )
      ) : (
        <Loading what="your subscriptions" />
      )}
      <section aria-labelledby="new-sub-h">
        <h2 id="new-sub-h">Add a subscription</h2>
        <form
          onSubmit={(e) => {
            e.preventDefault();
            void create.run();
          }}
        >
          <label>
            Endpoint URL
            <input required inputMode="url" value={url} placeholder="https://example.com/hooks/algohost" onInput={(e) => setUrl(e.currentTarget.value)} />
          </label>
          <FilterFields types={types} path={path} setTypes={setTypes} setPath={setPath} id="sub" />
          <ErrorBox error={create.error} />
          <button type="submit" disabled={create.busy}>
            Create the subscription
          </button>
        </form>
      </section>
    </>
  );
}

function Attempts({ d }: { d: Delivery }) {
  if (d.attempts.length === 0) return <span class="muted">none yet</span>;
  return (
    <ol class="attempts">
      {d.attempts.map((a) => (
        <li key={a.attempt}>
          <span class="sr-only">Attempt {a.attempt}: </span>
          {formatTime(a.at)} · <span class={a.status_code !== null && a.status_code >= 200 && a.status_code < 300 ? 'ok' : 'error'}>{a.status_code ?? 'no answer'}</span> · {a.latency_ms.toLocaleString()} ms
          {a.error ? <span class="error"> · {a.error}</span> : null}
        </li>
      ))}
    </ol>
  );
}

/** `#/events/webhooks/ID`: one subscription, what can be done to it, and its deliveries. */
export function SubscriptionPage({ me, id }: { me: string; id: string }) {
  const api = client.subscriptions(me);
  const sub = useLoad(() => api.get(id), [me, id]);
  const deliveries = useLoad(() => api.deliveries(id), [me, id]);
  usePolling(deliveries.reload, 2000);
  const [rotated, setRotated] = useState<SubscriptionWithSecret | undefined>(undefined);
  const [sent, setSent] = useState<string | undefined>(undefined);
  const test = useAction(async () => {
    setSent(undefined);
    const d = await api.test(id);
    setSent(`A test event was queued (delivery ${d.id}).`);
    deliveries.reload();
  });
  const rotate = useAction(async () => {
    if (!confirm('Make a new signing secret? The old one goes on signing beside it for 24 hours.')) return;
    setRotated(await api.rotateSecret(id));
    sub.reload();
  });
  const toggle = useAction(async (s: Subscription) => {
    await api.update(s.id, { enabled: !s.enabled });
    sub.reload();
  });
  const remove = useAction(async (s: Subscription) => {
    if (!confirm(`Delete the subscription to ${s.url}? Its pending deliveries go with it.`)) return;
    await api.delete(s.id);
    navigate('events', 'webhooks');
  });
  const redeliver = useAction(async (d: Delivery) => {
    await api.redeliver(id, d.id);
    setSent(`Delivery ${d.id} is being sent again.`);
    deliveries.reload();
  });
  const s = sub.data;
  return (
    <>
      <p class="crumbs">
        <a href={href('events', 'webhooks')}>All subscriptions</a>
      </p>
      <ErrorBox error={sub.error} />
      {s ? (
        <section aria-labelledby="sub-h">
          <h2 id="sub-h">Subscription to {s.url}</h2>
          {rotated ? <SecretNotice made={rotated} rotated={true} onDone={() => setRotated(undefined)} /> : null}
          <dl class="facts">
            <dt>URL</dt>
            <dd>
              <code>{s.url}</code>
            </dd>
            <dt>Sends</dt>
            <dd>{filterSummary(s.types, s.path)}</dd>
            <dt>State</dt>
            <dd class={s.enabled ? undefined : 'error'}>{stateOf(s)}</dd>
            {s.overflowed > 0 ? (
              <>
                <dt>Not queued</dt>
                <dd>{s.overflowed.toLocaleString()} events (its queue was full)</dd>
              </>
            ) : null}
            <dt>Created</dt>
            <dd>{formatDate(s.created_at)}</dd>
            <dt>Id</dt>
            <dd>
              <code>{s.id}</code>
            </dd>
          </dl>
          <div class="row">
            <button type="button" onClick={() => void test.run()} disabled={test.busy}>
              Send a test event
            </button>
            <button type="button" class="small" onClick={() => void rotate.run()} disabled={rotate.busy}>
              Rotate the secret
            </button>
            <button type="button" class="small" onClick={() => void toggle.run(s)} disabled={toggle.busy}>
              {s.enabled ? 'Disable' : 'Enable'}
            </button>
            <button type="button" class="small danger" onClick={() => void remove.run(s)} disabled={remove.busy}>
              Delete
            </button>
          </div>
          <ErrorBox error={test.error ?? rotate.error ?? toggle.error ?? remove.error} />
        </section>
      ) : sub.error ? null : (
        <Loading what="the subscription" />
      )}
      <section aria-labelledby="deliveries-h">
        <h2 id="deliveries-h">Deliveries</h2>
        <p class="muted">
          The latest 50, newest first; this list refreshes itself. Each attempt says when, the status code your endpoint answered, how long it took, and what went wrong. A delivery keeps its id (the <code>webhook-id</code> header) on every attempt.
        </p>
        {sent ? <p role="status">{sent}</p> : null}
        <ErrorBox error={deliveries.error ?? redeliver.error} />
        {deliveries.data ? (
          deliveries.data.length === 0 ? (
            <p class="muted">No deliveries yet.</p>
          ) : (
            <table class="events">
              <caption class="sr-only">Deliveries of this subscription</caption>
              <thead>
                <tr>
                  <th scope="col">Event</th>
                  <th scope="col">Status</th>
                  <th scope="col">Attempts</th>
                  <th scope="col">
                    <span class="sr-only">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {deliveries.data.map((d) => (
                  <tr key={d.id}>
                    <th scope="row">
                      {d.event_type}
                      <br />
                      <span class="muted">{formatTime(d.created_at)}</span>
                      <br />
                      <code class="muted">{d.id}</code>
                    </th>
                    <td class={d.status === 'delivered' ? 'ok' : d.status === 'failed' ? 'error' : undefined}>
                      {d.status}
                      {d.next_attempt_at ? <span class="muted"> (next try {formatTime(d.next_attempt_at)})</span> : null}
                    </td>
                    <td>
                      <Attempts d={d} />
                    </td>
                    <td>
                      <button type="button" class="small" onClick={() => void redeliver.run(d)} disabled={redeliver.busy} aria-label={`Redeliver ${d.event_type} ${d.id}`}>
                        Redeliver
                      </button>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )
        ) : deliveries.error ? null : (
          <Loading what="deliveries" />
        )}
      </section>
    </>
  );
}
