/** What the cluster's parts log (pino's logger has this shape). */
export interface ClusterLog {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
  debug?(obj: object, msg: string): void;
}
