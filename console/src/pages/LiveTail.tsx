import { useEffect, useRef, useState } from 'preact/hooks';
import type { CloudEvent } from '../../../client/src/types.ts';
import { client, noticeError } from '../api.ts';
import { typeList } from '../events.ts';
import { ErrorBox, formatTime } from '../ui.tsx';
import { FilterFields, filterSummary } from './EventFilter.tsx';

/** Events kept on the page: the newest this many. */
export const TAIL_MAX = 500;
/** Longest wait between reconnections after repeated failures. */
const MAX_BACKOFF_MS = 30_000;

interface Shown {
  id: string;
  event: CloudEvent;
}

type Status = 'connecting' | 'live' | 'reconnecting' | 'stopped';

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });
}

/** Adds an event on top, once, keeping the newest TAIL_MAX. */
function onTop(list: Shown[], item: Shown): Shown[] {
  if (list.some((x) => x.id === item.id)) return list;
  const next = [item, ...list];
  if (next.length > TAIL_MAX) next.length = TAIL_MAX;
  return next;
}

/**
 * `#/events/tail`: the user's events as they happen (`GET /v1/users/:user/events`, read with
 * fetch: the session's CSRF header goes with it). When the connection drops it reconnects with
 * `Last-Event-ID`, so nothing is missed or repeated; if that event has expired meanwhile, it
 * starts again from now and says so.
 */
export function LiveTail({ me }: { me: string }) {
  const [types, setTypes] = useState('');
  const [path, setPath] = useState('');
  const [filter, setFilter] = useState({ types: '', path: '', n: 0 });
  const [events, setEvents] = useState<Shown[]>([]);
  const [held, setHeld] = useState<Shown[]>([]);
  const [paused, setPaused] = useState(false);
  const pausedRef = useRef(false);
  const [status, setStatus] = useState<Status>('connecting');
  const [error, setError] = useState<unknown>(undefined);
  const [gap, setGap] = useState(false);

  useEffect(() => {
    const ctl = new AbortController();
    const signal = ctl.signal;
    let lastEventId: string | undefined;
    let failures = 0;
    setStatus('connecting');
    setError(undefined);
    setGap(false);
    const add = (item: Shown) => {
      if (pausedRef.current) setHeld((h) => onTop(h, item));
      else setEvents((e) => onTop(e, item));
    };
    void (async () => {
      // The client reconnects a dropped stream itself, from the last event seen; what it
      // throws is a refusal, or a connection that could not be made at all.
      while (!signal.aborted) {
        try {
          const stream = client.events({
            user: me,
            types: typeList(filter.types),
            path: filter.path.trim() || undefined,
            lastEventId,
            signal,
            onOpen: () => {
              failures = 0;
              setStatus('live');
              setError(undefined);
            },
            onRetry: () => setStatus('reconnecting'),
          });
          for await (const event of stream) {
            lastEventId = event.id;
            add({ id: event.id, event });
          }
          return; // ended by the signal
        } catch (err) {
          if (signal.aborted) return;
          noticeError(err);
          const { code, status } = err as { code?: string; status?: number };
          if (code === 'event_expired') {
            // Away longer than events are kept: from now on, saying some may be missing.
            lastEventId = undefined;
            setGap(true);
            continue;
          }
          setError(err);
          if (status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429) {
            // A filter the server refuses, a session that ended: trying again would not help.
            setStatus('stopped');
            return;
          }
        }
        setStatus('reconnecting');
        failures++;
        await sleep(Math.min(3000 * 2 ** Math.min(failures - 1, 10), MAX_BACKOFF_MS), signal);
      }
    })();
    return () => ctl.abort();
  }, [me, filter]);

  const pause = () => {
    pausedRef.current = true;
    setPaused(true);
  };
  const resume = () => {
    pausedRef.current = false;
    setPaused(false);
    setEvents((e) => {
      let next = e;
      for (const item of [...held].reverse()) next = onTop(next, item);
      return next;
    });
    setHeld([]);
  };
  const clear = () => {
    setEvents([]);
    setHeld([]);
  };

  const said =
    status === 'connecting'
      ? 'Connecting…'
      : status === 'reconnecting'
        ? 'The connection dropped; reconnecting…'
        : status === 'stopped'
          ? 'Stopped.'
          : paused
            ? `Paused: ${held.length} new event${held.length === 1 ? '' : 's'} held.`
            : 'Live: new events appear at the top.';
  return (
    <>
      <p>
        Your events as they happen, newest on top (the last {TAIL_MAX} are kept on this page). Events are kept by the server for a day: after a dropped connection, the ones missed meanwhile come first.
      </p>
      <form
        class="tail-filter"
        onSubmit={(e) => {
          e.preventDefault();
          setEvents([]);
          setHeld([]);
          setFilter({ types, path, n: filter.n + 1 });
        }}
      >
        <FilterFields id="tail" types={types} path={path} setTypes={setTypes} setPath={setPath} />
        <button type="submit">Apply the filter</button>
      </form>
      <p class="muted">Showing {filterSummary(typeList(filter.types), filter.path.trim() || null)}.</p>
      <div class="row tail-controls">
        <p role="status" class={status === 'live' ? 'tail-status ok' : 'tail-status'}>
          {said}
        </p>
        {paused ? (
          <button type="button" class="small" onClick={resume}>
            Resume
          </button>
        ) : (
          <button type="button" class="small" onClick={pause}>
            Pause
          </button>
        )}
        <button type="button" class="small" onClick={clear} disabled={events.length === 0 && held.length === 0}>
          Clear
        </button>
      </div>
      <ErrorBox error={error} />
      {gap ? (
        <p class="error" role="alert">
          Some events may be missing: the connection was away for longer than the server keeps them.
        </p>
      ) : null}
      {events.length === 0 ? (
        <p class="muted">No events yet{paused && held.length ? ' shown' : ''}.</p>
      ) : (
        <ol class="tail" aria-label="Events, newest first">
          {events.map(({ id, event }) => (
            <li key={id}>
              <details>
                <summary>
                  <time dateTime={event.time}>{formatTime(event.time)}</time> <code class="type">{event.type}</code> <span class="subject">{event.subject}</span>
                </summary>
                <pre aria-label={`Data of ${event.type} ${event.subject}`}>{JSON.stringify(event.data ?? null, null, 2)}</pre>
                <p class="muted">
                  Event <code>{id}</code>
                  {event.sequence ? `, number ${Number(event.sequence).toLocaleString()} of yours` : ''}
                </p>
              </details>
            </li>
          ))}
        </ol>
      )}
    </>
  );
}
