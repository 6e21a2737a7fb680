/** What the cluster's parts log (pino's logger has this shape). */
export interface ClusterLog {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
  debug?(obj: object, msg: string): void;
  /** A logger whose lines carry `bindings` too (a job's trace, docs/traces.md). */
  child?(bindings: Record<string, string>): ClusterLog;
}
