import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';

/*
 * What a node counts for Prometheus (docs/metrics.md). One `Metrics` per node (per Services):
 * tests run several nodes in one process, and each is scraped as its own target.
 *
 * Below the domain: it imports nothing of algohost. The parts that count call its methods (one
 * line each); what is read from state the parts already keep (warm workers, queue depths, the
 * database pool) is read when Prometheus scrapes, through `gauge(…, collect)`, never kept up to
 * date on the way of a call.
 *
 * Counters and histograms are this file's own (`Family`): an increment on a call's path is a
 * Map lookup and a few additions, with nothing allocated, where prom-client's own allocate per
 * observation; and they write their own text, each series' labels formatted once, where
 * prom-client's registry formats every line's anew (a scrape of a busy node took 17 ms of
 * which 14 in the HTTP duration histogram; bench/metricsScrape.ts). The gauges, the process
 * metrics and their exposition are prom-client's (`registry`).
 *
 * Label values are bounded by construction: route patterns (never raw URLs), HTTP methods,
 * status codes, outcome kinds, runtimes, results. Never a user, key, path or version.
 */

/** Seconds, for latencies from well under a millisecond (a warm call) to the longest call. */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
/** Seconds, for builds (an install from a registry takes a while). */
const BUILD_BUCKETS = [1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200];

/** HTTP methods shown as themselves; any other is `other` (a client may send any token). */
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

interface Series {
  labels: Record<string, string>;
  /** The labels as the exposition writes them (`a="x",b="y"`), made once. */
  text: string;
  value: number;
  /** Histograms: observations per bucket (not cumulative), the last one past every bound. */
  buckets: Float64Array | undefined;
  sum: number;
}

/** A counter or histogram family, written out by `text()`. */
class Family {
  private readonly series = new Map<string, Series>();
  /** The buckets' `le` label values. */
  private readonly les: readonly string[];

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'counter' | 'histogram',
    private readonly labelNames: readonly string[],
    private readonly bounds: readonly number[] = [],
  ) {
    this.les = [...bounds.map(String), '+Inf'];
  }

  /** The series of these label values (in labelNames' order), made the first time. */
  at(values: readonly string[], key: string): Series {
    let s = this.series.get(key);
    if (s === undefined) {
      const labels: Record<string, string> = {};
      this.labelNames.forEach((n, i) => (labels[n] = values[i]!));
      const text = this.labelNames.map((n) => `${n}="${escapeLabel(labels[n]!)}"`).join(',');
      s = { labels, text, value: 0, buckets: this.type === 'histogram' ? new Float64Array(this.bounds.length + 1) : undefined, sum: 0 };
      this.series.set(key, s);
    }
    return s;
  }

  /** Counts `n` (a counter), or observes `n` (a histogram) in `s`. */
  add(s: Series, n: number): void {
    if (s.buckets === undefined) {
      s.value += n;
      return;
    }
    s.value++;
    s.sum += n;
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && n > bounds[i]!) i++;
    s.buckets[i]!++;
  }

  /** A family with no labels: its one series, made now so that it shows at 0 from the start. */
  only(): Series {
    return this.at([], '');
  }

  /**
   * The family in Prometheus's text format (version 0.0.4), appended to `out` line by line.
   * Written here rather than by prom-client's registry: its formatter builds every sample's
   * label text anew, 4-8 µs a line, and a histogram by route is a thousand lines and more.
   */
  text(out: string[]): void {
    out.push(`# HELP ${this.name} ${this.help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}`, `# TYPE ${this.name} ${this.type}`);
    for (const s of this.series.values()) {
      if (s.buckets === undefined) {
        out.push(`${this.name}${s.text ? `{${s.text}}` : ''} ${s.value}`);
        continue;
      }
      const sep = s.text ? `${s.text},` : '';
      let cumulative = 0;
      for (let i = 0; i <= this.bounds.length; i++) {
        cumulative += s.buckets[i]!;
        out.push(`${this.name}_bucket{${sep}le="${this.les[i]!}"} ${cumulative}`);
      }
      const labels = s.text ? `{${s.text}}` : '';
      out.push(`${this.name}_sum${labels} ${s.sum}`, `${this.name}_count${labels} ${s.value}`);
    }
  }
}

/** A label value as the text format writes it between its quotes. */
function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/** What a gauge read at scrape time gives: one value, or one per label set. */
export type GaugeReading = number | { labels: Record<string, string>; value: number }[];

/** How a call ended, as counted: the outcome's kind (`result` shown as `success`), or `busy` (no worker in time). */
export type CallOutcome = 'success' | 'algorithm_error' | 'timeout' | 'out_of_memory' | 'crashed' | 'busy';

