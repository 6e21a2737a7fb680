/**
 * Where a call logs what went wrong outside the algorithm (a request's logger). Its own module:
 * the call service and the usage recorder below it both take one.
 */
export interface CallLog {
  warn(obj: object, msg: string): void;
}
