/**
 * Busy-polling: keeps this process's event loop turning (epoll with a zero timeout) instead of
 * sleeping in the kernel, for a short window while an answer is expected. An answer that comes
 * within the window is read as it arrives, without the wake-up of a sleeping process, which on
 * a small VM costs tens of microseconds each way. The price is CPU: the loop turns for the whole
 * window (or until `rest()`), so the window is short and only opened while something waits.
 */
export class Spinner {
  private until = 0;
  private spinning = false;
  private readonly loop = (): void => {
    if (performance.now() < this.until) setImmediate(this.loop);
    else this.spinning = false;
  };

  constructor(private readonly windowMs: number) {}

  /** Something is expected within the window: turn until then (or until `rest`). */
  expect(): void {
    if (this.windowMs <= 0) return;
    this.until = performance.now() + this.windowMs;
    if (!this.spinning) {
      this.spinning = true;
      setImmediate(this.loop);
    }
  }

  /** Nothing is expected any more: stop at the next turn. */
  rest(): void {
    this.until = 0;
  }
}
