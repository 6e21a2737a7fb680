import { useState } from 'preact/hooks';
import { encodePath, request } from '../api.ts';
import { ErrorBox, Title, useAction } from '../ui.tsx';

export function Account({ me }: { me: string }) {
  const [current, setCurrent] = useState('');
  const [next, setNext] = useState('');
  const [again, setAgain] = useState('');
  const [done, setDone] = useState(false);
  const change = useAction(async () => {
    setDone(false);
    if (next !== again) throw new Error('the two new passwords differ');
    await request(`/v1/users/${encodePath(me)}/password`, { method: 'PUT', json: { current_password: current, password: next } });
    setCurrent('');
    setNext('');
    setAgain('');
    setDone(true);
  });
  return (
    <>
      <Title>Account</Title>
      <p>
        Signed in as <strong>{me}</strong>.
      </p>
      <section aria-labelledby="pw-h">
        <h2 id="pw-h">Change your password</h2>
        <form
          onSubmit={(e) => {
            e.preventDefault();
            void change.run();
          }}
        >
          <label>
            Current password
            <input type="password" autoComplete="current-password" required value={current} onInput={(e) => setCurrent(e.currentTarget.value)} />
          </label>
          <label>
            New password (8 characters at least)
            <input type="password" autoComplete="new-password" required minLength={8} value={next} onInput={(e) => setNext(e.currentTarget.value)} />
          </label>
          <label>
            New password again
            <input type="password" autoComplete="new-password" required minLength={8} value={again} onInput={(e) => setAgain(e.currentTarget.value)} />
          </label>
          <ErrorBox error={change.error} />
          {done ? <p role="status">Changed. Your other sessions were signed out.</p> : null}
          <button type="submit" disabled={change.busy}>
            Change the password
          </button>
        </form>
      </section>
    </>
  );
}
