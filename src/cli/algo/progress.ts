import type { Writable } from 'node:stream';

/**
 * A one-line progress bar with rate and ETA, redrawn in place on a terminal at most ten times
 * a second. `Output.progress` gives a real one only when stderr is a terminal and the output
 * is not JSON; otherwise a silent one, so piped output stays clean.
 */
export interface Progress {
  /** Adds `n` done units (bytes, or steps). */
  add(n: number): void;
  /** Changes the line's label (e.g. a build's current step). */
  label(text: string): void;
  /** Clears the line. */
  done(): void;
}

export const SILENT: Progress = { add() {}, label() {}, done() {} };

const WIDTH = 24;

export class TerminalProgress implements Progress {
  private doneUnits = 0;
  private lastDraw = 0;
  private readonly started = Date.now();

  constructor(
    private readonly out: Writable,
    private text: string,
    private readonly total: number | undefined,
    private readonly bytes: boolean,
  ) {
    this.draw(true);
  }

  add(n: number): void {
    this.doneUnits += n;
    this.draw(false);
  }

  label(text: string): void {
    this.text = text;
    this.draw(true);
  }

  done(): void {
    this.out.write('\r\x1b[2K');
  }

  private draw(force: boolean): void {
    const now = Date.now();
    if (!force && now - this.lastDraw < 100) return;
    this.lastDraw = now;
    const seconds = Math.max(0.001, (now - this.started) / 1000);
    const rate = this.doneUnits / seconds;
    let stats = '';
    if (this.total !== undefined && this.total > 0) {
      const ratio = Math.min(1, this.doneUnits / this.total);
      const filled = Math.round(ratio * WIDTH);
      stats += ` [${'='.repeat(filled)}${filled < WIDTH ? '>' : ''}${' '.repeat(Math.max(0, WIDTH - filled - 1))}] ${Math.floor(ratio * 100)}%`;
      if (rate > 0) stats += ` ETA ${duration((this.total - this.doneUnits) / rate)}`;
    }
    if (this.bytes) stats += ` ${size(this.doneUnits)} ${size(rate)}/s`;
    // A line wider than the terminal wraps, and "\r" then redraws only its last row: the label
    // (a long file name) gives way so that the line fits.
    const columns = (this.out as { columns?: number }).columns;
    let label = this.text;
    if (columns && label.length + stats.length >= columns) {
      const room = Math.max(0, columns - 1 - stats.length);
      label = room <= 1 ? '' : `…${label.slice(label.length - room + 1)}`;
    }
    this.out.write(`\r\x1b[2K${label}${stats}`);
  }
}

export function size(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

function duration(s: number): string {
  if (!Number.isFinite(s)) return '--:--';
  const t = Math.round(s);
  return `${Math.floor(t / 60)}:${String(t % 60).padStart(2, '0')}`;
}
