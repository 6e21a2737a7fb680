import { AppError } from '../errors.ts';

// What the limiter (limits.ts), the shared buckets (shared.ts) and the owners' caps
// (algorithmSlots.ts) share, below all three: limits.ts re-exports it.

/** Limits in force for one scope; 0 is none. */
export interface CallLimits {
  callsPerMin: number;
  /** Calls that may come at once after a quiet spell: the bucket's size. */
  burst: number;
  concurrency: number;
}

/** Which limit a call ran into. */
export type LimitCode = 'rate_limited' | 'concurrency_limited' | 'compute_quota_exceeded';

/**
 * A call refused by a limit: 429 with the limit's name, Retry-After, and the RateLimit-Policy
 * and RateLimit fields of draft-ietf-httpapi-ratelimit-headers (a policy `calls`: q calls per
 * w = 60 s; r left, t seconds until more).
 */
export class LimitError extends AppError {
  constructor(code: LimitCode, message: string, headers: [string, string][], extra: Record<string, unknown>) {
    super(code, message, extra);
    this.headers = headers;
  }
}
