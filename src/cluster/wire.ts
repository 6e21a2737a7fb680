import crypto from 'node:crypto';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { frame, HOST_PREFIX, MessageError, PARTS_PREFIX, readRef, unframe, type BodyRef, type Message } from './messages.ts';
import { inboxPrefix, type NatsRole } from './nats.ts';
import type { ClusterLog } from './log.ts';
import { SEAL_BYTES, type ClusterKey } from './seal.ts';

/** What a wrapped message repeats of the header it wraps: whose message it is. */
const WHOSE = ['call', 'worker'] as const;

/** Room left in a message for its header (and its seal). */
const HEADER_ROOM = 4096;
/** Parts of one body asked for at once. */
const WINDOW = 4;
/** Longest one part may take to arrive. */
const PART_TIMEOUT_MS = 10_000;

interface Offer {
  body: Buffer;
  partBytes: number;
  parts: number;
  /** Parts not yet served: the offer is dropped once every part has gone out once. */
  left: Set<number>;
  timer: NodeJS.Timeout;
}

/**
 * A node's end of the bus for messages with a body: `pack` makes one NATS message of a header
 * and a body, and when the body would make it bigger than the server's `max_payload`, keeps the
 * body here and puts a reference (BodyRef) in the header; `open` reads a message, fetching a
 * referenced body part by part from the node that has it. Each part is one request-reply, a few
 * at once, so a 10 MiB body crosses in a few round trips, never base64-inflated, and never
 * faster than the receiver asks for it.
 *
 * A kept body is dropped once each of its parts has been served, or when its time is up (the
 * receiver died, or never needed it).
 *
 * It is also where a node's messages meet the bus: everything sent goes out sealed for its
 * subject with the cluster's key (send, respond, request; seal.ts), and everything received is
 * opened (its seal checked) before it is read (unseal), the parts of bodies included.
 */
export class Wire {
  readonly subject: string;
  private readonly offers = new Map<string, Offer>();
  private readonly subscription: Subscription;
  private emptied: (() => void) | undefined;

  /** The prefix of this node's inboxes. */
  readonly inboxPrefix: string;
  /** Where this node's requests are answered: `${inbox}.<n>`, one subscription for all (request). */
  private readonly inbox: string;
  private readonly answers: Subscription;
  private readonly waiting = new Map<string, { resolve: (data: Buffer) => void; reject: (err: Error) => void }>();
  private requests = 0;

  constructor(
    private readonly nc: NatsConnection,
    node: string,
    private readonly log: ClusterLog,
    private readonly key: ClusterKey,
    /**
     * What the node is: its inboxes are `inboxPrefix(role, node)`, which its NATS user alone may
     * read, and its parts subject `${PARTS_PREFIX}.<role>.<node>`, on which only the other role
     * may publish (docs/cluster.md): a worker may publish on no subject it can subscribe to.
     */
    role: NatsRole = 'worker',
  ) {
    this.inboxPrefix = inboxPrefix(role, node);
    this.inbox = `${this.inboxPrefix}.${crypto.randomBytes(9).toString('hex')}`;
    this.answers = nc.subscribe(`${this.inbox}.*`, { callback: (err, msg) => (err ? log.warn({ err }, 'the answers subscription failed') : this.onAnswer(msg)) });
    this.subject = `${PARTS_PREFIX}.${role}.${node}`;
    this.subscription = nc.subscribe(this.subject, {
      callback: (err, msg) => {
        if (err) return log.warn({ err }, 'the parts subscription failed');
        let answer: Uint8Array;
        try {
          answer = this.part(unframe(this.unseal(msg)).header);
        } catch (e) {
          log.warn({ err: e }, 'dropped a part request that is not one (a malformed or unsealed message on the bus)');
          return;
        }
        try {
          this.respond(msg, answer);
        } catch (e) {
          log.warn({ err: e }, 'could not send a part');
        }
      },
    });
  }

  /** What this wire listens on (its parts subject, its inbox): for a start to check the NATS server took them. */
  get subscriptions(): Subscription[] {
    return [this.subscription, this.answers];
  }

  /** Publishes `data` on `subject`, sealed for it; answers, if any, go to `reply`. */
  send(subject: string, data: Uint8Array, reply?: string): void {
    this.nc.publish(subject, this.key.seal(subject, data), reply === undefined ? undefined : { reply });
  }

