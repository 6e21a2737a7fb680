import { useState } from 'preact/hooks';
import type { UsageDay, UsageSection, UserLimits } from '../../../client/src/types.ts';
import { client } from '../api.ts';
import { ErrorBox, Loading, Title, useLoad } from '../ui.tsx';

const isoDay = (d: Date) => d.toISOString().slice(0, 10);

function daysBetween(from: string, to: string): string[] {
  const out: string[] = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`); t += 86_400_000) out.push(isoDay(new Date(t)));
  return out;
}

const secs = (s: number) => (s < 10 ? s.toFixed(3) : s < 1000 ? s.toFixed(1) : Math.round(s).toLocaleString());

/** The smallest 1, 2, 2.5 or 5 times a power of ten at or above v: the y axis's top. */
function axisTop(v: number): number {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((t) => t >= v * (1 - 1e-9))!;
}

/** A tick's label: three significant digits at most, no trailing zeros. */
const tick = (v: number) => `${Number(v.toPrecision(3)).toLocaleString()} s`;

/** Compute seconds per day as bars on a scale; the table below says the same in words. */
function Chart({ days, rows, label }: { days: string[]; rows: UsageDay[]; label: string }) {
  const perDay = new Map<string, number>();
  for (const r of rows) perDay.set(r.day, (perDay.get(r.day) ?? 0) + r.seconds);
  const max = Math.max(0, ...perDay.values());
  const top = axisTop(max);
  const left = 64; // room for the scale's labels
  const w = 640;
  const h = 160;
  const pad = 8; // above the top tick, so its label is not cut
  const bw = (w - left) / Math.max(days.length, 1);
  const y = (v: number) => pad + h - (v / top) * h;
  return (
    <figure class="chart">
      <svg viewBox={`0 0 ${w} ${pad + h + 20}`} role="img" aria-label={`${label}: compute seconds per day, at most ${secs(max)} s in a day`}>
        {[0, top / 2, top].map((t) => (
          <g key={t} class="scale">
            <line class="grid" x1={left} y1={y(t)} x2={w} y2={y(t)} />
            <text x={left - 6} y={y(t) + 4} class="tick" text-anchor="end">
              {tick(t)}
            </text>
          </g>
        ))}
        {days.map((d, i) => {
          const v = perDay.get(d) ?? 0;
          const bh = (v / top) * h;
          return (
            <g key={d}>
              <title>{`${d}: ${secs(v)} s`}</title>
              <rect class="bar" x={left + i * bw + 1} y={pad + h - bh} width={Math.max(bw - 2, 1)} height={bh} />
            </g>
          );
        })}
        <line class="axis" x1={left} y1={pad} x2={left} y2={pad + h} />
        <line class="axis" x1={left} y1={pad + h} x2={w} y2={pad + h} />
        <text x={left} y={pad + h + 16} class="tick">
          {days[0]}
        </text>
        <text x={w} y={pad + h + 16} class="tick" text-anchor="end">
          {days[days.length - 1]}
        </text>
      </svg>
      <figcaption>Compute seconds per day ({label.toLowerCase()})</figcaption>
    </figure>
  );
}

function Section({ title, section, days, owner }: { title: string; section: UsageSection; days: string[]; owner: boolean }) {
  const byAlgo = new Map<string, { calls: number; seconds: number; bytes_in: number; bytes_out: number; errors: number }>();
  for (const r of section.days) {
    const k = `${r.algorithm}/${r.version}`;
    const a = byAlgo.get(k) ?? { calls: 0, seconds: 0, bytes_in: 0, bytes_out: 0, errors: 0 };
    a.calls += r.calls;
    a.seconds += r.seconds;
    a.bytes_in += r.bytes_in;
    a.bytes_out += r.bytes_out;
    a.errors += r.errors + (r.timeouts ?? 0);
    byAlgo.set(k, a);
  }
  const id = owner ? 'owner-h' : 'caller-h';
  return (
    <section aria-labelledby={id}>
      <h2 id={id}>{title}</h2>
      <p>
        {section.total.calls.toLocaleString()} call{section.total.calls === 1 ? '' : 's'}, {secs(section.total.seconds)} compute seconds
        {section.total.errors ? `, ${section.total.errors} failed` : ''}.
      </p>
      {section.days.length > 0 ? (
        <>
          <Chart days={days} rows={section.days} label={title} />
          <table>
            <caption class="sr-only">{title}, by algorithm version</caption>
            <thead>
              <tr>
                <th scope="col">Algorithm version</th>
                <th scope="col">Calls</th>
                <th scope="col">Compute seconds</th>
                <th scope="col">Bytes in</th>
                <th scope="col">Bytes out</th>
                <th scope="col">Failed</th>
              </tr>
            </thead>
            <tbody>
              {[...byAlgo.entries()].map(([k, a]) => (
                <tr key={k}>
                  <th scope="row">{k}</th>
                  <td>{a.calls.toLocaleString()}</td>
                  <td>{secs(a.seconds)}</td>
                  <td>{a.bytes_in.toLocaleString()}</td>
                  <td>{a.bytes_out.toLocaleString()}</td>
                  <td>{a.errors}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : (
        <p class="muted">No calls in this period.</p>
      )}
    </section>
  );
}

const bytes = (n: number) => (n < 1024 ? `${n} B` : n < 1024 ** 2 ? `${(n / 1024).toFixed(1)} KiB` : n < 1024 ** 3 ? `${(n / 1024 ** 2).toFixed(1)} MiB` : `${(n / 1024 ** 3).toFixed(2)} GiB`);
const day = (iso: string) => new Date(iso).toISOString().slice(0, 10);

/** One quota: what is used of it, as a meter, and in words. */
function Quota({ label, used, of, shown }: { label: string; used: number; of: number | null; shown: (n: number) => string }) {
  if (of === null) return <li>{label}: {shown(used)} used, no limit.</li>;
  return (
    <li>
      {label}: {shown(used)} of {shown(of)} used, {shown(Math.max(0, of - used))} left{' '}
      <meter min={0} max={of} value={Math.min(used, of)} high={of * 0.9} aria-label={`${label} used`} />
    </li>
  );
}

/** The limits in force and what is left of them (GET /v1/users/:user/limits; docs/limits.md). */
function Limits({ limits }: { limits: UserLimits }) {
  const rate = limits.calls_per_min === null ? 'no limit on calls per minute' : `${limits.calls_per_min.toLocaleString()} calls a minute (bursts of ${limits.burst?.toLocaleString()}), ${limits.remaining?.toLocaleString()} available now`;
  const concurrency = limits.concurrency === null ? 'no limit on calls at once' : `${limits.concurrency.toLocaleString()} at once (${limits.in_flight} under way)`;
  return (
    <section aria-labelledby="limits-h">
      <h2 id="limits-h">Your limits</h2>
      <ul class="plain">
        <li>Calls: {rate}; {concurrency}.</li>
        <Quota label="Compute seconds this month" used={limits.compute.used_s} of={limits.compute.seconds_per_month} shown={secs} />
        <Quota label="Hosted data" used={limits.storage.used_bytes} of={limits.storage.bytes} shown={bytes} />
        <li>
          When the workers are all busy: {limits.share.toLocaleString()} of your calls served each turn among the callers waiting.
        </li>
      </ul>
      <p class="muted">The month's compute seconds start again on {day(limits.compute.resets_at)} (UTC).</p>
    </section>
  );
}

export function Usage({ me }: { me: string }) {
  const [span, setSpan] = useState(30);
  const to = isoDay(new Date());
  const from = isoDay(new Date(Date.now() - (span - 1) * 86_400_000));
  const report = useLoad(() => client.usage(me, { from, to }), [me, from, to]);
  const limits = useLoad(() => client.limits(me), [me]);
  const days = daysBetween(from, to);
  return (
    <>
      <Title>Usage</Title>
      <ErrorBox error={limits.error} />
      {limits.data ? <Limits limits={limits.data} /> : <Loading what="limits" />}
      <p>Compute seconds (the time algorithms ran, what calls are billed by), per UTC day.</p>
      <label class="inline">
        Period
        <select value={String(span)} onChange={(e) => setSpan(Number(e.currentTarget.value))}>
          <option value="7">last 7 days</option>
          <option value="30">last 30 days</option>
          <option value="90">last 90 days</option>
        </select>
      </label>
      <ErrorBox error={report.error} />
      {report.data ? (
        <>
          <Section title="Your calls" section={report.data.as_caller} days={days} owner={false} />
          <Section title="Calls to your algorithms" section={report.data.as_owner} days={days} owner={true} />
        </>
      ) : (
        <Loading what="usage" />
      )}
    </>
  );
}
