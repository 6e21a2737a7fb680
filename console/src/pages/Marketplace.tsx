import { useEffect, useRef, useState } from 'preact/hooks';
import type { Algorithm, AlgorithmVersion } from '../../../client/src/types.ts';
import { client } from '../api.ts';
import { href } from '../router.ts';
import { ErrorBox, Loading, Title, useAction } from '../ui.tsx';

const LANGUAGES: Record<string, string> = { python3: 'Python', javascript: 'JavaScript', typescript: 'TypeScript' };
export const languageName = (l: string) => LANGUAGES[l] ?? l;

/** The newest published version a caller may see, or null. */
export async function latestVersion(owner: string, name: string): Promise<AlgorithmVersion | null> {
  // Newest first: the first is the one.
  for await (const v of client.algo(`${owner}/${name}`).versions()) return v;
  return null;
}

/** Results shown at once, and at each "More". */
const SHOWN = 24;

function LatestVersion({ a }: { a: Algorithm }) {
  const [v, setV] = useState<string | null | undefined>(undefined);
  useEffect(() => {
    latestVersion(a.owner, a.name).then(
      (x) => setV(x?.version_info.semantic_version ?? null),
      () => setV(null),
    );
  }, [a.owner, a.name]);
  if (v === undefined) return <span class="muted">…</span>;
  return v ? <span>{v}</span> : <span class="muted">unpublished</span>;
}

export function AlgorithmCard({ a }: { a: Algorithm }) {
  return (
    <li class="card">
      <h2>
        <a href={href('algorithms', a.owner, a.name)}>
          {a.owner}/{a.name}
        </a>
      </h2>
      <p>{a.details.summary || a.details.tagline || <span class="muted">No summary.</span>}</p>
      <dl class="facts">
        <dt>Owner</dt>
        <dd>{a.owner}</dd>
        <dt>Language</dt>
        <dd>{languageName(a.settings.language)}</dd>
        <dt>Latest version</dt>
        <dd>
          <LatestVersion a={a} />
        </dd>
      </dl>
    </li>
  );
}

export function Marketplace() {
  const [q, setQ] = useState(() => new URLSearchParams(location.hash.split('?')[1] ?? '').get('q') ?? '');
  const [results, setResults] = useState<Algorithm[] | undefined>(undefined);
  const [more, setMore] = useState(false);
  // The client pages through the catalogue; this holds the place for "More".
  const cursor = useRef<AsyncGenerator<Algorithm, void, undefined> | undefined>(undefined);
  // Only the latest search is drawn: the catalogue opening the page, or a query typed before
  // it came, may answer after a newer search, and must not cover its results.
  const latest = useRef(0);
  const search = useAction(async (query: string, next?: boolean) => {
    const mine = ++latest.current;
    if (!next || !cursor.current) cursor.current = client.searchAlgorithms(query);
    const it = cursor.current;
    const got: Algorithm[] = [];
    let r: IteratorResult<Algorithm, void>;
    try {
      r = await it.next();
      while (!r.done) {
        got.push(r.value);
        if (got.length === SHOWN) break;
        r = await it.next();
      }
    } catch (err) {
      if (mine !== latest.current) return;
      throw err;
    }
    if (mine !== latest.current) return;
    setResults((old) => (next && old ? [...old, ...got] : got));
    setMore(!r.done);
  });
  useEffect(() => void search.run(q), []);
  return (
    <>
      <Title>Marketplace</Title>
      <form
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          history.replaceState(null, '', q ? `#/?q=${encodeURIComponent(q)}` : '#/');
          void search.run(q);
        }}
      >
        <label for="q">Search public algorithms</label>
        <div class="row">
          <input id="q" type="search" value={q} onInput={(e) => setQ(e.currentTarget.value)} placeholder="name or description" />
          <button type="submit">
            Search
          </button>
        </div>
      </form>
      <ErrorBox error={search.error} />
      {results === undefined ? (
        <Loading what="algorithms" />
      ) : results.length === 0 ? (
        <p role="status">No public algorithm matches{q ? ` “${q}”` : ''}.</p>
      ) : (
        <>
          <p class="muted" role="status">
            {results.length}
            {more ? '+' : ''} algorithm{results.length === 1 ? '' : 's'}
          </p>
          <ul class="cards">
            {results.map((a) => (
              <AlgorithmCard key={a.id} a={a} />
            ))}
          </ul>
          {more ? (
            <button type="button" disabled={search.busy} onClick={() => void search.run(q, true)}>
              More
            </button>
          ) : null}
        </>
      )}
    </>
  );
}
