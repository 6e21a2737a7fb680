import { targetKey, type AlgorithmErrorInfo, type ContentType, type Job, type Outcome, type RunnerKind, type RunTarget } from '../runtime/contract.ts';
import { MAX_WEIGHT } from '../fairQueue.ts';
import { parseTraceparent } from '../tracing.ts';

/**
 * The messages API nodes and worker nodes exchange over NATS (docs/cluster.md). Each is one
 * NATS message: a 4-byte big-endian length, that many bytes of a JSON header, then the body as
 * it is (an input, a result, an SDK request's body: bytes never inflated by base64). A body
 * that would make the message bigger than the NATS server allows stays with its sender, and the
 * header names it (`ref`, a BodyRef) for the receiver to fetch in parts (wire.ts). Every header
 * names the protocol version `v`; a node ignores (and logs) a message it cannot read, never
 * crashes on one. On the bus, every message is sealed with the cluster's key (seal.ts).
 *
 * What a message says is never more than it must: a job names its build, and the worker
 * derives the key its warm workers are kept under from that (targetKey), never from the job.
 */

export const PROTOCOL_VERSION = 1;
/** Subject of jobs for any worker node; workers subscribe in one queue group, so one takes each. */
export const RUN_SUBJECT = 'algohost.v1.run';
export const WORKERS_QUEUE = 'algohost-workers';
/** A worker node's own subjects: `${WORKER_PREFIX}.<node>.run` takes jobs routed to it (warm routing). */
export const WORKER_PREFIX = 'algohost.v1.worker';
/** An API node's subject for its calls' SDK requests and `taken` notices: `${HOST_PREFIX}.<node>`. */
export const HOST_PREFIX = 'algohost.v1.host';
/** A node's subject for the parts of bodies too big for one message: `${PARTS_PREFIX}.<node>`. */
export const PARTS_PREFIX = 'algohost.v1.parts';
/**
 * Where every node says, once a second, that it is alive and what it holds: `${BEAT_PREFIX}.<node>`,
 * its own subject, so NATS permissions can let a node beat as itself only.
 */
export const BEAT_PREFIX = 'algohost.v1.beat';
export const beatSubject = (node: string): string => `${BEAT_PREFIX}.${node}`;
/** Every node's beats, for those that listen to them. */
export const BEATS = `${BEAT_PREFIX}.*`;

/** A subject a node may be told to send to: tokens of letters, digits, `-` and `_`. */
const SUBJECT = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

/** A message a node could not read: it is dropped and logged, never answered with a crash. */
export class MessageError extends Error {}

/** A message as read: its header, and its body (fetched from its parts if it had a `ref`). */
export interface Message {
  header: Record<string, unknown>;
  body: Buffer;
}

/**
 * A body too big for one NATS message, left with the node that has it: the receiver asks
 * `subject` for parts 0..parts-1 of `id` (parts.ts) and gets `size` bytes in all.
 */
export interface BodyRef {
  subject: string;
  id: string;
  size: number;
  parts: number;
}

export interface RunRequest {
  type: 'run';
  /** The call, as the API node knows it (its SDK requests and `taken` notice name it). */
  call: string;
  /** The API node's subject: the worker tells it that it took the call, and sends SDK requests there. */
  api: string;
  /** Whether the call has a host (answers SDK requests). */
  sdk: boolean;
  job: Job;
}

/** Why a worker could not run a job at all (the Executor errors of contract.ts, by name). */
export type RunRefusal = 'busy_queue_full' | 'busy_caller_queue_full' | 'busy_queue_timeout' | 'start_failed' | 'build_missing' | 'draining' | 'internal';
const REFUSALS = new Set<string>(['busy_queue_full', 'busy_caller_queue_full', 'busy_queue_timeout', 'start_failed', 'build_missing', 'draining', 'internal']);

export type RunReply = { type: 'outcome'; outcome: Outcome } | { type: 'refused'; reason: RunRefusal; message: string };

/** Who answers a job: the call it answers, and the worker node that ran it (checked by the API node). */
export interface ReplyFrom {
  call: string;
  worker: string;
}

export interface HostRequest {
  type: 'host';
  call: string;
  /** The worker node running the call: the API node answers only that one. */
  worker: string;
  header: Record<string, unknown>;
  body: Buffer;
}

export interface HostReply {
  type: 'host_answer';
  header: Record<string, unknown>;
  body: Buffer;
}

