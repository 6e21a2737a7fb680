import { EVENT_TYPES } from '../events.ts';

/** What a filter of types and path lets through, in words. */
export function filterSummary(types: string[], path: string | null): string {
  const what = types.length ? types.join(', ') : 'every event';
  return path ? `${what} under ${path}` : what;
}

/**
 * The two fields of an event filter (subscriptions, triggers, the live tail): types and a path
 * pattern, with what they take. The server checks them and says what is wrong.
 */
export function FilterFields({ id, types, path, setTypes, setPath }: { id: string; types: string; path: string; setTypes: (v: string) => void; setPath: (v: string) => void }) {
  return (
    <>
      <label>
        Event types
        <input value={types} placeholder="every event; or data.file.*, call.completed" onInput={(e) => setTypes(e.currentTarget.value)} aria-describedby={`${id}-types-hint`} />
      </label>
      <div id={`${id}-types-hint`} class="hint">
        Separated by commas; <code>*</code> stands for one part (<code>data.file.*</code>), <code>**</code> for any number (<code>data.**</code>).{' '}
        <details>
          <summary>The event types</summary>:{' '}
          {EVENT_TYPES.map((t, i) => (
            <span key={t}>
              {i ? ', ' : ''}
              <code>{t}</code>
            </span>
          ))}
          .
        </details>
      </div>
      <label>
        Path
        <input value={path} placeholder="all your data; or data://.my/inbox/**" onInput={(e) => setPath(e.currentTarget.value)} aria-describedby={`${id}-path-hint`} />
      </label>
      <p id={`${id}-path-hint`} class="hint">
        A pattern of your own data: <code>*</code> within one folder, <code>**</code> across folders (<code>data://.my/inbox/**</code>).
      </p>
    </>
  );
}
