/** Prometheus text format, read back: the samples of one scrape, looked up by name and labels. */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses the exposition (comments skipped); fails on a line it cannot read. */
export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/g;
    for (let l = re.exec(m[2] ?? ''); l; l = re.exec(m[2] ?? '')) labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

/** The value of the one sample of `name` with exactly `labels`, or 0 when there is none. */
export function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const want = Object.entries(labels);
  const found = samples.filter((s) => s.name === name && Object.keys(s.labels).length === want.length && want.every(([k, v]) => s.labels[k] === v));
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} ${JSON.stringify(labels)}`);
  return found[0]?.value ?? 0;
}