/** A worker took a call: the API node watches that worker's beats until the call ends. */
export interface Taken {
  type: 'taken';
  call: string;
  worker: string;
}

/** Once a second from every node (and at once when it starts or begins to drain). */
export interface Beat {
  type: 'beat';
  node: string;
  /**
   * Random at each start of the node's process: a node that comes back under the same name is
   * not the one that held its calls (those are lost), and two processes given one name are told.
   */
  instance: string;
  role: 'api' | 'worker';
  host: string;
  /** Calls it is running (a worker) or has out on workers (an API node). */
  running: number;
  /** Calls a worker could start now without waiting. */
  free: number;
  /** Per version key (RunTarget.key), the idle warm workers a worker holds. */
  warm: Record<string, number>;
  /** Taking no new jobs: finishing the ones it has before it stops. */
  draining: boolean;
}

/**
 * Header bytes a message may carry: an outcome's holds its stdout (1 MiB by default, more once
 * JSON-escaped); this bounds a bad one.
 */
const MAX_HEADER = 16 * 1024 * 1024;

/** A message's bytes: a 4-byte length, the JSON header (with `v`), the body. */
export function frame(header: Record<string, unknown>, body: Uint8Array = new Uint8Array(0)): Buffer {
  const json = Buffer.from(JSON.stringify({ v: PROTOCOL_VERSION, ...header }));
  const out = Buffer.allocUnsafe(4 + json.length + body.length);
  out.writeUInt32BE(json.length, 0);
  json.copy(out, 4);
  out.set(body, 4 + json.length);
  return out;
}

/** Header and body of a message's bytes; a body left behind is named by the header's `ref` (readRef). */
export function unframe(data: Uint8Array): Message {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (buf.length < 4) throw new MessageError(`a message of ${buf.length} bytes has no header`);
  const length = buf.readUInt32BE(0);
  if (length > MAX_HEADER || 4 + length > buf.length) throw new MessageError(`a message announces a ${length}-byte header in ${buf.length} bytes`);
  let header: unknown;
  try {
    header = JSON.parse(buf.subarray(4, 4 + length).toString('utf8'));
  } catch {
    throw new MessageError('a message header is not JSON');
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) throw new MessageError('a message header is not an object');
  const h = header as Record<string, unknown>;
  if (h.v !== PROTOCOL_VERSION) throw new MessageError(`a message speaks protocol version ${JSON.stringify(h.v)}, this node ${PROTOCOL_VERSION}`);
  return { header: h, body: buf.subarray(4 + length) };
}

/** The header's `ref`, if its body was left behind in parts. */
export function readRef(header: Record<string, unknown>): BodyRef | undefined {
  if (header.ref === undefined) return undefined;
  const r = obj(header, 'ref');
  const ref = { subject: str(r, 'subject'), id: str(r, 'id'), size: num(r, 'size'), parts: num(r, 'parts') };
  if (!ref.subject.startsWith(`${PARTS_PREFIX}.`) || !SUBJECT.test(ref.subject)) throw new MessageError('a body reference names a subject that is not a parts subject');
  if (!Number.isInteger(ref.size) || ref.size < 0 || !Number.isInteger(ref.parts) || ref.parts < 1 || ref.parts > ref.size + 1) {
    throw new MessageError('a body reference has an impossible size or part count');
  }
  return ref;
}

const CONTENT_TYPES = new Set(['json', 'text', 'binary']);
const RUNNERS = new Set(['node', 'python']);

function str(h: Record<string, unknown>, key: string): string {
  const v = h[key];
  if (typeof v !== 'string') throw new MessageError(`field ${key} is not a string`);
  return v;
}

function num(h: Record<string, unknown>, key: string): number {
  const v = h[key];
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new MessageError(`field ${key} is not a number`);
  return v;
}

function obj(h: Record<string, unknown>, key: string): Record<string, unknown> {
  const v = h[key];
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new MessageError(`field ${key} is not an object`);
  return v as Record<string, unknown>;
}

export function encodeRunRequest(r: RunRequest): Message {
  const { input, target, ...job } = r.job;
  const { key: _derived, ...named } = target;
  return { header: { type: 'run', call: r.call, api: r.api, sdk: r.sdk, job: { ...job, target: named } }, body: input };
}

