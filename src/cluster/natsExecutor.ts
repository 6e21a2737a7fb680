import crypto from 'node:crypto';
import os from 'node:os';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { AppError, type ErrorCode } from '../errors.ts';
import { errorDocument } from '../http/answers.ts';
import {
  BuildMissingError,
  ExecutorBusyError,
  WorkerLostError,
  WorkerStartError,
  type Executor,
  type HostAnswer,
  type HostHandler,
  type Job,
  type Outcome,
  type RunTarget,
} from '../runtime/contract.ts';
import {
  BEAT_PREFIX,
  BEATS,
  beatSubject,
  decodeBeat,
  decodeHostRequest,
  decodeRunReply,
  decodeTaken,
  encodeBeat,
  encodeHostReply,
  encodeRunRequest,
  encodeWarmRequest,
  HOST_PREFIX,
  MessageError,
  replyFrom,
  RUN_SUBJECT,
  unframe,
  WORKER_PREFIX,
  type Beat,
  type Message,
  type RunReply,
} from './messages.ts';
import { Wire } from './wire.ts';
import type { ClusterKey } from './seal.ts';
import { inboxPrefix } from './nats.ts';
import { MAX_SDK_BODY } from '../algorithms/hostRequests.ts';
import type { ClusterLog } from './log.ts';

/** How long past a job's own time an API node waits for its worker's answer. */
const REPLY_GRACE_MS = 5_000;
/** How often nodes beat, and how long a worker may stay silent before its calls are failed as lost. */
export const BEAT_MS = 1_000;
export const LOST_AFTER_MS = 3_500;
/** How long a result too big for one message is kept for its API node to fetch. */
export const BODY_TTL_MS = 60_000;

interface Pending {
  host: HostHandler | undefined;
  /** When the API node stops waiting for the call (its SDK requests' bodies are fetched until then). */
  deadline: number;
  /** The worker node that took it (from its `taken` notice, or the one it was routed to). */
  worker: string | undefined;
  /** The process beating under that name when the call went to it (WorkerView.instance), if known. */
  instance: string | undefined;
  lost: (err: WorkerLostError) => void;
  /** The attempt waiting for its answer on this node's reply subject (ask). */
  answer?: { resolve: (m: Message) => void; reject: (err: Error) => void } | undefined;
}

/** The NATS server's answer to a request nobody is subscribed to (a status message, code 503). */
class NoRespondersError extends Error {
  override name = 'NoRespondersError';
}

/** What an API node knows of a worker node, from its beats and from its own calls since. */
interface WorkerView {
  /** The process beating under the worker's name (Beat.instance); undefined until its first beat. */
  instance: string | undefined;
  /** When each process that beat under the name last did: a call is lost with the process it went to. */
  instances: Map<string, number>;
  seen: number;
  free: number;
  /** Idle workers per version key, counted down and up by this node between beats (route, giveBack, warm). */
  warm: Record<string, number>;
  /** The same as the last beat said, untouched: what warmKeys reports. */
  reported: Record<string, number>;
  draining: boolean;
}

/** Whether a worker node takes work now: heard from within LOST_AFTER_MS, and not draining. */
function takesWork(w: WorkerView, now: number): boolean {
  return !w.draining && now - w.seen <= LOST_AFTER_MS;
}

/**
 * The executor of an API node (`serve --role api`): each job goes over NATS to one worker node,
 * and the call's SDK requests come back to this node on a subject of its own, where they are
 * answered with the call's identity by the same handler a local call uses. A worker never holds
 * a credential of the caller's (docs/cluster.md).
 *
 * Routing: worker nodes beat once a second with their free slots and warm versions. A job goes
 * to a worker warm for its version with an idle worker, else to the worker with the most free
 * slots, else (all busy, or nothing heard yet) to the workers' queue group, where any worker
 * takes it and queues it locally. Between beats, the node counts down what it sent.
 *
 * Loss: a worker that took a call and then stays silent past LOST_AFTER_MS fails that call with
 * WorkerLostError; nothing else waits on it.
 *
 * Trust (docs/security.md): every message is sealed with the cluster's key (Wire, seal.ts), and
 * bound to its call: an answer counts only from the worker node the call went to (or that said
 * it took it), and an SDK request is answered only while its call runs, only for the worker
 * running it. Anything else is dropped and logged.
 */
