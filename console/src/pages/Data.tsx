import { Component } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { DataAcl, DownloadLink, ListingPage } from '../../../client/src/types.ts';
import { dataPath, parseDataUri } from '../../../client/src/uri.ts';
import { bytes, client, request, upload } from '../api.ts';
import { href, navigate } from '../router.ts';
import { ErrorBox, Loading, Title, formatDate, useAction, useLoad } from '../ui.tsx';

/**
 * Routes: `#/data` (hosted collections and connected accounts), `#/data/data/.my/photos`
 * (hosted), `#/data/objstore+label/bucket/dir` (a connected account): the first segment
 * after `data` says where, the rest is the path there.
 */
function uriOf(where: string, path: string[]): string {
  return `${where}://${path.join('/')}`;
}

const ACL_LEVELS: { value: string; label: string; read: string[] }[] = [
  { value: 'private', label: 'Private: only you', read: [] },
  { value: 'algorithms', label: 'My algorithms: you, and your algorithms when anyone calls them', read: ['algo://.my/*'] },
  { value: 'public', label: 'Public: anyone with an API key', read: ['user://*'] },
];

function aclLevel(acl: DataAcl | undefined): string {
  const read = acl?.read ?? [];
  if (read.includes('user://*')) return 'public';
  if (read.length > 0) return 'algorithms';
  return 'private';
}

function AclEditor({ where, path, acl, onChanged }: { where: string; path: string[]; acl: DataAcl | undefined; onChanged: () => void }) {
  const [level, setLevel] = useState(aclLevel(acl));
  const [saved, setSaved] = useState(false);
  useEffect(() => setLevel(aclLevel(acl)), [acl]);
  const save = useAction(async (value: string) => {
    setSaved(false);
    const read = ACL_LEVELS.find((l) => l.value === value)!.read;
    await client.dir(uriOf(where, path)).setAcl({ read });
    setSaved(true);
    onChanged();
  });
  return (
    <form class="acl" onSubmit={(e) => e.preventDefault()}>
      <label>
        Who may read this collection
        <select
          value={level}
          disabled={save.busy}
          onChange={(e) => {
            setLevel(e.currentTarget.value);
            void save.run(e.currentTarget.value);
          }}
        >
          {ACL_LEVELS.map((l) => (
            <option key={l.value} value={l.value}>
              {l.label}
            </option>
          ))}
        </select>
      </label>
      <ErrorBox error={save.error} />
      {saved ? <span role="status">Saved.</span> : null}
    </form>
  );
}

interface Uploading {
  name: string;
  sent: number;
  total: number;
  error?: unknown;
  done?: boolean;
}

function Uploads({ where, path, onUploaded }: { where: string; path: string[]; onUploaded: () => void }) {
  const [items, setItems] = useState<Uploading[]>([]);
  const [over, setOver] = useState(false);
  const send = async (files: File[]) => {
    for (const file of files) {
      const item: Uploading = { name: file.name, sent: 0, total: file.size };
      setItems((xs) => [...xs, item]);
      const update = (change: Partial<Uploading>) => setItems((xs) => xs.map((x) => (x === item ? Object.assign(item, change) : x)).slice());
      try {
        // The client's own mapping of a URI to its API path (it refuses "." and ".." too).
        await upload(dataPath(parseDataUri(uriOf(where, [...path, file.name]))), file, file.type || 'application/octet-stream', (sent, total) => update({ sent, total }));
        update({ done: true, sent: file.size });
        onUploaded();
      } catch (error) {
        update({ error });
      }
    }
  };
  return (
    <section aria-labelledby="upload-h">
      <h2 id="upload-h" class="sr-only">
        Upload
      </h2>
      <div
        class={over ? 'drop over' : 'drop'}
        onDragOver={(e) => {
          e.preventDefault();
          setOver(true);
        }}
        onDragLeave={() => setOver(false)}
        onDrop={(e) => {
          e.preventDefault();
          setOver(false);
          void send([...(e.dataTransfer?.files ?? [])]);
        }}
      >
        <p>Drop files here to upload them into {uriOf(where, path)}, or</p>
        <label class="button">
          choose files
          <input
            type="file"
            multiple
            class="sr-only"
            onChange={(e) => {
              void send([...(e.currentTarget.files ?? [])]);
              e.currentTarget.value = '';
            }}
          />
        </label>
      </div>
      {items.length > 0 ? (
        <ul class="plain uploads" aria-live="polite">
          {items.map((x, i) => (
            <li key={i}>
              <span>{x.name}</span> <progress max={x.total || 1} value={x.sent} aria-label={`Uploading ${x.name}`} />{' '}
              {x.error ? <ErrorBox error={x.error} /> : x.done ? <span>uploaded ({bytes(x.total)})</span> : <span>{bytes(x.sent)} of {bytes(x.total)}</span>}
            </li>
          ))}
        </ul>
      ) : null}
    </section>
  );
}