/** A job's or a warm request's target, checked; its key is made here, never taken from the sender. */
function decodeTarget(t: Record<string, unknown>): RunTarget {
  const build = obj(t, 'build');
  const runner = str(t, 'runner');
  if (!RUNNERS.has(runner)) throw new MessageError(`runner ${JSON.stringify(runner)} is unknown`);
  const hash = str(build, 'hash');
  if (!/^[0-9a-f]{8,128}$/.test(hash)) throw new MessageError('the build hash is not hexadecimal');
  const algorithmId = num(build, 'algorithmId');
  if (!Number.isSafeInteger(algorithmId) || algorithmId < 1) throw new MessageError('the build names no algorithm id');
  const ref = { algorithmId, hash };
  const network = t.network === true;
  return { build: ref, key: targetKey(ref, network), runner: runner as RunnerKind, entry: str(t, 'entry'), network };
}

export function decodeRunRequest({ header, body }: Message): RunRequest {
  if (header.type !== 'run') throw new MessageError(`expected a run request, got ${JSON.stringify(header.type)}`);
  const job = obj(header, 'job');
  const contentType = str(job, 'contentType');
  if (!CONTENT_TYPES.has(contentType)) throw new MessageError(`content type ${JSON.stringify(contentType)} is not one of json, text, binary`);
  const target = decodeTarget(obj(job, 'target'));
  const api = str(header, 'api');
  if (!api.startsWith(`${HOST_PREFIX}.`) || !SUBJECT.test(api)) throw new MessageError('a run request names an API subject that is not one');
  // Whose turn the job waits for on the worker (absent from an API node of an older version: one shared line).
  const caller = job.caller === undefined ? undefined : str(job, 'caller');
  if (caller !== undefined && caller.length > 256) throw new MessageError('the caller is longer than 256 characters');
  // Their share of the worker's turns (docs/limits.md, "Shares"; absent from an API node of an older version, or for a share of 1).
  const weight = job.weight === undefined ? undefined : num(job, 'weight');
  if (weight !== undefined && !(Number.isSafeInteger(weight) && weight >= 1 && weight <= MAX_WEIGHT)) throw new MessageError(`the caller's weight is not a whole number from 1 to ${MAX_WEIGHT}`);
  // The span that sent it (docs/traces.md; absent from an API node of an older version).
  const traceparent = job.traceparent === undefined ? undefined : str(job, 'traceparent');
  if (traceparent !== undefined && parseTraceparent(traceparent) === undefined) throw new MessageError('the traceparent is not a W3C traceparent');
  return {
    type: 'run',
    call: str(header, 'call'),
    api,
    sdk: header.sdk === true,
    job: { target, contentType: contentType as ContentType, input: body, timeoutMs: num(job, 'timeoutMs'), nesting: num(job, 'nesting'), ...(caller === undefined ? {} : { caller }), ...(weight === undefined ? {} : { weight }), ...(traceparent === undefined ? {} : { traceparent }) },
  };
}

export function encodeRunReply(r: RunReply, from: ReplyFrom): Message {
  if (r.type === 'refused') return { header: { type: 'refused', ...from, reason: r.reason, message: r.message }, body: EMPTY };
  if (r.outcome.kind === 'result') {
    const { body, ...outcome } = r.outcome;
    return { header: { type: 'outcome', ...from, outcome }, body };
  }
  return { header: { type: 'outcome', ...from, outcome: r.outcome }, body: EMPTY };
}

/** Who says they answered a job (a reply's `call` and `worker`). */
export function replyFrom({ header }: Message): ReplyFrom {
  return { call: str(header, 'call'), worker: str(header, 'worker') };
}

const OUTCOME_KINDS = new Set(['result', 'algorithm_error', 'timeout', 'out_of_memory', 'crashed']);

