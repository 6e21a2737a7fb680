/**
 * A token bucket (docs/limits.md): `burst` tokens at most, refilled at `perMin` a minute; a
 * call takes one. Deterministic in the time it is given, so tests drive it with their clock.
 */
export class TokenBucket {
  private tokens: number;
  private at: number;

  constructor(
    readonly perMin: number,
    readonly burst: number,
    now: number,
    /** Tokens in it at `now` (a bucket read from elsewhere); full by default. */
    tokens = burst,
  ) {
    this.tokens = Math.min(burst, tokens);
    this.at = now;
  }

  private refill(now: number): void {
    if (now > this.at) {
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) * this.perMin) / 60_000);
      this.at = now;
    }
  }

  /** Whether a token is there (nothing is taken). */
  has(now: number): boolean {
    this.refill(now);
    return this.tokens >= 1;
  }

  /** Takes a token if there is one. */
  take(now: number): boolean {
    this.refill(now);
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /** Whole tokens left now. */
  remaining(now: number): number {
    this.refill(now);
    return Math.floor(this.tokens);
  }

  /** Seconds until a token is there (0 when one is), rounded up: Retry-After. */
  retryAfterS(now: number): number {
    this.refill(now);
    return this.tokens >= 1 ? 0 : Math.max(1, Math.ceil(((1 - this.tokens) * 60_000) / this.perMin / 1000));
  }

  /** Seconds until the bucket is full again, rounded up: the RateLimit field's `t` when tokens are left. */
  fullInS(now: number): number {
    this.refill(now);
    return Math.ceil(((this.burst - this.tokens) * 60_000) / this.perMin / 1000);
  }
}
