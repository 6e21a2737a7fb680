import { AckPolicy, DeliverPolicy, DiscardPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType, type ConsumerMessages, type JetStreamClient, type JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { AsyncQueue, AsyncRun } from '../algorithms/asyncCalls.ts';
import type { ClusterLog } from './log.ts';
import { AppError } from '../errors.ts';

export const ASYNC_STREAM = 'ALGOHOST_ASYNC';
/**
 * Requests are published on `${ASYNC_SUBJECT}.<caller>` (the caller's user id): the stream keeps
 * at most `perCaller` messages on each (queued, or running and not yet acknowledged), so one
 * caller's backlog is bounded cluster-wide. The bare subject is what an API node of an earlier
 * version publishes on: one line for all of them.
 */
export const ASYNC_SUBJECT = 'algohost.v1.async';
export const ASYNC_CONSUMER = 'algohost-async';

const NS = 1_000_000;
/** How long a message may go unacknowledged before JetStream gives it to another API node. */
const ACK_WAIT_MS = 30_000;
/** An acknowledgement on a connection that has closed throws: the message is then redelivered anyway. */
function safely(fn: () => void): void {
  try {
    fn();
  } catch {
    // ack_wait brings the message back to some node.
  }
}

/** Async calls one API node runs at once. */
const LOCAL_MAX = 64;

/**
 * The cluster's queue of async calls: a JetStream work queue (file storage) that every API node
 * consumes through one durable pull consumer. `enqueue` resolves once JetStream has stored the
 * request (its publish acknowledged): only then is the caller told it was accepted. A node
 * acknowledges a message only after the call's answer is in the store; while the call runs it
 * tells JetStream it is still working, so a long call is not redelivered, and a node that dies
 * mid-call stops doing so: after ACK_WAIT_MS another node gets the message (deliveryCount + 1).
 *
 * The message is the request id alone: the request itself (input included) is in the metadata
 * store, written before the publish.
 */
export class JetStreamQueue implements AsyncQueue {
  readonly durable = true;
  private messages: ConsumerMessages | undefined;
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private closed = false;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly log: ClusterLog,
    private readonly maxAttempts: number,
    private readonly perCaller: number,
  ) {}

  /**
   * Makes sure the stream and its consumer exist (every node may; the first makes them). A
   * stream made before per-caller bounds, or with another `perCaller`, is brought to this
   * node's (every API node should have the same ALGOHOST_QUEUE_PER_CALLER).
   */
  static async open(nc: NatsConnection, log: ClusterLog, maxAttempts: number, perCaller = 100): Promise<JetStreamQueue> {
    const jsm = await jetstreamManager(nc, { timeout: 10_000 });
    const bounds = {
      subjects: [ASYNC_SUBJECT, `${ASYNC_SUBJECT}.*`],
      max_msgs_per_subject: perCaller,
      discard: DiscardPolicy.New,
      discard_new_per_subject: true,
    };
    const info = await jsm.streams.info(ASYNC_STREAM).catch(() => undefined);
    if (info !== undefined) {
      const c = info.config;
      if (c.max_msgs_per_subject !== perCaller || c.discard !== DiscardPolicy.New || c.discard_new_per_subject !== true || !c.subjects.includes(`${ASYNC_SUBJECT}.*`)) {
        await jsm.streams.update(ASYNC_STREAM, bounds);
      }
    } else {
      try {
        await jsm.streams.add({
          name: ASYNC_STREAM,
          ...bounds,
          retention: RetentionPolicy.Workqueue,
          storage: StorageType.File,
          duplicate_window: 120_000 * NS,
        });
      } catch (err) {
        // Another node made it in between.
        await jsm.streams.info(ASYNC_STREAM).catch(() => {
          throw err;
        });
      }
    }
    try {
      await jsm.consumers.info(ASYNC_STREAM, ASYNC_CONSUMER);
    } catch {
      try {
        await jsm.consumers.add(ASYNC_STREAM, {
          durable_name: ASYNC_CONSUMER,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          ack_wait: ACK_WAIT_MS * NS,
          max_deliver: -1,
          max_ack_pending: 10_000,
        });
      } catch (err) {
        await jsm.consumers.info(ASYNC_STREAM, ASYNC_CONSUMER).catch(() => {
          throw err;
        });
      }
    }
    return new JetStreamQueue(nc, jetstream(nc, { timeout: 10_000 }), log, maxAttempts, perCaller);
  }

  /** Whether requests go on their caller's subject (false once NATS refused this node that). */
  private perCallerSubjects = true;

  async enqueue(id: string, caller = ''): Promise<void> {
    // Deduplicated by id: a publish retried after a lost acknowledgement is stored once.
    const subject = this.perCallerSubjects && /^[A-Za-z0-9_-]{1,64}$/.test(caller) ? `${ASYNC_SUBJECT}.${caller}` : ASYNC_SUBJECT;
    try {
      await this.js.publish(subject, id, { msgID: id });
    } catch (err) {
      if (subject !== ASYNC_SUBJECT && /permissions violation/i.test((err as Error).message)) {
        // NATS's configuration predates per-caller subjects (docs/cluster.md): one line for all, said once.
        this.perCallerSubjects = false;
        this.log.warn({ err }, `this API node may not publish on ${ASYNC_SUBJECT}.<caller> (add it to the API nodes' NATS permissions, docs/cluster.md): async calls queue without a per-caller bound`);
        return this.enqueue(id, caller);
      }
      // The caller's subject holds as many requests as one caller may have queued (docs/limits.md, "Fair shares").
      if (/maximum messages per subject/i.test((err as Error).message)) {
        const e = new AppError('queue_full', `you have ${this.perCaller} calls with output=void queued or running, as many as one caller may; wait for some of them to end`, { scope: 'caller' });
        e.headers = [['retry-after', '1']];
        throw e;
      }
      throw err;
    }
  }

  /** Requests waiting in the stream, and taken but not yet acknowledged (for cluster status). */
  async depth(): Promise<{ pending: number; running: number }> {
    const info = await (await this.js.consumers.get(ASYNC_STREAM, ASYNC_CONSUMER)).info(true);
    return { pending: info.num_pending, running: info.num_ack_pending };
  }

  start(run: AsyncRun): void {
    void this.consumeForever(run);
  }

  /** Consumes until closed; a consumer that fails (NATS away at start, the stream gone) is started again. */
  private async consumeForever(run: AsyncRun): Promise<void> {
    for (let failures = 0; !this.closed; ) {
      try {
        await this.consume(run);
        failures = 0;
      } catch (err) {
        failures++;
        this.log.warn({ err }, 'the async queue stopped consuming; starting again');
      }
      if (!this.closed) await new Promise((r) => setTimeout(r, Math.min(10_000, 500 * 2 ** failures)).unref());
    }
  }

  private async consume(run: AsyncRun): Promise<void> {
    const consumer = await this.js.consumers.get(ASYNC_STREAM, ASYNC_CONSUMER);
    if (this.closed) return;
    // Pulls that expire every 5 s (heartbeats every 2.5 s): after NATS restarts, the client
    // checks the consumer again within seconds rather than the default 30 s. At most LOCAL_MAX
    // messages wait in this client, and they wait only for a slot.
    this.messages = await consumer.consume({ max_messages: LOCAL_MAX, expires: 5_000 });
    for await (const m of this.messages) {
      if (this.closed) {
        // Stopping: whatever was pulled goes back at once, for another node.
        safely(() => m.nak());
        continue;
      }
      while (this.running >= LOCAL_MAX) await new Promise<void>((resolve) => this.waiting.push(resolve));
      this.running++;
      const p = this.handle(m, run).finally(() => {
        this.running--;
        this.inFlight.delete(p);
        this.waiting.shift()?.();
      });
      this.inFlight.add(p);
    }
  }

  private async handle(m: JsMsg, run: AsyncRun): Promise<void> {
    const id = m.string();
    const attempt = m.info.deliveryCount;
    const keepAlive = setInterval(() => safely(() => m.working()), ACK_WAIT_MS / 3);
    try {
      const outcome = await run(id);
      if (outcome === 'done') safely(() => m.ack());
      else safely(() => m.nak(Math.min(30_000, 1000 * 2 ** Math.min(5, attempt - 1))));
    } catch (err) {
      // The store was away, or this node is stopping: another attempt, soon.
      this.log.warn({ err, request: id }, 'an async call could not be run or its answer stored; it will be tried again');
      safely(() => m.nak(2000));
    } finally {
      clearInterval(keepAlive);
    }
  }

  /** Takes no more messages, and waits for the calls running here to end (their answers stored, their messages acknowledged). */
  async close(): Promise<void> {
    this.closed = true;
    await this.messages?.close();
    await Promise.allSettled([...this.inFlight]);
    await this.nc.flush().catch(() => undefined);
  }
}
