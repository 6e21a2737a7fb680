import { useState } from 'preact/hooks';
import { signIn, type SessionInfo } from '../api.ts';
import { ErrorBox, Title, useAction } from '../ui.tsx';

export function SignIn({ onSignedIn }: { onSignedIn: (s: SessionInfo) => void }) {
  const [username, setUsername] = useState('');
  const [password, setPassword] = useState('');
  const action = useAction(async () => onSignedIn(await signIn(username.trim(), password)));
  return (
    <main id="main" class="signin">
      <Title>Sign in to algohost</Title>
      {!window.isSecureContext ? (
        <p class="error" role="alert">
          This page was not loaded over HTTPS, so the browser will not keep the session cookie. Open the console through HTTPS (or on localhost).
        </p>
      ) : null}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void action.run();
        }}
      >
        <label>
          User name
          <input name="username" autoComplete="username" required value={username} onInput={(e) => setUsername(e.currentTarget.value)} />
        </label>
        <label>
          Password
          <input name="password" type="password" autoComplete="current-password" required value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
        </label>
        <ErrorBox error={action.error} />
        <button type="submit" disabled={action.busy}>
          {action.busy ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
      <p class="muted">
        No password yet? An operator sets one with <code>algohost user password NAME</code>.
      </p>
    </main>
  );
}