/**
 * Downloads a file by a link the browser follows itself (`POST /v1/session/downloads`), so it is
 * saved to disk as it arrives, whatever its size, instead of being held whole in this page.
 */
async function download(where: string, path: string[]): Promise<void> {
  const uri = uriOf(where, path);
  // The file's HEAD alongside: what would fail the download (gone, not readable) is said here,
  // in the page, rather than only in the browser's list of downloads.
  const [res] = await Promise.all([request('/v1/session/downloads', { method: 'POST', json: { path: dataPath(parseDataUri(uri)) } }), client.file(uri).stat()]);
  const link = (await res.json()) as DownloadLink;
  const a = document.createElement('a');
  a.href = link.url;
  a.download = path[path.length - 1] ?? 'download';
  document.body.append(a);
  a.click();
  a.remove();
}

interface RowActions {
  link(name: string): string;
  remove(name: string, isDir: boolean): void;
  download(name: string): void;
}

/** Rows drawn per frame: a page of a thousand is drawn in five slices, with frames between. */
const SLICE = 200;

interface PageRowsProps {
  page: ListingPage;
  actions: RowActions;
}

/**
 * One page of a listing (a thousand rows): drawn once, and in slices, so that no single task of
 * the page's main thread draws them all (the browser paints and answers keys in between). A
 * directory of tens of thousands of entries grows by a page at a time, and typing into the
 * page's forms redraws none of them.
 */
class PageRows extends Component<PageRowsProps, { shown: number }> {
  override state = { shown: SLICE };
  private timer: ReturnType<typeof setTimeout> | undefined;

  override shouldComponentUpdate(next: PageRowsProps, nextState: { shown: number }): boolean {
    return next.page !== this.props.page || next.actions !== this.props.actions || nextState.shown !== this.state.shown;
  }

  override componentDidMount(): void {
    this.next();
  }

  override componentDidUpdate(): void {
    this.next();
  }

  override componentWillUnmount(): void {
    clearTimeout(this.timer);
  }

  private next(): void {
    const total = (this.props.page.folders?.length ?? 0) + (this.props.page.files?.length ?? 0);
    if (this.state.shown < total) this.timer = setTimeout(() => this.setState({ shown: this.state.shown + SLICE }), 0);
  }

  override render() {
    const { page, actions } = this.props;
    const folders = (page.folders ?? []).slice(0, this.state.shown);
    const files = (page.files ?? []).slice(0, Math.max(0, this.state.shown - folders.length));
    return (
      <tbody>
        {folders.map((f) => (
          <tr key={`d/${f.name}`}>
            <th scope="row">
              <a href={actions.link(f.name)}>{f.name}/</a>
            </th>
            <td>folder</td>
            <td />
            <td>
              <button type="button" class="small danger" onClick={() => actions.remove(f.name, true)} aria-label={`Delete folder ${f.name}`}>
                Delete
              </button>
            </td>
          </tr>
        ))}
        {files.map((f) => (
          <tr key={`f/${f.filename}`}>
            <th scope="row">{f.filename}</th>
            <td>{bytes(f.size)}</td>
            <td>{formatDate(f.last_modified)}</td>
            <td>
              <button type="button" class="small" onClick={() => actions.download(f.filename)} aria-label={`Download ${f.filename}`}>
                Download
              </button>{' '}
              <button type="button" class="small danger" onClick={() => actions.remove(f.filename, false)} aria-label={`Delete ${f.filename}`}>
                Delete
              </button>
            </td>
          </tr>
        ))}
      </tbody>
    );
  }
}

/** How many entries a listing page holds. */
function entriesOf(page: ListingPage): number {
  return (page.folders?.length ?? 0) + (page.files?.length ?? 0);
}

/**
 * The pages of a listing seen so far, and which one is shown. The API pages a listing by
 * markers (a thousand entries a page): the console shows one page at a time, so a folder of
 * any size costs the page the same (a thousand rows at most), and keeps the pages it has
 * fetched, so that going back is instant.
 */
interface Paging {
  pages: ListingPage[];
  at: number;
}

/** A key for each page object fetched: a page fetched again is drawn anew (in slices). */
const pageIds = new WeakMap<ListingPage, number>();
let lastPageId = 0;
function pageId(page: ListingPage): number {
  let id = pageIds.get(page);
  if (id === undefined) pageIds.set(page, (id = ++lastPageId));
  return id;
}

