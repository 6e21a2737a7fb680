/** Small pieces every page uses: loading and error states, titles that take focus, forms. */
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { noticeError } from './api.ts';

/** The page's heading; it takes focus when the page opens, so screen readers announce it. */
export function Title({ children }: { children: ComponentChildren }) {
  const ref = useRef<HTMLHeadingElement>(null);
  useEffect(() => ref.current?.focus(), []);
  return (
    <h1 tabIndex={-1} ref={ref}>
      {children}
    </h1>
  );
}

export function ErrorBox({ error }: { error: unknown }) {
  if (error === undefined || error === null) return null;
  const message = error instanceof Error ? error.message : String(error);
  // The API's errors (ours and the client's) carry a stable code.
  const code = typeof (error as { code?: unknown }).code === 'string' ? (error as { code: string }).code : undefined;
  return (
    <p class="error" role="alert">
      {message}
      {code ? <span class="code"> ({code})</span> : null}
    </p>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="muted" role="status">
      Loading {what}…
    </p>
  );
}

/** Runs `load` when `deps` change; what it gave, its error, and a way to run it again. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { data: T | undefined; error: unknown; reload: () => void; loading: boolean } {
  const [state, setState] = useState<{ data: T | undefined; error: unknown; loading: boolean }>({ data: undefined, error: undefined, loading: true });
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => live && setState({ data, error: undefined, loading: false }),
      (error: unknown) => {
        noticeError(error);
        if (live) setState({ data: undefined, error, loading: false });
      },
    );
    return () => {
      live = false;
    };
  }, [...deps, n]);
  return { ...state, reload: () => setN((x) => x + 1) };
}

/**
 * A form's submit handler that shows its error and disables the button while it runs.
 * `busy` holds while any run is in flight, not only the first to finish.
 */
export function useAction<A extends unknown[]>(act: (...args: A) => Promise<void>): { run: (...args: A) => Promise<void>; busy: boolean; error: unknown; clear: () => void } {
  const [running, setRunning] = useState(0);
  const [error, setError] = useState<unknown>(undefined);
  return {
    busy: running > 0,
    error,
    clear: () => setError(undefined),
    run: async (...args: A) => {
      setRunning((n) => n + 1);
      setError(undefined);
      try {
        await act(...args);
      } catch (err) {
        noticeError(err);
        setError(err);
      } finally {
        setRunning((n) => n - 1);
      }
    },
  };
}

/** Made once: toLocaleString with options builds a formatter at each call (a quarter of a ms). */
const DATES = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

export function formatDate(iso: string | number): string {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : DATES.format(d);
}

const TIMES = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

/** A date with its seconds (events, deliveries, runs). */
export function formatTime(iso: string | number): string {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : TIMES.format(d);
}

/** Calls `refresh` every `ms` while the page is in sight (lists that change on their own). */
export function usePolling(refresh: () => void, ms: number): void {
  const latest = useRef(refresh);
  latest.current = refresh;
  useEffect(() => {
    const timer = setInterval(() => {
      if (document.visibilityState !== 'hidden') latest.current();
    }, ms);
    return () => clearInterval(timer);
  }, [ms]);
}

/** Copies text, saying so for screen readers too. */
export function CopyButton({ text, label = 'Copy' }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      class="small"
      onClick={() => {
        void navigator.clipboard?.writeText(text).then(() => {
          setDone(true);
          setTimeout(() => setDone(false), 1500);
        });
      }}
    >
      {done ? 'Copied' : label}
    </button>
  );
}
