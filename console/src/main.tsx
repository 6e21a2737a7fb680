/**
 * The algohost web console (docs/console.md): a Preact app over the public HTTP API, built by
 * the server itself (src/console/assets.ts) and served at `/`.
 */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import './style.css';
import { currentSession, onSignedOut, signOut, type SessionInfo } from './api.ts';
import { href, useRoute } from './router.ts';
import { ErrorBox, useAction } from './ui.tsx';
import { SignIn } from './pages/SignIn.tsx';
import { Marketplace } from './pages/Marketplace.tsx';
import { AlgorithmPage } from './pages/Algorithm.tsx';
import { ApiReference } from './pages/ApiReference.tsx';
import { MyAlgorithms, ManageAlgorithm } from './pages/MyAlgorithms.tsx';
import { DataBrowser } from './pages/Data.tsx';
import { Keys } from './pages/Keys.tsx';
import { Usage } from './pages/Usage.tsx';
import { Events } from './pages/Events.tsx';
import { Account } from './pages/Account.tsx';

const NAV: [string, string][] = [
  ['', 'Marketplace'],
  ['mine', 'My algorithms'],
  ['data', 'Data'],
  ['events', 'Events'],
  ['keys', 'API keys'],
  ['usage', 'Usage'],
  ['account', 'Account'],
  ['api', 'API'],
];

function Page({ route, me }: { route: string[]; me: SessionInfo }) {
  const [first = '', ...rest] = route;
  switch (first) {
    case '':
      return <Marketplace />;
    case 'algorithms':
      return <AlgorithmPage owner={rest[0] ?? ''} name={rest[1] ?? ''} me={me.username} />;
    case 'mine':
      return rest[0] ? <ManageAlgorithm me={me.username} name={rest[0]} /> : <MyAlgorithms me={me.username} />;
    case 'data':
      return <DataBrowser me={me.username} segments={rest} />;
    case 'events':
      return <Events me={me.username} segments={rest} />;
    case 'keys':
      return <Keys me={me.username} />;
    case 'usage':
      return <Usage me={me.username} />;
    case 'account':
      return <Account me={me.username} />;
    case 'api':
      return <ApiReference />;
    default:
      return (
        <p role="alert">
          No such page. <a href="#/">Back to the marketplace</a>
        </p>
      );
  }
}

function App() {
  const [me, setMe] = useState<SessionInfo | null | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const route = useRoute();
  // Signed out only once the server says so (or that the session had ended already): on a
  // shared machine, a sign-out that failed must not look as if it worked.
  const out = useAction(async () => {
    try {
      await signOut();
    } catch (err) {
      if ((err as { code?: string }).code !== 'no_session') throw err;
    }
    setMe(null);
  });
  useEffect(() => {
    onSignedOut(() => setMe(null));
    currentSession().then((s) => setMe(s ?? null), setError);
  }, []);
  if (error) return <ErrorBox error={error} />;
  if (me === undefined) return <p class="boot">Loading the console…</p>;
  if (me === null) return <SignIn onSignedIn={setMe} />;
  const section = route[0] === 'algorithms' ? '' : (route[0] ?? '');
  return (
    <>
      <a class="skip" href="#main" onClick={(e) => (e.preventDefault(), document.getElementById('main')?.focus())}>
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href="#/">
          algohost
        </a>
        <nav aria-label="Sections">
          <ul>
            {NAV.map(([path, label]) => (
              <li key={path}>
                <a href={href(...(path ? [path] : []))} aria-current={section === path ? 'page' : undefined}>
                  {label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <div class="who">
          <span aria-label="Signed in as">{me.username}</span>
          <button type="button" class="small" onClick={() => void out.run()} disabled={out.busy}>
            Sign out
          </button>
          <ErrorBox error={out.error} />
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <Page key={route.join('/')} route={route} me={me} />
      </main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