function Listing({ me, where, path }: { me: string; where: string; path: string[] }) {
  const [paging, setPaging] = useState<Paging>({ pages: [], at: 0 });
  const [version, setVersion] = useState(0);
  // Fetches of a page shown (the first, or one fetched again) are numbered: only the latest is
  // shown, whichever answers last (uploads of several files each ask for one).
  const fetches = useRef(0);
  const isCollection = where === 'data' && path.length === 2 && path[0]!.toLowerCase() === '.my';
  const canUpload = where !== 'data' ? path.length > 0 : path.length >= 2 && (path[0] === '.my' || path[0]!.toLowerCase() === me.toLowerCase());
  const dir = client.dir(uriOf(where, path));
  const tableRef = useRef<HTMLTableElement>(null);
  const first = useLoad(async () => {
    const n = ++fetches.current;
    const page = await dir.page(undefined, { acl: isCollection });
    if (n === fetches.current) setPaging({ pages: [page], at: 0 });
    return page;
  }, [where, path.join('/'), version]);
  /** Shows page `at` (scrolled to the top of the table, if that is out of sight). */
  const show = (next: (p: Paging) => Paging) => {
    setPaging(next);
    const table = tableRef.current;
    if (table && table.getBoundingClientRect().top < 0) table.scrollIntoView({ block: 'start' });
  };
  const forward = useAction(async () => {
    const { pages, at } = paging;
    if (at + 1 < pages.length) return show((p) => ({ ...p, at: p.at + 1 }));
    const marker = pages[at]?.marker;
    if (!marker) return;
    const page = await dir.page(marker);
    // Only onto the listing it continues (a reload since, after an upload, started another).
    show((p) => (p.pages.length === at + 1 && p.pages[at]?.marker === marker ? { pages: [...p.pages, page], at: at + 1 } : p));
  });
  /**
   * After a change (a deletion, an upload, a new folder): the page shown is fetched again from
   * where it starts, and the pages after it are forgotten (their markers may now skip or repeat
   * entries); the user stays on their page. The first page is the listing's own load (it
   * carries the ACL).
   */
  const refresh = useAction(async () => {
    const { pages, at } = paging;
    if (at === 0) return setVersion((v) => v + 1);
    const n = ++fetches.current;
    const marker = pages[at - 1]?.marker;
    const page = await dir.page(marker);
    if (n !== fetches.current) return;
    setPaging((p) => {
      if (p.pages[at - 1]?.marker !== marker) return p;
      const kept = p.pages.slice(0, at);
      // The last entries went: the page before is now the last.
      if (entriesOf(page) === 0 && !page.marker) return { pages: [...kept.slice(0, -1), { ...kept[at - 1]!, marker: undefined }], at: at - 1 };
      return { pages: [...kept, page], at };
    });
  });
  const [folder, setFolder] = useState('');
  const mkdir = useAction(async () => {
    await dir.dir(folder).create();
    setFolder('');
    await latest.current.refresh.run();
  });
  const remove = useAction(async (name: string, isDir: boolean) => {
    const uri = uriOf(where, [...path, name]);
    if (!confirm(isDir ? `Delete the folder ${uri} and everything in it?` : `Delete ${uri}?`)) return;
    await (isDir ? client.dir(uri).delete({ force: true }) : client.file(uri).delete());
    await latest.current.refresh.run();
  });
  const get = useAction(async (name: string) => download(where, [...path, name]));
  // The rows call the latest handlers through one object that never changes, so that a page
  // already shown is not drawn again (PageRows) when anything else on the page changes.
  const latest = useRef({ remove, get, refresh });
  latest.current = { remove, get, refresh };
  const actions = useMemo<RowActions>(
    () => ({
      link: (name) => href('data', where, ...path, name),
      remove: (name, isDir) => void latest.current.remove.run(name, isDir),
      download: (name) => void latest.current.get.run(name),
    }),
    [where, path.join('/')],
  );
  if (first.error) return <ErrorBox error={first.error} />;
  if (!first.data) return <Loading what={uriOf(where, path)} />;
  const { pages, at } = paging;
  const page = pages[at] ?? first.data;
  const from = pages.slice(0, at).reduce((n, p) => n + entriesOf(p), 0);
  const count = entriesOf(page);
  const more = at + 1 < pages.length || Boolean(page.marker);
  const paged = at > 0 || more;
  // While the listing changes under it (a deletion, a page fetched again), the pager waits.
  const busy = forward.busy || refresh.busy || remove.busy || first.loading;
  return (
    <>
      {isCollection ? <AclEditor where={where} path={path} acl={first.data.acl} onChanged={() => undefined} /> : null}
      <ErrorBox error={remove.error ?? get.error ?? refresh.error} />
      {count === 0 ? (
        <p role="status">{paged ? 'No entries on this page.' : 'This folder is empty.'}</p>
      ) : (
        <table class="listing" ref={tableRef}>
          <caption class="sr-only">
            Contents of {uriOf(where, path)}
            {paged ? `, page ${at + 1}` : ''}
          </caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Size</th>
              <th scope="col">Modified</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <PageRows key={pageId(page)} page={page} actions={actions} />
        </table>
      )}
      <p class="muted" role="status">
        {count === 0
          ? null
          : paged
            ? `Page ${at + 1}: ${count === 1 ? `entry ${(from + 1).toLocaleString('en')}` : `entries ${(from + 1).toLocaleString('en')}–${(from + count).toLocaleString('en')}`}${more ? '; more follow' : ', the last'}`
            : `${(page.folders?.length ?? 0).toLocaleString('en')} folder${page.folders?.length === 1 ? '' : 's'}, ${(page.files?.length ?? 0).toLocaleString('en')} file${page.files?.length === 1 ? '' : 's'}`}
      </p>
      {paged ? (
        <nav class="row pager" aria-label="Pages">
          <button type="button" onClick={() => show((p) => ({ ...p, at: Math.max(0, p.at - 1) }))} disabled={at === 0 || busy}>
            Previous page
          </button>
          <button type="button" onClick={() => void forward.run()} disabled={!more || busy}>
            {forward.busy ? 'Loading…' : 'Next page'}
          </button>
        </nav>
      ) : null}
      <ErrorBox error={forward.error} />
      {path.length >= 1 ? (
        <form
          class="row"
          onSubmit={(e) => {
            e.preventDefault();
            void mkdir.run();
          }}
        >
          <label>
            {path.length === 1 && where === 'data' ? 'New collection' : 'New folder'}
            <input required value={folder} onInput={(e) => setFolder(e.currentTarget.value)} />
          </label>
          <button type="submit" disabled={mkdir.busy}>
            Create
          </button>
          <ErrorBox error={mkdir.error} />
        </form>
      ) : null}
      {canUpload ? <Uploads where={where} path={path} onUploaded={() => void latest.current.refresh.run()} /> : null}
    </>
  );
}