/**
 * The counting side every part is given. `NO_METRICS` (a node that serves no metrics) does
 * nothing; `PromMetrics` counts.
 */
export interface Metrics {
  readonly enabled: boolean;
  /** A request answered: its route pattern (fastify's routeOptions.url; `unmatched` for none). */
  http(route: string, method: string, status: number, seconds: number): void;
  /** A call that reached its version, by how it ended; `seconds` the algorithm's own run time (0 when it did not run). */
  call(outcome: CallOutcome, seconds: number): void;
  /** How long a call waited for a worker of this node's pool (0 for an idle warm one; starting one included). */
  workerWait(seconds: number): void;
  /** A worker started (a cold start) for `runtime` (node, python), taking `seconds`; or failed to. */
  coldStart(runtime: string, seconds: number, ok: boolean): void;
  /** A build finished. */
  build(ok: boolean, seconds: number): void;
  /** Hosted data: bytes of file contents stored (in) or served (out). */
  dataBytes(direction: 'in' | 'out', bytes: number): void;
  /** A webhook delivery attempt: delivered, or failed (to be retried or given up). */
  delivery(ok: boolean): void;
  /** A gauge read when scraped (`collect`; may be async, e.g. a NATS request). Errors leave it out of that scrape. */
  gauge(name: string, help: string, labelNames: readonly string[], collect: () => GaugeReading | Promise<GaugeReading>): void;
  /** The exposition: Prometheus text format. */
  scrape(): Promise<{ contentType: string; body: string }>;
}

class NoMetrics implements Metrics {
  readonly enabled = false;
  http(): void {}
  call(): void {}
  workerWait(): void {}
  coldStart(): void {}
  build(): void {}
  dataBytes(): void {}
  delivery(): void {}
  gauge(): void {}
  scrape(): Promise<{ contentType: string; body: string }> {
    return Promise.resolve({ contentType: Registry.PROMETHEUS_CONTENT_TYPE, body: '' });
  }
}

/** A node that serves no metrics: every count is a no-op. */
export const NO_METRICS: Metrics = new NoMetrics();

/** Where the call outcomes' series are, by kind (a switch, not a lookup by string). */
const OUTCOMES: readonly CallOutcome[] = ['success', 'algorithm_error', 'timeout', 'out_of_memory', 'crashed', 'busy'];

export class PromMetrics implements Metrics {
  readonly enabled = true;
  /** prom-client's: the gauges and the process metrics. */
  readonly registry = new Registry();
  /** This file's counters and histograms, written out before the registry's metrics. */
  private readonly families: Family[] = [];
  private readonly httpRequests = this.family('algohost_http_requests_total', 'HTTP requests answered, by route pattern, method and status code', 'counter', ['route', 'method', 'status']);
  private readonly httpDuration = this.family('algohost_http_request_duration_seconds', 'Time to answer an HTTP request (to the last byte of the answer handed to the socket), by route pattern and method', 'histogram', ['route', 'method'], LATENCY_BUCKETS);
  private readonly calls = this.family('algohost_calls_total', 'Algorithm calls that reached their version (API and all-in-one nodes), by outcome: success, algorithm_error, timeout, out_of_memory, crashed, or busy (no worker in time)', 'counter', ['outcome']);
  private readonly callRun = this.family('algohost_call_run_seconds', "The algorithm's own run time of each call, by outcome", 'histogram', ['outcome'], LATENCY_BUCKETS);
  private readonly wait = this.family('algohost_worker_wait_seconds', "Time a call waited for a worker of this node's pool (0 for an idle warm one; starting one included)", 'histogram', [], LATENCY_BUCKETS).only();
  private readonly coldStarts = this.family('algohost_worker_cold_starts_total', 'Workers started for a call (cold starts), by runtime', 'counter', ['runtime']);
  private readonly startFailures = this.family('algohost_worker_start_failures_total', 'Workers that failed to start, by runtime', 'counter', ['runtime']);
  private readonly startTime = this.family('algohost_worker_start_seconds', 'Time to start a worker and load its algorithm, by runtime', 'histogram', ['runtime'], LATENCY_BUCKETS);
  private readonly builds = this.family('algohost_builds_total', 'Builds finished, by result (succeeded, failed)', 'counter', ['result']);
  private readonly buildTime = this.family('algohost_build_duration_seconds', 'Time a build took, by result', 'histogram', ['result'], BUILD_BUCKETS);
  private readonly data = this.family('algohost_data_bytes_total', 'Hosted data: bytes of file contents stored (in) and served in full (out)', 'counter', ['direction']);
  private readonly deliveries = this.family('algohost_event_deliveries_total', 'Webhook delivery attempts, by result (delivered, failed)', 'counter', ['result']);
  private readonly outcomeSeries: Series[];
  private readonly callRunSeries: Series[];
  private readonly dataIn: Series;
  private readonly dataOut: Series;
  private readonly delivered: Series;
  private readonly failed: Series;

