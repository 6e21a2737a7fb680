import { useState } from 'preact/hooks';
import { signIn, type SessionInfo } from '../api.ts';
import { ErrorBox, Title, useAction } from '../ui.tsx';

export function SignIn({ onSignedIn }: { onSignedIn: (s: SessionInfo) => void }) {
  const [username, setUsername] = useState('');
  const [password, setPassword] = useState('');
  const action = useAction(async () => onSignedIn(await signIn(username.trim(), password)));
  // The session cookie is Secure: over plain HTTP (but on localhost) the browser drops it, so a
  // sign-in here would succeed and every page after it fail. The form is off, and says why.
  const insecure = !window.isSecureContext;
  const port = location.port || '80';
  return (
    <main id="main" class="signin">
      <Title>Sign in to algohost</Title>
      {insecure ? (
        <div class="error" role="alert" id="insecure">
          <p>
            Signing in cannot work here: this page came over plain HTTP from <code>{location.host}</code>, and the browser keeps the session cookie only over HTTPS or on
            localhost.
          </p>
          <p>
            Open the console over HTTPS (TLS in front of algohost: docs/deployment.md), or as <code>http://localhost:{port}/</code> on the server itself; from another
            machine, through an SSH tunnel: <code>ssh -L {port}:127.0.0.1:{port} {location.hostname}</code>, then <code>http://localhost:{port}/</code>.
          </p>
        </div>
      ) : null}
      <form
        aria-describedby={insecure ? 'insecure' : undefined}
        onSubmit={(e) => {
          e.preventDefault();
          if (!insecure) void action.run();
        }}
      >
        <fieldset class="plain" disabled={insecure}>
        <label>
          User name
          <input name="username" autoComplete="username" required value={username} onInput={(e) => setUsername(e.currentTarget.value)} />
        </label>
        <label>
          Password
          <input name="password" type="password" autoComplete="current-password" required value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
        </label>
        <ErrorBox error={action.error} />
        <button type="submit" disabled={action.busy || insecure}>
          {action.busy ? 'Signing in…' : 'Sign in'}
        </button>
        </fieldset>
      </form>
      <p class="muted">
        No password yet? An operator sets one with <code>algohost user password NAME</code>.
      </p>
    </main>
  );
}
