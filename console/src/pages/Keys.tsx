import { useState } from 'preact/hooks';
import type { CreatedKey, KeyPermissions, KeyRecord } from '../../../client/src/types.ts';
import { client } from '../api.ts';
import { CopyButton, ErrorBox, Loading, Title, formatDate, useAction, useLoad } from '../ui.tsx';

const FLAGS: { field: keyof KeyPermissions; label: string }[] = [
  { field: 'allow_algo', label: 'Call algorithms' },
  { field: 'allow_web_algo', label: 'Call algorithms from web pages (/v1/web/algo)' },
  { field: 'allow_data', label: 'Read data' },
  { field: 'allow_data_write', label: 'Write and delete data' },
  { field: 'allow_algo_management', label: 'Manage algorithms, keys and connected accounts' },
];

function summary(p: KeyPermissions): string {
  const on = FLAGS.filter((f) => p[f.field] === true).map((f) => f.label.toLowerCase());
  const parts = [on.length ? on.join(', ') : 'nothing'];
  if (p.allow_algo && !(p.algo_acl.length === 1 && p.algo_acl[0] === 'algo://*')) parts.push(`only ${p.algo_acl.join(', ') || 'no algorithm'}`);
  if (p.referer_host) parts.push(`web calls from ${p.referer_host}`);
  return parts.join('; ');
}

export function Keys({ me }: { me: string }) {
  const api = client.keys(me);
  const keys = useLoad(() => api.list(), [me]);
  const [name, setName] = useState('');
  const [flags, setFlags] = useState<Record<string, boolean>>({ allow_algo: true, allow_web_algo: false, allow_data: true, allow_data_write: false, allow_algo_management: false });
  const [acl, setAcl] = useState('algo://*');
  const [referer, setReferer] = useState('');
  const [created, setCreated] = useState<CreatedKey | undefined>(undefined);
  const create = useAction(async () => {
    const algoAcl = acl
      .split(/[\s,]+/)
      .map((s) => s.trim())
      .filter(Boolean);
    const k = await api.create({ name, permissions: { ...flags, algo_acl: algoAcl, referer_host: referer.trim() || null } });
    setCreated(k);
    setName('');
    keys.reload();
  });
  const revoke = useAction(async (k: KeyRecord) => {
    if (!confirm(`Revoke the key "${k.name}" (${k.prefix}…)? Programs using it stop working at once.`)) return;
    await api.revoke(k.id);
    if (created?.id === k.id) setCreated(undefined);
    keys.reload();
  });
  return (
    <>
      <Title>API keys</Title>
      <p>Programs call the API with a key: <code>Authorization: Simple &lt;key&gt;</code>. This console signs in with your password instead, and never holds a key.</p>
      {created ? (
        <div class="notice" role="alert">
          <p>
            The new key <strong>{created.name}</strong>. Copy it now: it is shown this once and cannot be read again.
          </p>
          <p>
            <code class="secret">{created.api_key}</code> <CopyButton text={created.api_key} label="Copy the key" />
          </p>
          <button type="button" class="small" onClick={() => setCreated(undefined)}>
            I have copied it
          </button>
        </div>
      ) : null}
      <ErrorBox error={keys.error ?? revoke.error} />
      {keys.data ? (
        <table>
          <caption class="sr-only">Your API keys</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Starts with</th>
              <th scope="col">May</th>
              <th scope="col">Created</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {keys.data.map((k) => (
              <tr key={k.id}>
                <th scope="row" class="name">{k.name}</th>
                <td>
                  <code>{k.prefix}…</code>
                </td>
                <td>{summary(k.permissions)}</td>
                <td>{formatDate(k.created_at)}</td>
                <td>
                  <button type="button" class="small danger" onClick={() => void revoke.run(k)} aria-label={`Revoke ${k.name}`}>
                    Revoke
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <Loading what="your keys" />
      )}
      <section aria-labelledby="new-key-h">
        <h2 id="new-key-h">Create a key</h2>
        <form
          onSubmit={(e) => {
            e.preventDefault();
            void create.run();
          }}
        >
          <label>
            Name
            <input required value={name} onInput={(e) => setName(e.currentTarget.value)} />
          </label>
          <fieldset>
            <legend>It may</legend>
            {FLAGS.map((f) => (
              <label key={f.field} class="check">
                <input type="checkbox" checked={flags[f.field] === true} onChange={(e) => setFlags({ ...flags, [f.field]: e.currentTarget.checked })} /> {f.label}
              </label>
            ))}
          </fieldset>
          <label>
            Algorithms it may call
            <input value={acl} onInput={(e) => setAcl(e.currentTarget.value)} aria-describedby="acl-hint" />
          </label>
          <p id="acl-hint" class="hint">
            <code>algo://*</code> for all, or a list such as <code>algo://alice/*, algo://demo/Hello/*</code>.
          </p>
          <label>
            Web pages it may be used from (host)
            <input value={referer} placeholder="any; or example.com, *.example.com" onInput={(e) => setReferer(e.currentTarget.value)} />
          </label>
          <ErrorBox error={create.error} />
          <button type="submit" disabled={create.busy}>
            Create the key
          </button>
        </form>
      </section>
    </>
  );
}
