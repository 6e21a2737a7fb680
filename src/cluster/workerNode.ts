import crypto from 'node:crypto';
import os from 'node:os';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { BuildMissingError, ExecutorBusyError, targetKey, WorkerStartError, type Executor, type HostHandler } from '../runtime/contract.ts';
import {
  beatSubject,
  decodeHostReply,
  decodeRunRequest,
  decodeWarmRequest,
  encodeBeat,
  encodeHostRequest,
  encodeRunReply,
  encodeTaken,
  RUN_SUBJECT,
  WORKER_PREFIX,
  WORKERS_QUEUE,
  type RunReply,
  type RunRequest,
} from './messages.ts';
import { BEAT_MS, BODY_TTL_MS } from './natsExecutor.ts';
import { Wire } from './wire.ts';
import type { ClusterLog } from './log.ts';
import type { ClusterKey } from './seal.ts';
import { checkSubscriptions } from './nats.ts';
import { parseTraceparent, traceBindings } from '../tracing.ts';

/** How long past a call's deadline its SDK requests wait for the API node's answer (hostFor). */
const HOST_GRACE_MS = 2_000;

/** What a worker node announces of its executor (WorkerPool.load). */
export type LoadReport = () => { warm: Record<string, number>; free: number; running: number };

/**
 * A worker node (`algohost worker`): takes jobs from the bus (the workers' queue group, and its
 * own subject for jobs routed to it because it is warm or has room), runs each on this
 * machine's executor (the local pool of sandboxed workers), and answers with the outcome. A
 * job's SDK requests go back over the bus to the API node that sent it, which answers them as
 * the call's caller; nothing here can act as anyone (docs/cluster.md). It beats once a second
 * with its free slots and warm versions.
 *
 * It runs nothing it is not sure an API node of its cluster sent (docs/security.md): a job must
 * be sealed with the cluster's key, for the subject it came on, within the window, and only
 * once (seal.ts). What it runs is what the job's build is: the key its warm workers are kept
 * under is derived from the build (targetKey), and the network is this node's to give, never
 * the job's: with `allowNetwork` false, no job gets it.
 */