  /**
   * Answers `msg` with `data`, sealed for its reply subject (nothing, if it asked for no answer).
   * Only into a node's inbox or an API node's reply subject: a sender naming any other subject
   * as its reply (`$JS.API.…`, another node's jobs) would have this node publish there for it.
   */
  respond(msg: Msg, data: Uint8Array): void {
    if (!msg.reply) return;
    if (!answerable(msg.reply)) {
      this.log.warn({ subject: msg.subject, reply: msg.reply }, 'did not answer a message whose reply subject is no inbox (a forged message on the bus)');
      return;
    }
    this.nc.publish(msg.reply, this.key.seal(msg.reply, data));
  }

  /** Sends a request and gives its answer's bytes, seal checked. */
  request(subject: string, data: Uint8Array, timeout: number): Promise<Buffer> {
    // Request-reply by hand: the first answer that is sealed by the cluster counts, whatever
    // else comes first on the inbox (a forged answer would otherwise win, and fail the fetch).
    const token = String(this.requests++);
    return new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => settle(() => reject(new Error(`no answer from ${subject} within ${timeout} ms`))), timeout);
      const settle = (then: () => void) => {
        clearTimeout(timer);
        this.waiting.delete(token);
        then();
      };
      this.waiting.set(token, { resolve: (d) => settle(() => resolve(d)), reject: (e) => settle(() => reject(e)) });
      try {
        this.nc.publish(subject, this.key.seal(subject, data), { reply: `${this.inbox}.${token}` });
      } catch (err) {
        settle(() => reject(err as Error));
      }
    });
  }

  private onAnswer(msg: Msg): void {
    const w = this.waiting.get(msg.subject.slice(this.inbox.length + 1));
    if (!w) return;
    if (msg.data.length === 0 && msg.headers?.code === 503) return w.reject(new Error(`no responders for the request`));
    try {
      w.resolve(this.unseal(msg));
    } catch (err) {
      this.log.warn({ err, subject: msg.subject }, 'dropped an answer that is not sealed by this cluster (a forged or replayed message on the bus)');
    }
  }

  /**
   * A received message's bytes, once its seal is checked (MessageError if it is not sealed by
   * this cluster for the subject it came on, now). `once`: a copy seen before is refused too.
   */
  unseal(msg: Msg, once = false): Buffer {
    return this.key.open(msg.subject, msg.data, once);
  }

  /** The largest message the NATS server takes. */
  get maxPayload(): number {
    return this.nc.info?.max_payload ?? 1024 * 1024;
  }

  /**
   * One message of `m`'s header and body. A body too big for it is kept here for `ttlMs` (or
   * until fetched), named in the header's `ref`; `ref` is returned too, for `withdraw`.
   */
  pack(m: Message, ttlMs: number): { data: Buffer; ref?: string } {
    const max = this.maxPayload;
    const data = frame(m.header, m.body);
    if (data.length + SEAL_BYTES <= max) return { data };
    if (data.length - m.body.length + HEADER_ROOM > max) {
      // The header itself is too big (a megabyte of stdout in an outcome): the whole message
      // is kept, and a `wrapped` one names it, with the inner header's `call` and `worker` (whose
      // message it is, checked by its receiver before it fetches it; read checks they agree).
      const whose = Object.fromEntries(WHOSE.filter((k) => typeof m.header[k] === 'string').map((k) => [k, m.header[k]]));
      return this.keep({ type: 'wrapped', ...whose }, data, ttlMs);
    }
    return this.keep(m.header, m.body, ttlMs);
  }

  private keep(header: Record<string, unknown>, body: Buffer, ttlMs: number): { data: Buffer; ref: string } {
    const max = this.maxPayload;
    const partBytes = Math.max(1024, max - HEADER_ROOM);
    const parts = Math.max(1, Math.ceil(body.length / partBytes));
    const id = crypto.randomBytes(12).toString('hex');
    const timer = setTimeout(() => this.drop(id), ttlMs);
    timer.unref();
    this.offers.set(id, { body, partBytes, parts, left: new Set(Array.from({ length: parts }, (_, i) => i)), timer });
    const ref: BodyRef = { subject: this.subject, id, size: body.length, parts };
    return { data: frame({ ...header, ref }), ref: id };
  }

  /** Drops a kept body before its time (its message was never delivered, or it is no longer needed). */
  withdraw(id: string | undefined): void {
    if (id !== undefined) this.drop(id);
  }

  /**
   * Reads a message, fetching its body if it was left with its sender; `limit` bounds a
   * referenced body. A message with its body inline is read at once, without a promise (the
   * warm call's way, both ends); throws MessageError for one it cannot read.
   */
  open(data: Uint8Array, deadline = Date.now() + PART_TIMEOUT_MS, limit = Infinity): Message | Promise<Message> {
    return this.read(unframe(data), deadline, limit);
  }

  /** `open` for a message already unframed (its header read to see what it is). */
  read(m: Message, deadline = Date.now() + PART_TIMEOUT_MS, limit = Infinity): Message | Promise<Message> {
    const ref = readRef(m.header);
    if (!ref) return m;
    if (ref.size > limit) throw new MessageError(`a referenced body of ${ref.size} bytes is over this message's limit of ${limit}`);
    if (m.header.type === 'wrapped') {
      return this.fetch(ref, deadline).then((whole) => {
        const inner = unframe(whole);
        if (inner.header.ref !== undefined || inner.header.type === 'wrapped') throw new MessageError('a wrapped message wraps another reference');
        for (const k of WHOSE) if (m.header[k] !== inner.header[k]) throw new MessageError(`a wrapped message says its ${k} is ${String(m.header[k])}, what it wraps ${String(inner.header[k])}`);
        return inner;
      });
    }
    return this.fetch(ref, deadline).then((body) => ({ header: m.header, body }));
  }

  /** Bodies kept for receivers that have not fetched them yet. */
  get kept(): number {
    return this.offers.size;
  }

  /** Resolves once every kept body has been fetched or has expired. */
  async whenEmpty(): Promise<void> {
    if (this.offers.size === 0) return;
    await new Promise<void>((resolve) => (this.emptied = resolve));
  }

  close(): void {
    this.subscription.unsubscribe();
    this.answers.unsubscribe();
    for (const w of [...this.waiting.values()]) w.reject(new Error('this node is stopping'));
    for (const id of [...this.offers.keys()]) this.drop(id);
  }

  private part(header: Record<string, unknown>): Uint8Array {
    if (header.type !== 'part') throw new MessageError(`expected a part request, got ${JSON.stringify(header.type)}`);
    const { id, index } = header;
    if (typeof id !== 'string' || typeof index !== 'number') throw new MessageError('a part request names no id or index');
    const offer = this.offers.get(id);
    if (!offer || !Number.isInteger(index) || index < 0 || index >= offer.parts) return frame({ type: 'part_missing' });
    const data = frame({ type: 'part_data' }, offer.body.subarray(index * offer.partBytes, (index + 1) * offer.partBytes));
    offer.left.delete(index);
    if (offer.left.size === 0) this.drop(id);
    return data;
  }

  private drop(id: string): void {
    const offer = this.offers.get(id);
    if (!offer) return;
    clearTimeout(offer.timer);
    this.offers.delete(id);
    if (this.offers.size === 0) this.emptied?.();
  }

  private async fetch(ref: BodyRef, deadline: number): Promise<Buffer> {
    const out = Buffer.allocUnsafe(ref.size);
    let offset = 0;
    const get = async (index: number): Promise<Buffer> => {
      const timeout = Math.max(1, Math.min(PART_TIMEOUT_MS, deadline - Date.now()));
      const answer = unframe(await this.request(ref.subject, frame({ type: 'part', id: ref.id, index }), timeout));
      if (answer.header.type !== 'part_data') throw new MessageError(`part ${index} of a body is no longer there (${String(answer.header.type)})`);
      return answer.body;
    };
    // In order, WINDOW requests in flight: parts land in `out` as they leave the window's head.
    const inFlight: Promise<Buffer>[] = [];
    let next = 0;
    try {
      for (let i = 0; i < ref.parts; i++) {
        while (next < ref.parts && inFlight.length < WINDOW) inFlight.push(get(next++));
        const part = await inFlight.shift()!;
        if (part.length === 0 || offset + part.length > ref.size) throw new MessageError(`a body's parts do not add up to the ${ref.size} bytes announced`);
        part.copy(out, offset);
        offset += part.length;
      }
    } finally {
      // Settles any request left behind (after a failure) so that none rejects unhandled.
      for (const p of inFlight) p.catch(() => undefined);
    }
    if (offset !== ref.size) throw new MessageError(`a body's parts hold ${offset} bytes, ${ref.size} were announced`);
    return out;
  }
}

const JOB_REPLY = new RegExp(`^${HOST_PREFIX.replaceAll('.', '\\.')}\\.[A-Za-z0-9_-]+\\.reply\\.[A-Za-z0-9_-]+$`);

/** Whether a reply subject is one a node answers into: a node's inbox, or an API node's reply subject for a job. */
export function answerable(reply: string): boolean {
  return /^_INBOX_(api|worker|admin)\.[A-Za-z0-9_.-]+$/.test(reply) || JOB_REPLY.test(reply);
}