  constructor() {
    // Every outcome shows from the start at 0: `rate()` and alerts see a series before its first count.
    this.outcomeSeries = OUTCOMES.map((o) => this.calls.at([o], o));
    this.callRunSeries = OUTCOMES.map((o) => this.callRun.at([o], o));
    this.dataIn = this.data.at(['in'], 'in');
    this.dataOut = this.data.at(['out'], 'out');
    this.delivered = this.deliveries.at(['delivered'], 'delivered');
    this.failed = this.deliveries.at(['failed'], 'failed');
    for (const r of ['succeeded', 'failed']) this.builds.at([r], r);
    collectDefaultMetrics({ register: this.registry });
  }

  private family(name: string, help: string, type: 'counter' | 'histogram', labelNames: readonly string[], bounds?: readonly number[]): Family {
    const f = new Family(name, help, type, labelNames, bounds);
    this.families.push(f);
    return f;
  }

  /** The HTTP series by route, method and status: found without making a key (nothing allocated once seen). */
  private readonly routes = new Map<string, Map<string, { duration: Series; statuses: Map<number, Series> }>>();

  http(route: string, method: string, status: number, seconds: number): void {
    const m = METHODS.has(method) ? method : 'other';
    let byMethod = this.routes.get(route);
    if (byMethod === undefined) this.routes.set(route, (byMethod = new Map()));
    let r = byMethod.get(m);
    if (r === undefined) byMethod.set(m, (r = { duration: this.httpDuration.at([route, m], `${m} ${route}`), statuses: new Map() }));
    let count = r.statuses.get(status);
    if (count === undefined) r.statuses.set(status, (count = this.httpRequests.at([route, m, String(status)], `${m} ${status} ${route}`)));
    this.httpRequests.add(count, 1);
    this.httpDuration.add(r.duration, seconds);
  }

  call(outcome: CallOutcome, seconds: number): void {
    const i = OUTCOMES.indexOf(outcome);
    this.calls.add(this.outcomeSeries[i]!, 1);
    this.callRun.add(this.callRunSeries[i]!, seconds);
  }

  workerWait(seconds: number): void {
    this.wait.value++;
    this.wait.sum += seconds;
    let i = 0;
    while (i < LATENCY_BUCKETS.length && seconds > LATENCY_BUCKETS[i]!) i++;
    this.wait.buckets![i]!++;
  }

  coldStart(runtime: string, seconds: number, ok: boolean): void {
    if (!ok) {
      this.startFailures.add(this.startFailures.at([runtime], runtime), 1);
      return;
    }
    this.coldStarts.add(this.coldStarts.at([runtime], runtime), 1);
    this.startTime.add(this.startTime.at([runtime], runtime), seconds);
  }

  build(ok: boolean, seconds: number): void {
    const r = ok ? 'succeeded' : 'failed';
    this.builds.add(this.builds.at([r], r), 1);
    this.buildTime.add(this.buildTime.at([r], r), seconds);
  }

  dataBytes(direction: 'in' | 'out', bytes: number): void {
    this.data.add(direction === 'in' ? this.dataIn : this.dataOut, bytes);
  }

  delivery(ok: boolean): void {
    this.deliveries.add(ok ? this.delivered : this.failed, 1);
  }

  gauge(name: string, help: string, labelNames: readonly string[], collect: () => GaugeReading | Promise<GaugeReading>): void {
    new Gauge({
      name,
      help,
      labelNames,
      registers: [this.registry],
      async collect() {
        this.reset();
        let reading: GaugeReading;
        try {
          reading = await collect();
        } catch {
          // Not readable now (NATS away, the database busy): no sample this scrape, rather than a wrong one.
          return;
        }
        if (typeof reading === 'number') this.set(reading);
        else for (const r of reading) this.set(r.labels, r.value);
      },
    });
  }

  async scrape(): Promise<{ contentType: string; body: string }> {
    const out: string[] = [];
    for (const f of this.families) f.text(out);
    out.push('', await this.registry.metrics());
    return { contentType: this.registry.contentType, body: out.join('\n') };
  }
}
