/**
 * A cache for reads on the hot path (the key of every request, the target of every call),
 * valid while the store's version stays the same: any write by this process or commit by
 * another (the admin CLI revoking a key) empties it, so a change takes effect on the next
 * request, as if nothing were cached.
 */
export class VersionedCache<V> {
  private readonly map = new Map<string, V>();
  private at = '';

  constructor(
    private readonly store: { version(): string },
    private readonly max = 10_000,
  ) {}

  /**
   * `at`: the store's version as a request read it when it began, so that a call reads its key
   * and its target against one version (one read of the store's version, not one per cache).
   * It is used only while this cache still holds that very version; otherwise the version is
   * read now, as without it. Either way what is answered was current during the request.
   */
  async get(key: string, load: () => Promise<V>, at?: string): Promise<V> {
    const version = this.current(at);
    const hit = this.map.get(key);
    if (hit !== undefined) return hit;
    const value = await load();
    // Kept only if nothing was written while it was read, and no write transaction was open
    // (whose rows it might have seen before they were committed).
    if (!version.startsWith('w') && this.store.version() === version) {
      if (this.map.size >= this.max) this.map.clear();
      this.map.set(key, value);
    }
    return value;
  }

  /**
   * The value get() would answer from the cache, without a promise (a warm call's path: the
   * frame for its worker is written before anything else gets a turn); undefined when it is
   * not cached as of the store's version, in which case get() loads it.
   */
  peek(key: string, at?: string): V | undefined {
    this.current(at);
    return this.map.get(key);
  }

  /** The store's version now (or `at`, see get()), the cache emptied if it has changed. */
  private current(at: string | undefined): string {
    const version = at !== undefined && at === this.at ? at : this.store.version();
    if (version !== this.at) {
      this.map.clear();
      this.at = version;
    }
    return version;
  }
}