export function decodeRunReply({ header, body }: Message): RunReply {
  if (header.type === 'refused') {
    const reason = str(header, 'reason');
    return { type: 'refused', reason: (REFUSALS.has(reason) ? reason : 'internal') as RunRefusal, message: str(header, 'message') };
  }
  if (header.type !== 'outcome') throw new MessageError(`expected an outcome, got ${JSON.stringify(header.type)}`);
  const o = obj(header, 'outcome');
  const kind = str(o, 'kind');
  if (!OUTCOME_KINDS.has(kind)) throw new MessageError(`outcome ${JSON.stringify(kind)} is unknown`);
  const output = { stdout: str(o, 'stdout'), stdoutTruncated: o.stdoutTruncated === true, durationMs: num(o, 'durationMs'), ...(o.coldStart === true ? { coldStart: true } : {}) };
  switch (kind) {
    case 'result': {
      const contentType = str(o, 'contentType');
      if (!CONTENT_TYPES.has(contentType) && contentType !== 'void') throw new MessageError(`result type ${JSON.stringify(contentType)} is unknown`);
      return { type: 'outcome', outcome: { kind: 'result', contentType: contentType as ContentType | 'void', body, ...output } };
    }
    case 'algorithm_error': {
      const e = obj(o, 'error');
      const error: AlgorithmErrorInfo = { message: str(e, 'message'), stacktrace: str(e, 'stacktrace'), error_type: str(e, 'error_type') };
      return { type: 'outcome', outcome: { kind: 'algorithm_error', error, ...output } };
    }
    case 'crashed':
      return {
        type: 'outcome',
        outcome: { kind: 'crashed', exitCode: typeof o.exitCode === 'number' ? o.exitCode : null, signal: typeof o.signal === 'string' ? o.signal : null, ...output },
      };
    default:
      return { type: 'outcome', outcome: { kind: kind as 'timeout' | 'out_of_memory', ...output } };
  }
}

export function encodeHostRequest(r: HostRequest): Message {
  return { header: { type: 'host', call: r.call, worker: r.worker, header: r.header }, body: r.body };
}

export function decodeHostRequest({ header, body }: Message): HostRequest {
  if (header.type !== 'host') throw new MessageError(`expected an SDK request, got ${JSON.stringify(header.type)}`);
  return { type: 'host', call: str(header, 'call'), worker: str(header, 'worker'), header: obj(header, 'header'), body };
}

export function encodeHostReply(r: HostReply): Message {
  return { header: { type: 'host_answer', header: r.header }, body: r.body };
}

export function decodeHostReply({ header, body }: Message): HostReply {
  if (header.type !== 'host_answer') throw new MessageError(`expected an SDK answer, got ${JSON.stringify(header.type)}`);
  return { type: 'host_answer', header: obj(header, 'header'), body };
}

/**
 * A warm request (API node → the worker node warm for `after`, on its own run subject; no
 * answer): start a worker for `target`, a version just published after the version whose key is
 * `after`, if there is room (Executor.warm; docs/limits.md, "Cold starts").
 */
export interface WarmRequest {
  type: 'warm';
  target: RunTarget;
  after: string;
}

export function encodeWarmRequest(w: WarmRequest): Uint8Array {
  const { key: _derived, ...named } = w.target;
  return frame({ type: 'warm', target: named, after: w.after });
}

export function decodeWarmRequest({ header }: Message): WarmRequest {
  if (header.type !== 'warm') throw new MessageError(`expected a warm request, got ${JSON.stringify(header.type)}`);
  const after = str(header, 'after');
  if (after.length > 256) throw new MessageError('the version a warm request follows is longer than 256 characters');
  return { type: 'warm', target: decodeTarget(obj(header, 'target')), after };
}

export function encodeTaken(t: Taken): Uint8Array {
  return frame({ type: 'taken', call: t.call, worker: t.worker });
}

export function decodeTaken({ header }: Message): Taken {
  return { type: 'taken', call: str(header, 'call'), worker: str(header, 'worker') };
}

export function encodeBeat(b: Beat): Uint8Array {
  return frame({ ...b });
}

export function decodeBeat(data: Uint8Array): Beat {
  const { header } = unframe(data);
  if (header.type !== 'beat') throw new MessageError(`expected a beat, got ${JSON.stringify(header.type)}`);
  const role = str(header, 'role');
  if (role !== 'api' && role !== 'worker') throw new MessageError(`role ${JSON.stringify(role)} is unknown`);
  const warm: Record<string, number> = {};
  for (const [k, v] of Object.entries(obj(header, 'warm'))) if (typeof v === 'number' && v > 0) warm[k] = v;
  return {
    type: 'beat',
    node: str(header, 'node'),
    instance: str(header, 'instance'),
    role,
    host: str(header, 'host'),
    running: num(header, 'running'),
    free: num(header, 'free'),
    warm,
    draining: header.draining === true,
  };
}

const EMPTY = Buffer.alloc(0);