export class WorkerNode {
  /** This process, among any that came before it under its name (Beat.instance). */
  private readonly instance = crypto.randomBytes(8).toString('hex');
  private readonly wire: Wire;
  private subscriptions: Subscription[] = [];
  private timer: NodeJS.Timeout | undefined;
  private running = 0;
  private draining = false;
  private idle: (() => void) | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly executor: Executor,
    private readonly log: ClusterLog,
    private readonly load: LoadReport,
    key: ClusterKey,
    /** Whether this node lets algorithms have the network at all (ALGOHOST_ALGORITHM_NETWORK). */
    private readonly allowNetwork: boolean,
    /**
     * Its name on the bus (nats.ts nodeNameOf): where a worker node has a NATS user of its own,
     * the name that user's permissions give it, and its connection's inbox prefix must be
     * inboxPrefix('worker', node).
     */
    readonly node: string,
  ) {
    this.wire = new Wire(nc, this.node, log, key, 'worker');
  }

  /**
   * Subscribes to jobs and starts the heartbeat. Resolves once the NATS server has the
   * subscriptions (a flush's round trip): a node that says it is ready before then makes an
   * API node's first call find no responder, and answer 503 no_workers.
   */
  async start(): Promise<void> {
    const callback = (err: Error | null, msg: Msg) => {
      if (err) return this.log.warn({ err }, 'the job subscription failed');
      // Nothing a message holds may take the node down: whatever escapes is logged.
      this.onJob(msg).catch((e: unknown) => this.log.warn({ err: e }, 'a job failed on this node'));
    };
    this.subscriptions = [
      this.nc.subscribe(RUN_SUBJECT, { queue: WORKERS_QUEUE, callback }),
      // A queue of one's own: were two processes ever given one name, each job still runs once
      // (the API nodes tell of it: they hear two instances beat under the name).
      this.nc.subscribe(`${WORKER_PREFIX}.${this.node}.run`, { queue: this.node, callback }),
    ];
    await this.nc.flush();
    try {
      checkSubscriptions([...this.subscriptions, ...this.wire.subscriptions], this.node);
    } catch (err) {
      for (const s of this.subscriptions) s.unsubscribe();
      this.wire.close();
      throw err;
    }
    this.timer = setInterval(() => this.beat(), BEAT_MS);
    this.timer.unref();
    this.beat();
    await this.nc.flush();
  }

  /** Jobs being run now. */
  get busy(): number {
    return this.running;
  }

  private beat(): void {
    const { warm, free } = this.load();
    try {
      this.wire.send(
        beatSubject(this.node),
        encodeBeat({ type: 'beat', node: this.node, instance: this.instance, role: 'worker', host: os.hostname(), running: this.running, free: this.draining ? 0 : free, warm, draining: this.draining }),
      );
    } catch {
      // Closed or reconnecting: the next beat goes out once it is back.
    }
  }

  private async onJob(msg: Msg): Promise<void> {
    let request: RunRequest;
    this.running++;
    try {
      let data: Buffer;
      try {
        data = this.wire.unseal(msg, true);
      } catch (err) {
        // Not from an API node of this cluster: never run, never answered (an answer would
        // tell its sender what this node is).
        this.log.warn({ err, subject: msg.subject }, 'refused a job that is not sealed by this cluster (a forged or replayed message on the bus)');
        return;
      }
      try {
        const opened = this.wire.open(data, Date.now() + 10_000, 64 * 1024 * 1024);
        const message = opened instanceof Promise ? await opened : opened;
        if (message.header.type === 'warm') {
          // A version just published, to start a worker for ahead of its first call (no answer;
          // not where its jobs would run without the network, whose keys differ).
          const warm = decodeWarmRequest(message);
          if (!this.draining && (this.allowNetwork || !warm.target.network)) this.executor.warm?.(warm.target, warm.after);
          return;
        }
        request = decodeRunRequest(message);
      } catch (err) {
        this.log.warn({ err }, 'dropped a job that is not one (malformed message on the bus)');
        // Its sender, if it waits for an answer, gets one now rather than at its timeout.
        const call = tryCall(data);
        if (msg.reply && call !== undefined) {
          try {
            const r = encodeRunReply({ type: 'refused', reason: 'internal', message: `this worker node could not read the job: ${(err as Error).message}` }, { call, worker: this.node });
            this.wire.respond(msg, this.wire.pack(r, BODY_TTL_MS).data);
          } catch {
            // Nobody to tell.
          }
        }
        return;
      }
      // Its answer goes only where its API node waits for it: a sealed job replayed with another
      // reply subject (onto another worker of the queue, say) is not run.
      if (msg.reply !== `${request.api}.reply.${request.call}`) {
        this.log.warn({ subject: msg.subject, reply: msg.reply ?? null }, 'refused a job whose answer would not go to its API node (a replayed or misdirected message on the bus)');
        return;
      }
      // Its log lines carry its call's trace (docs/traces.md); the run's own span is the runtime's.
      const trace = parseTraceparent(request.job.traceparent);
      await this.runJob(msg, request, trace !== undefined && this.log.child ? this.log.child(traceBindings(trace)) : this.log);
    } finally {
      this.running--;
      if (this.running === 0) this.idle?.();
    }
  }

  /** A job read and checked: run (or refused as draining) and answered. */
  private async runJob(msg: Msg, request: RunRequest, log: ClusterLog): Promise<void> {
    let reply: RunReply;
    const target = request.job.target;
    if (target.network && !this.allowNetwork) {
      request.job.target = { ...target, network: false, key: targetKey(target.build, false) };
    }
    if (this.draining) {
      reply = { type: 'refused', reason: 'draining', message: 'this worker node is stopping' };
    } else {
      // A job from the queue group: its API node learns who took it (one routed here knows).
      if (msg.subject === RUN_SUBJECT) {
        try {
          this.wire.send(request.api, encodeTaken({ type: 'taken', call: request.call, worker: this.node }));
        } catch (err) {
          log.warn({ err }, 'could not say which worker took a job');
        }
      }
      try {
        reply = { type: 'outcome', outcome: await this.executor.run(request.job, request.sdk ? this.hostFor(request) : undefined) };
      } catch (err) {
        reply = refusalOf(err);
        if (reply.reason === 'internal') log.warn({ err }, 'a job failed');
      }
    }
    // One line per job at debug level, in the job's trace (docs/traces.md).
    log.debug?.({ call: request.call, answer: reply.type === 'outcome' ? reply.outcome.kind : reply.reason }, 'ran a job');
    const { data: answer, ref } = this.wire.pack(encodeRunReply(reply, { call: request.call, worker: this.node }), BODY_TTL_MS);
    try {
      this.wire.respond(msg, answer);
    } catch (err) {
      this.wire.withdraw(ref);
      log.warn({ err }, 'could not answer a job');
    }
  }

  /**
   * Sends the call's SDK requests to the API node that holds the call. The wait runs a little
   * past the call's own deadline: the API node bounds what a request does by the time the call
   * has left (a nested call gets at most that), so its answer, a nested call's timeout
   * included, comes just after it, and the algorithm should see that answer rather than this
   * wait's end. The call itself still ends at its deadline (the worker stops it).
   */
  private hostFor(request: RunRequest): HostHandler {
    const deadline = Date.now() + request.job.timeoutMs + HOST_GRACE_MS;
    return async (header, body) => {
      const { data, ref } = this.wire.pack(encodeHostRequest({ type: 'host', call: request.call, worker: this.node, header, body }), Math.max(1, deadline - Date.now()));
      try {
        const answer = await this.wire.request(request.api, data, Math.max(1, deadline - Date.now())).catch((err: unknown) => {
          throw new Error(`this request to the API node failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
        });
        const r = decodeHostReply(await this.wire.open(answer, deadline));
        return { header: r.header, body: r.body };
      } finally {
        this.wire.withdraw(ref);
      }
    };
  }

  /**
   * Takes no new jobs, and resolves once the ones running have answered and their results have
   * been fetched (or have expired).
   */
  async drain(): Promise<void> {
    this.draining = true;
    for (const s of this.subscriptions) s.unsubscribe();
    this.beat();
    if (this.running > 0) await new Promise<void>((resolve) => (this.idle = resolve));
    await this.wire.whenEmpty();
    clearInterval(this.timer);
    this.wire.close();
  }
}

/**
 * The call a sealed job that could not be read names, if its header says, whatever its protocol
 * version (an API node of a newer version, in a rolling upgrade): its refusal goes to that call
 * rather than leaving the API node to wait out its time.
 */
function tryCall(data: Buffer): string | undefined {
  try {
    const length = data.readUInt32BE(0);
    const call = (JSON.parse(data.subarray(4, 4 + length).toString('utf8')) as { call?: unknown }).call;
    return typeof call === 'string' ? call : undefined;
  } catch {
    return undefined;
  }
}

function refusalOf(err: unknown): Extract<RunReply, { type: 'refused' }> {
  const message = (err as Error)?.message ?? String(err);
  if (err instanceof ExecutorBusyError) {
    const reason = err.reason === 'queue_full' ? 'busy_queue_full' : err.reason === 'caller_queue_full' ? 'busy_caller_queue_full' : 'busy_queue_timeout';
    return { type: 'refused', reason, message };
  }
  if (err instanceof WorkerStartError) return { type: 'refused', reason: 'start_failed', message };
  if (err instanceof BuildMissingError) return { type: 'refused', reason: 'build_missing', message };
  return { type: 'refused', reason: 'internal', message };
}