function Roots({ me }: { me: string }) {
  const accounts = useLoad(() => client.connectors(me).list(), [me]);
  const [other, setOther] = useState('');
  return (
    <>
      <Listing me={me} where="data" path={['.my']} />
      <section aria-labelledby="connected-h">
        <h2 id="connected-h">Connected storage</h2>
        <ErrorBox error={accounts.error} />
        {accounts.data ? (
          accounts.data.length === 0 ? (
            <p class="muted">No connected account. Connect S3 or WebDAV storage with the API or the algo CLI (docs/connectors.md).</p>
          ) : (
            <ul class="plain">
              {accounts.data.map((a) => (
                <li key={a.label}>
                  <a href={href('data', `${a.protocol}+${a.label}`)}>
                    {a.protocol}+{a.label}://
                  </a>{' '}
                  <span class="muted">
                    {a.provider}
                    {a.writeable ? '' : ', read-only'}
                  </span>
                </li>
              ))}
            </ul>
          )
        ) : null}
      </section>
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          const m = /^data:\/\/(.+)$/.exec(other.trim());
          const rest = (m ? m[1]! : other.trim()).split('/').filter(Boolean);
          if (rest.length) navigate('data', 'data', ...rest);
        }}
      >
        <label>
          Open another user's collection
          <input value={other} placeholder="data://alice/photos" onInput={(e) => setOther(e.currentTarget.value)} />
        </label>
        <button type="submit">Open</button>
      </form>
    </>
  );
}

export function DataBrowser({ me, segments }: { me: string; segments: string[] }) {
  const [where = '', ...path] = segments;
  const crumbs = path.map((p, i) => ({ name: p, link: href('data', where, ...path.slice(0, i + 1)) }));
  return (
    <>
      <Title>{where ? uriOf(where, path) : 'Data'}</Title>
      {where ? (
        <nav aria-label="Path" class="crumbs">
          <a href={href('data')}>Data</a>
          {crumbs.map((c) => (
            <span key={c.link}>
              {' / '}
              <a href={c.link}>{c.name}</a>
            </span>
          ))}
        </nav>
      ) : null}
      {where ? <Listing key={segments.join('/')} me={me} where={where} path={path} /> : <Roots me={me} />}
    </>
  );
}