export class NatsExecutor implements Executor {
  private readonly instance = crypto.randomBytes(8).toString('hex');
  private readonly apiSubject: string;
  /** Where workers' answers come: `${replies}.<call>`, one subscription for all (see ask). */
  private readonly replies: string;
  private readonly ids = new RandomIds();
  private readonly calls = new Map<string, Pending>();
  private readonly workers = new Map<string, WorkerView>();
  private readonly subscriptions: Subscription[];
  private readonly wire: Wire;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly nc: NatsConnection,
    private readonly log: ClusterLog,
    key: ClusterKey,
    /** This node's name on the bus (nats.ts nodeNameOf); its connection's inbox prefix must be inboxPrefix('api', node). */
    readonly node: string,
  ) {
    this.apiSubject = `${HOST_PREFIX}.${node}`;
    this.replies = `${HOST_PREFIX}.${node}.reply`;
    this.wire = new Wire(nc, node, log, key, 'api');
    this.subscriptions = [
      nc.subscribe(this.apiSubject, { callback: (err, msg) => (err ? log.warn({ err }, 'SDK request subscription failed') : void this.onApiMessage(msg)) }),
      nc.subscribe(BEATS, { callback: (err, msg) => (err ? log.warn({ err }, 'beat subscription failed') : this.onBeat(msg)) }),
      nc.subscribe(`${this.replies}.*`, { callback: (err, msg) => (err ? log.warn({ err }, 'reply subscription failed') : this.onReply(msg)) }),
    ];
    this.timer = setInterval(() => this.tick(), BEAT_MS / 2);
    this.timer.unref();
    this.beat();
    void this.watchConnection();
  }

  /** Whether the connection to NATS is up: while it is not, calls are refused at once. */
  private connected = true;

  /**
   * When this node loses NATS (its server restarted, the network cut), the answers of the calls
   * it has out may be lost with it: they fail now (WorkerLostError; async ones run again) rather
   * than wait out their time. New calls are refused with 503 until it is back.
   */
  private async watchConnection(): Promise<void> {
    for await (const s of this.nc.status()) {
      if (s.type === 'disconnect') {
        this.connected = false;
        for (const p of this.calls.values()) p.lost(new WorkerLostError('this API node lost its connection to NATS while the call ran'));
      } else if (s.type === 'reconnect') {
        this.connected = true;
      }
    }
  }

  async run(job: Job, host?: HostHandler): Promise<Outcome> {
    if (!this.connected) throw new AppError('server_busy', 'this node is reconnecting to the message bus (NATS); retry shortly');
    // Unguessable: an SDK request naming it acts as the call's caller.
    const call = this.ids.next();
    const deadline = Date.now() + job.timeoutMs + REPLY_GRACE_MS;
    const { data, ref } = this.wire.pack(encodeRunRequest({ type: 'run', call, api: this.apiSubject, sdk: host !== undefined, job }), job.timeoutMs + REPLY_GRACE_MS);
    const routed = this.route(job.target.key);
    const pending: Pending = { host, deadline, worker: routed, instance: routed === undefined ? undefined : this.workers.get(routed)?.instance, lost: () => undefined };
    const lost = new Promise<never>((_, reject) => (pending.lost = reject));
    lost.catch(() => undefined);
    this.calls.set(call, pending);
    let reply: RunReply;
    try {
      for (let attempt = 0; ; attempt++) {
        const subject = pending.worker ? `${WORKER_PREFIX}.${pending.worker}.run` : RUN_SUBJECT;
        let answer: Message;
        try {
          answer = await Promise.race([this.ask(subject, data, call, pending), lost]);
        } catch (err) {
          if (!pending.worker || !(err instanceof NoRespondersError) || attempt > 0) throw err;
          // The worker it was routed to is gone: any other may take it.
          this.workers.delete(pending.worker);
          pending.worker = undefined;
          pending.instance = undefined;
          continue;
        }
        const opened = this.wire.read(answer, deadline);
        reply = decodeRunReply(opened instanceof Promise ? await Promise.race([opened, lost]) : opened);
        // A worker that began to stop before it started the job: another may take it.
        if (reply.type === 'refused' && reply.reason === 'draining' && attempt === 0) {
          const w = pending.worker ? this.workers.get(pending.worker) : undefined;
          if (w) w.draining = true;
          pending.worker = undefined;
          pending.instance = undefined;
          continue;
        }
        break;
      }
    } catch (err) {
      if (err instanceof WorkerLostError) throw err;
      if (err instanceof NoRespondersError) throw new ExecutorBusyError('no_workers');
      if (err instanceof MessageError) throw new AppError('internal_error', 'a worker node answered with a message this node cannot read', undefined, err);
      if (pending.worker && this.silent(pending.worker)) throw new WorkerLostError(`worker node ${pending.worker} went silent`);
      throw new AppError('server_busy', `no answer from a worker node (${(err as Error).message}); retry shortly`, undefined, err);
    } finally {
      this.calls.delete(call);
      this.wire.withdraw(ref);
    }
    if (routed !== undefined && routed === pending.worker) this.giveBack(routed, job.target.key);
    if (reply.type === 'outcome') return reply.outcome;
    switch (reply.reason) {
      case 'busy_queue_full':
        throw new ExecutorBusyError('queue_full');
      case 'busy_caller_queue_full':
        throw new ExecutorBusyError('caller_queue_full');
      case 'busy_queue_timeout':
        throw new ExecutorBusyError('queue_timeout');
      case 'draining':
        throw new AppError('server_busy', 'the worker node was stopping; retry shortly');
      case 'start_failed':
        throw new WorkerStartError(reply.message);
      case 'build_missing':
        throw new BuildMissingError(job.target.build);
      default:
        throw new AppError('internal_error', `a worker node could not run the call: ${reply.message}`);
    }
  }

  /**
   * Sends a job and resolves with its answer. Request-reply by hand rather than nc.request: one
   * subscription for every call's answers, no timer per call (tick fails a call past its
   * deadline) and no Error objects made per call for traces (the client's request made three,
   * half of this node's CPU per warm call; docs/performance.md).
   */
  private ask(subject: string, data: Uint8Array, call: string, pending: Pending): Promise<Message> {
    return new Promise<Message>((resolve, reject) => {
      pending.answer = { resolve, reject };
      try {
        this.wire.send(subject, data, `${this.replies}.${call}`);
      } catch (err) {
        pending.answer = undefined;
        reject(err as Error);
      }
    });
  }

  private onReply(msg: Msg): void {
    const pending = this.calls.get(msg.subject.slice(this.replies.length + 1));
    const answer = pending?.answer;
    // The call ended already (it timed out, its worker was lost): nothing waits for this.
    if (!answer) return;
    // The NATS server's own word that nobody took the job (a status, not a node's message).
    if (msg.data.length === 0 && msg.headers?.code === 503) {
      pending.answer = undefined;
      answer.reject(new NoRespondersError(`no subscriber for the job`));
      return;
    }
    const call = msg.subject.slice(this.replies.length + 1);
    let m: Message;
    try {
      m = unframe(this.wire.unseal(msg, true));
      // Bound to its call, and to the worker the call went to (or that took it from the queue).
      const from = replyFrom(m);
      if (from.call !== call || (pending.worker !== undefined && from.worker !== pending.worker)) {
        throw new MessageError(`an answer for call ${from.call} from worker node ${from.worker} came for call ${call}, which ${pending.worker ? `worker node ${pending.worker} runs` : 'went to the queue'}`);
      }
    } catch (err) {
      // Not this call's worker's answer: the call still waits for that one.
      this.log.warn({ err, subject: msg.subject }, 'dropped an answer that is not its call\'s (a forged, replayed or misdirected message on the bus)');
      return;
    }
    pending.answer = undefined;
    answer.resolve(m);
  }

  /** Idle workers per version key across the live worker nodes, as their last beats said (tests; WorkerPool.load's `warm` of each). */
  warmKeys(): Record<string, number> {
    const all: Record<string, number> = {};
    const now = Date.now();
    for (const w of this.workers.values()) {
      if (now - w.seen > LOST_AFTER_MS) continue;
      for (const [key, n] of Object.entries(w.reported)) all[key] = (all[key] ?? 0) + n;
    }
    return all;
  }

  /**
   * A version just published (Executor.warm): every live worker node is asked to start a worker
   * for it, and each does where its own pool has a worker of the version it follows (idle or
   * busy) and room (WorkerPool.prewarm), as one server does. The worker node decides, not this
   * node: a beat is up to a second old, and one sent just before a call ended says nothing of the
   * worker that call leaves idle. No answer is waited for.
   */
  warm(target: RunTarget, after: string): void {
    if (!this.connected) return;
    const now = Date.now();
    for (const [id, w] of this.workers) {
      if (!takesWork(w, now)) continue;
      try {
        this.wire.send(`${WORKER_PREFIX}.${id}.run`, encodeWarmRequest({ type: 'warm', target, after }));
      } catch (err) {
        this.log.warn({ err, worker: id }, 'could not ask a worker node to warm a version just published');
        continue;
      }
      // Where its last beat said it had `after` idle, the new version's first calls go there
      // (route) before its next beat says whether it did.
      if ((w.warm[after] ?? 0) > 0) w.warm[target.key] = Math.max(1, w.warm[target.key] ?? 0);
    }
  }

  /**
   * The worker to send a job for `key` to, or undefined for the queue group: one warm for the
   * version with an idle worker, else the one with the most free slots.
   */
  private route(key: string): string | undefined {
    let warm: [string, WorkerView] | undefined;
    let roomy: [string, WorkerView] | undefined;
    const now = Date.now();
    for (const entry of this.workers) {
      const [, w] = entry;
      if (!takesWork(w, now) || w.free <= 0) continue;
      if ((w.warm[key] ?? 0) > 0 && (!warm || w.warm[key]! > warm[1].warm[key]!)) warm = entry;
      if (!roomy || w.free > roomy[1].free) roomy = entry;
    }
    const chosen = warm ?? roomy;
    if (!chosen) return undefined;
    const [id, w] = chosen;
    w.free--;
    if (warm) w.warm[key]!--;
    return id;
  }

  /**
   * A call routed to `worker` has ended: its slot is free again and its sandbox idle and warm
   * for `key` (until the next beat says how things stand). So calls one after another go to the
   * same warm worker, which stays warm, rather than round the cluster.
   */
  private giveBack(worker: string, key: string): void {
    const w = this.workers.get(worker);
    if (!w) return;
    w.free++;
    w.warm[key] = (w.warm[key] ?? 0) + 1;
  }

  /** Whether process `instance` of `worker` has been silent past LOST_AFTER_MS (another may beat under the name). */
  private gone(worker: string, instance: string): boolean {
    const seen = this.workers.get(worker)?.instances.get(instance);
    return seen !== undefined && Date.now() - seen > LOST_AFTER_MS;
  }

  private silent(worker: string): boolean {
    const w = this.workers.get(worker);
    return w === undefined || Date.now() - w.seen > LOST_AFTER_MS;
  }

  /** Beats, and fails the calls whose worker went silent. */
  private tick(): void {
    this.beat();
    const now = Date.now();
    for (const p of this.calls.values()) {
      if (p.worker && this.silent(p.worker)) p.lost(new WorkerLostError(`worker node ${p.worker} has not been heard from for ${LOST_AFTER_MS / 1000} s`));
      else if (p.worker && p.instance && this.gone(p.worker, p.instance)) {
        p.lost(new WorkerLostError(`worker node ${p.worker} started again while it ran the call (its process ${p.instance} has not been heard from for ${LOST_AFTER_MS / 1000} s)`));
      }
      else if (p.answer && now > p.deadline) {
        p.answer.reject(new Error('timed out waiting for its answer'));
        p.answer = undefined;
      }
    }
    const cutoff = Date.now() - 10 * LOST_AFTER_MS;
    for (const [id, w] of this.workers) if (w.seen < cutoff) this.workers.delete(id);
  }

  private beat(): void {
    const b: Beat = { type: 'beat', node: this.node, instance: this.instance, role: 'api', host: os.hostname(), running: this.calls.size, free: 0, warm: {}, draining: false };
    try {
      this.wire.send(beatSubject(this.node), encodeBeat(b));
    } catch {
      // Closed or reconnecting: the next beat goes out once it is back.
    }
  }

  private onBeat(msg: Msg): void {
    let b: Beat;
    try {
      b = decodeBeat(this.wire.unseal(msg));
      // A node beats as itself, on its own subject (which its NATS user alone may publish on).
      if (msg.subject !== `${BEAT_PREFIX}.${b.node}`) throw new MessageError(`a beat for node ${b.node} came on ${msg.subject}`);
    } catch (err) {
      this.log.warn({ err }, 'dropped a beat that is not one (a malformed, forged or replayed message on the bus)');
      return;
    }
    if (b.role !== 'worker') return;
    const now = Date.now();
    const known = this.workers.get(b.node);
    const instances = known?.instances ?? new Map<string, number>();
    // A process that beat before, after another took the name over: two processes share it.
    if (known?.instance !== undefined && known.instance !== b.instance && instances.has(b.instance) && now - this.namesakeLogged > 60_000) {
      this.namesakeLogged = now;
      this.log.error({ node: b.node }, `two worker node processes beat under the name ${b.node} (on ${b.host} and another): give each its own ALGOHOST_NODE_NAME`);
    }
    instances.set(b.instance, now);
    // A restarted node's old process is remembered until its calls could be failed as lost.
    for (const [i, at] of instances) if (now - at > 10 * LOST_AFTER_MS) instances.delete(i);
    this.workers.set(b.node, { instance: b.instance, instances, seen: now, free: b.free, warm: { ...b.warm }, reported: b.warm, draining: b.draining });
  }

  private namesakeLogged = 0;

  /** A `taken` notice, or an SDK request of one of this node's calls from the worker running it. */
  private async onApiMessage(msg: Msg): Promise<void> {
    let data: Buffer;
    try {
      data = this.wire.unseal(msg, true);
    } catch (err) {
      // Not from a node of this cluster: dropped unanswered (an answer would only tell its sender what is here).
      this.log.warn({ err, subject: msg.subject }, 'dropped an SDK request or notice that is not sealed by this cluster (a forged or replayed message on the bus)');
      return;
    }
    let request;
    try {
      const m = unframe(data);
      if (m.header.type === 'taken') {
        const t = decodeTaken(m);
        const p = this.calls.get(t.call);
        // Only a call sent to the queue, and only once: a call routed to one worker stays with it.
        if (p && p.worker === undefined) {
          p.worker = t.worker;
          p.instance = this.workers.get(t.worker)?.instance;
          // Heard from now, if its first beat has not come yet.
          if (!this.workers.has(t.worker)) this.workers.set(t.worker, { instance: undefined, instances: new Map(), seen: Date.now(), free: 0, warm: {}, reported: {}, draining: false });
        }
        return;
      }
      // A body left in parts is fetched for as long as its call may run, and no bigger than the
      // SDK takes (hostRequests.ts refuses bigger ones anyway).
      const call = typeof m.header.call === 'string' ? this.calls.get(m.header.call) : undefined;
      request = decodeHostRequest(await this.wire.read(m, call?.deadline, MAX_SDK_BODY + 1));
    } catch (err) {
      this.log.warn({ err }, 'dropped an SDK request that is not one (a malformed, forged or replayed message on the bus)');
      // Its sender waits for an answer: it gets one now rather than at its call's end.
      this.answer(msg, refusal(400, 'invalid_body', `this API node could not read the SDK request: ${(err as Error).message}`));
      return;
    }
    const pending = this.calls.get(request.call);
    // Only the worker node running the call speaks for it: a request naming a call that node
    // was not given is refused (and logged), whoever sealed it. Its answer must go to that
    // node's own inbox, which, where each worker node has a NATS user of its own, no other node
    // may read: a node that has the cluster's key cannot pass for another (docs/security.md).
    if (pending !== undefined && (pending.worker !== request.worker || !msg.reply?.startsWith(`${inboxPrefix('worker', request.worker)}.`))) {
      this.log.warn({ call: request.call, from: request.worker, runner: pending.worker ?? null, reply: msg.reply ?? null }, 'refused an SDK request from a worker node that does not run its call');
      this.answer(msg, refusal(403, 'forbidden', 'this worker node does not run the call this request names'));
      return;
    }
    const host = pending?.host;
    let answer: HostAnswer;
    try {
      answer = host ? await host(request.header, request.body) : refusal(403, 'forbidden', 'the call this request belongs to has ended');
    } catch (err) {
      this.log.warn({ err }, 'an SDK request from a worker node failed');
      answer = refusal(500, 'internal_error', 'internal error; the server log has the details');
    }
    this.answer(msg, answer);
  }

  private answer(msg: Msg, answer: HostAnswer): void {
    try {
      this.wire.respond(msg, this.wire.pack(encodeHostReply({ type: 'host_answer', header: answer.header, body: answer.body }), BODY_TTL_MS).data);
    } catch (err) {
      this.log.warn({ err }, 'could not answer an SDK request');
    } finally {
      answer.done?.();
    }
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    // Nothing will fail these at their deadline any more (the watchdog is stopped): now, then.
    for (const p of this.calls.values()) p.answer?.reject(new Error('this API node is stopping'));
    for (const s of this.subscriptions) s.unsubscribe();
    this.wire.close();
  }
}

/** Call ids: 16 random bytes each, hex, drawn from a pool filled 256 at a time (one system call, not one per call). */
class RandomIds {
  private pool = Buffer.alloc(0);
  private at = 0;
  next(): string {
    if (this.at + 16 > this.pool.length) {
      this.pool = crypto.randomBytes(16 * 256);
      this.at = 0;
    }
    const id = this.pool.toString('hex', this.at, this.at + 16);
    this.at += 16;
    return id;
  }
}

function refusal(status: number, code: ErrorCode, message: string): HostAnswer {
  return { header: { status, headers: { 'content-type': 'application/json' } }, body: Buffer.from(errorDocument(code, message)) };
}
