import fs from 'node:fs';

/**
 * How busy the host's CPUs are, all of them together: the share of their time not idle over the
 * last SAMPLE_MS, from the kernel's counters in /proc/stat (Linux), read by a timer that runs only
 * while someone has asked in the last few seconds. Where /proc/stat cannot be read, never busy.
 *
 * For the pre-started workers (spares.ts): a spare costs the CPU a worker's start costs, and
 * when the CPUs are all busy (cold starts coming faster than they can be paid, bench:catalog's
 * mix) starting one ahead only takes that CPU from the calls running now.
 */
export const SAMPLE_MS = 250;
/** The sampler stops this long after the last question. */
const IDLE_STOP_MS = 5_000;

interface Counters {
  busy: number;
  total: number;
}

/** The first line of /proc/stat (`cpu  user nice system idle iowait irq softirq steal …`), summed over the CPUs. */
export function readCounters(text: string): Counters | undefined {
  const line = text.slice(0, text.indexOf('\n'));
  if (!line.startsWith('cpu ')) return undefined;
  const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
  if (f.length < 5 || f.some((x) => !Number.isFinite(x))) return undefined;
  const idle = f[3]! + f[4]!; // idle + iowait
  const total = f.reduce((a, x) => a + x, 0);
  return { busy: total - idle, total };
}

export class HostCpu {
  private last: Counters | undefined;
  private share = 0;
  private timer: NodeJS.Timeout | undefined;
  private asked = 0;

  constructor(private readonly read: () => string | undefined = readProcStat) {}

  /** The share of the CPUs' time busy over the last sample (0 to 1); 0 until a sample has been taken. */
  busy(): number {
    this.asked = performance.now();
    if (this.timer === undefined) {
      this.last = this.counters();
      this.timer = setInterval(() => this.sample(), SAMPLE_MS);
      this.timer.unref();
    }
    return this.share;
  }

  private counters(): Counters | undefined {
    const text = this.read();
    return text === undefined ? undefined : readCounters(text);
  }

  private sample(): void {
    if (performance.now() - this.asked > IDLE_STOP_MS) {
      clearInterval(this.timer);
      this.timer = undefined;
      this.share = 0;
      return;
    }
    const now = this.counters();
    if (now !== undefined && this.last !== undefined && now.total > this.last.total) this.share = (now.busy - this.last.busy) / (now.total - this.last.total);
    this.last = now;
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}

function readProcStat(): string | undefined {
  try {
    return fs.readFileSync('/proc/stat', 'latin1');
  } catch {
    return undefined;
  }
}
