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
 * observation. The registry, the exposition format, the gauges and the process metrics are
 * prom-client's.
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
  value: number;
  /** Histograms: observations per bucket (not cumulative), the last one past every bound. */
  buckets: Float64Array | undefined;
  sum: number;
}

/** A counter or histogram family, as prom-client's registry reads a metric (`get()`). */
class Family {
  private readonly series = new Map<string, Series>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'counter' | 'histogram',
    private readonly labelNames: readonly string[],
    private readonly bounds: readonly number[] = [],
  ) {}

  /** The series of these label values (in labelNames' order), made the first time. */
  at(values: readonly string[], key: string): Series {
    let s = this.series.get(key);
    if (s === undefined) {
      const labels: Record<string, string> = {};
      this.labelNames.forEach((n, i) => (labels[n] = values[i]!));
      s = { labels, value: 0, buckets: this.type === 'histogram' ? new Float64Array(this.bounds.length + 1) : undefined, sum: 0 };
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

  get(): { name: string; help: string; type: string; aggregator: 'sum'; values: { labels: Record<string, string | number>; value: number; metricName?: string }[] } {
    const values: { labels: Record<string, string | number>; value: number; metricName?: string }[] = [];
    for (const s of this.series.values()) {
      if (s.buckets === undefined) {
        values.push({ labels: s.labels, value: s.value });
        continue;
      }
      let cumulative = 0;
      for (let i = 0; i < this.bounds.length; i++) {
        cumulative += s.buckets[i]!;
        values.push({ labels: { ...s.labels, le: this.bounds[i]! }, value: cumulative, metricName: `${this.name}_bucket` });
      }
      values.push({ labels: { ...s.labels, le: '+Inf' }, value: s.value, metricName: `${this.name}_bucket` });
      values.push({ labels: s.labels, value: s.sum, metricName: `${this.name}_sum` });
      values.push({ labels: s.labels, value: s.value, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: 'sum', values };
  }
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
  readonly registry = new Registry();
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
    this.registry.registerMetric(f as unknown as Parameters<Registry['registerMetric']>[0]);
    return f;
  }

  http(route: string, method: string, status: number, seconds: number): void {
    const m = METHODS.has(method) ? method : 'other';
    const key = `${m} ${status} ${route}`;
    this.httpRequests.add(this.httpRequests.at([route, m, String(status)], key), 1);
    const dkey = `${m} ${route}`;
    this.httpDuration.add(this.httpDuration.at([route, m], dkey), seconds);
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
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
