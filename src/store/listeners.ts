/** Functions to call when something happens (a commit): added, removed, called in turn; one that throws does not stop the rest. */
export class Listeners {
  private readonly fns = new Set<() => void>();

  /** Adds `fn`; returns what removes it. */
  add(fn: () => void): () => void {
    this.fns.add(fn);
    return () => void this.fns.delete(fn);
  }

  emit(): void {
    for (const fn of this.fns) {
      try {
        fn();
      } catch {
        // A listener's failure is its own: the commit it hears of has happened.
      }
    }
  }
}
