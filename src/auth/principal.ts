import type { KeyPermissions } from './permissions.ts';
import type { LimitSettings } from '../limits/limits.ts';
import { traceparentOf, type TraceContext } from '../tracing.ts';

/** Who is making a request, as established by authentication. */
export interface Principal {
  userId: number;
  username: string;
  keyId: string;
  permissions: KeyPermissions;
  /**
   * The algorithm on whose behalf a request is made, when it comes from inside a running
   * algorithm (set by the runtime, never by a client). Data ACLs take it into account.
   */
  algorithm?: { owner: string; name: string };
  /**
   * Set while a trigger's run acts (src/events/triggers.ts), and carried into the requests its
   * algorithm makes: the events its writes raise say so (`data.trigger`), which is how a
   * trigger's own writes never fire it again and chains stop at a depth.
   */
  origin?: TriggerOrigin;
  /** The user's own call limits (user_limits; docs/limits.md), read with the key; absent: the operator's defaults. */
  limits?: LimitSettings | null;
  /**
   * The W3C traceparent of the span acting (the request's, a trigger run's; docs/traces.md):
   * the events its changes raise store it, so their deliveries and trigger runs continue its
   * trace. Set on a copy made for the one request (app.ts): a principal as authentication
   * answers it is cached and shared between requests, and has none.
   */
  traceparent?: string;
}

/**
 * `principal` acting in `span` (a request's, requestSpan): a copy carrying its traceparent, for
 * the events of its changes (the principal authentication answers is cached and shared between
 * requests); `principal` itself without a span.
 */
export function tracedPrincipal(principal: Principal, span: TraceContext | undefined): Principal {
  return span === undefined ? principal : { ...principal, traceparent: traceparentOf(span) };
}

/** The trigger run a request is made for. */
export interface TriggerOrigin {
  /** The trigger (`trg_…`). */
  trigger: string;
  /** The run (`run_…`). */
  run: string;
  /** 1 for a run fired by an event no trigger made. */
  depth: number;
  /** The triggers whose runs led here, in order, this one last. */
  chain: string[];
  /**
   * The event that began the chain (one no trigger's run made): every run it causes, at every
   * depth, counts against its budget (ALGOHOST_TRIGGER_RUNS_PER_EVENT). Absent in events made
   * before budgets.
   */
  root?: string;
}
