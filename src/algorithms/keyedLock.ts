/**
 * One holder at a time per key (an algorithm's id): source swaps, builds and publishes of
 * one algorithm run in order, while different algorithms proceed in parallel. In-process:
 * a scale-out deployment replaces it with a lock in the metadata store.
 */
export class KeyedLock {
  private readonly tails = new Map<string | number, Promise<void>>();

  async run<T>(key: string | number, fn: () => Promise<T>): Promise<T> {
    const before = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = before.then(() => mine);
    this.tails.set(key, tail);
    await before;
    try {
      return await fn();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}
