/**
 * Preloaded (`node --import`) into every server the data benchmark spawns, ours and the bare
 * baseline alike, so both get the same treatment. Over the IPC channel the benchmark opens a
 * "memory window" around a transfer: the probe collects garbage (the child runs with
 * --expose-gc), samples process.memoryUsage() every few milliseconds until the window is
 * closed, then collects garbage again and answers the start, peak and after-GC figures.
 * It also counts the process's garbage collections by kind (a PerformanceObserver on 'gc'
 * entries), which the benchmark reads around its timed runs.
 * Without an IPC channel (a server started by hand) it does nothing.
 */
import { PerformanceObserver, constants } from 'node:perf_hooks';

export interface MemFigures {
  heapUsed: number;
  rss: number;
  /** external + arrayBuffers: where Buffers (file chunks) live, outside the JS heap. */
  offHeap: number;
}

export interface MemWindow {
  start: MemFigures;
  peak: MemFigures;
  afterGc: MemFigures;
  samples: number;
}

/** Garbage collections since the process started, by kind, and their total pause time. */
export interface GcCounts {
  major: number;
  minor: number;
  incremental: number;
  pauseMs: number;
}

export type ProbeRequest = { probe: 'start'; id: number } | { probe: 'stop'; id: number } | { probe: 'gc'; id: number };
export type ProbeReply =
  | { probe: 'started'; id: number }
  | { probe: 'stopped'; id: number; window: MemWindow }
  | { probe: 'gc'; id: number; counts: GcCounts };

const SAMPLE_MS = 5;

function figures(): MemFigures {
  const m = process.memoryUsage();
  return { heapUsed: m.heapUsed, rss: m.rss, offHeap: m.external + m.arrayBuffers };
}

function collect(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

if (typeof process.send === 'function') {
  let timer: NodeJS.Timeout | undefined;
  let start: MemFigures | undefined;
  let peak: MemFigures | undefined;
  let samples = 0;
  const sample = () => {
    const now = figures();
    samples++;
    peak = {
      heapUsed: Math.max(peak!.heapUsed, now.heapUsed),
      rss: Math.max(peak!.rss, now.rss),
      offHeap: Math.max(peak!.offHeap, now.offHeap),
    };
  };
  const reply = (msg: ProbeReply) => process.send!(msg);
  const gc: GcCounts = { major: 0, minor: 0, incremental: 0, pauseMs: 0 };
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = (entry as { detail?: { kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) gc.major++;
      else if (kind === constants.NODE_PERFORMANCE_GC_MINOR) gc.minor++;
      else if (kind === constants.NODE_PERFORMANCE_GC_INCREMENTAL) gc.incremental++;
      gc.pauseMs += entry.duration;
    }
  }).observe({ entryTypes: ['gc'] });

  process.on('message', (msg: ProbeRequest) => {
    if (typeof msg !== 'object' || msg === null || !('probe' in msg)) return;
    if (msg.probe === 'start') {
      if (timer) clearInterval(timer);
      collect();
      start = figures();
      peak = { ...start };
      samples = 0;
      timer = setInterval(sample, SAMPLE_MS);
      reply({ probe: 'started', id: msg.id });
    } else if (msg.probe === 'gc') {
      reply({ probe: 'gc', id: msg.id, counts: { ...gc } });
    } else if (msg.probe === 'stop' && start) {
      clearInterval(timer);
      timer = undefined;
      sample();
      collect();
      reply({ probe: 'stopped', id: msg.id, window: { start, peak: peak!, afterGc: figures(), samples } });
    }
  });
  // The IPC channel must not keep a server alive on its own, and a server must not outlive
  // the benchmark that started it (if that one crashes, the channel closes).
  process.channel?.unref();
  process.once('disconnect', () => process.exit(0));
}
