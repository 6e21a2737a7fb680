import crypto from 'node:crypto';
import { MessageError } from './messages.ts';

/**
 * Every message between the nodes of a cluster is sealed (docs/security.md, "The cluster
 * bus"): its bytes are followed by the time it was sent and an HMAC-SHA256, keyed by
 * ALGOHOST_CLUSTER_SECRET, over the subject it was sent to, that time and the bytes. A node
 * takes nothing from the bus on its word: a message that is not sealed with the cluster's key,
 * that was sealed for another subject (a job replayed onto another worker, an answer moved to
 * another call), or that is older (or newer) than WINDOW_MS is dropped before it is read.
 * Within the window, a message the receiver asks to see only once (a job, an SDK request) is
 * remembered and a second copy is dropped.
 *
 * What this does not do: hide the bytes (TLS to the NATS server does, `tls://`), or tell one
 * node of the cluster from another: every node holds the key. Who may publish or read which
 * subject at all is the NATS server's permissions (docs/cluster.md).
 */

/** How far a message's time may be from the receiver's clock: the nodes' clocks must agree to within it. */
export const WINDOW_MS = 30_000;
const MAC_BYTES = 32;
/** What sealing adds to a message: the time (8 bytes) and the MAC. */
export const SEAL_BYTES = 8 + MAC_BYTES;
/** The shortest secret taken: 32 characters (`openssl rand -hex 32` gives 64). */
export const MIN_SECRET_LENGTH = 32;

export class ClusterKey {
  private readonly key: Buffer;
  /** MACs of messages seen once, in two generations of WINDOW_MS * 2 each (see once). */
  private seen = new Set<string>();
  private older = new Set<string>();
  private rotated = Date.now();

  constructor(
    secret: string,
    /** The clock (tests move it). */
    private readonly now: () => number = Date.now,
  ) {
    if (secret.length < MIN_SECRET_LENGTH) throw new Error(`a cluster secret has at least ${MIN_SECRET_LENGTH} characters`);
    // One key for this purpose alone, whatever else the operator's secret is used for.
    this.key = Buffer.from(crypto.hkdfSync('sha256', secret, 'algohost', 'cluster bus v1', 32));
  }

  /** `data` sealed for `subject`: what is published there. */
  seal(subject: string, data: Uint8Array): Buffer {
    const out = Buffer.allocUnsafe(data.length + SEAL_BYTES);
    out.set(data, 0);
    out.writeBigUInt64BE(BigInt(this.now()), data.length);
    this.mac(subject, out.subarray(0, data.length + 8)).copy(out, data.length + 8);
    return out;
  }

  /**
   * The bytes of a message received on `subject`, once its seal is checked; throws
   * MessageError for one that is not sealed by this cluster for this subject now. `once`: a
   * second copy of the same sealed message (a replay within the window) is refused too.
   */
  open(subject: string, data: Uint8Array, once = false): Buffer {
    const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    if (buf.length < SEAL_BYTES) throw new MessageError(`a message of ${buf.length} bytes carries no seal (is every node given the same ALGOHOST_CLUSTER_SECRET?)`);
    const end = buf.length - MAC_BYTES;
    const mac = buf.subarray(end);
    if (!crypto.timingSafeEqual(mac, this.mac(subject, buf.subarray(0, end)))) {
      throw new MessageError(`a message on ${subject} is not sealed with this cluster's key (is every node given the same ALGOHOST_CLUSTER_SECRET?)`);
    }
    const sent = Number(buf.readBigUInt64BE(end - 8));
    const skew = this.now() - sent;
    if (Math.abs(skew) > WINDOW_MS) {
      throw new MessageError(`a message on ${subject} was sealed ${Math.round(skew / 1000)} s from now (more than ${WINDOW_MS / 1000} s: replayed, or the nodes' clocks disagree)`);
    }
    if (once && !this.first(mac)) throw new MessageError(`a message on ${subject} came a second time (replayed)`);
    return buf.subarray(0, end - 8);
  }

  private mac(subject: string, bytes: Uint8Array): Buffer {
    return crypto.createHmac('sha256', this.key).update(subject).update(ZERO).update(bytes).digest();
  }

  /**
   * Whether this MAC is new. A MAC is remembered for at least 2 * WINDOW_MS (any message it
   * could be replayed as is refused by its time after that); memory is bounded by the
   * messages seen once in 4 * WINDOW_MS.
   */
  private first(mac: Buffer): boolean {
    const now = this.now();
    if (now - this.rotated >= 2 * WINDOW_MS) {
      this.older = this.seen;
      this.seen = new Set();
      this.rotated = now;
    }
    const id = mac.toString('base64', 0, 18);
    if (this.seen.has(id) || this.older.has(id)) return false;
    this.seen.add(id);
    return true;
  }
}

const ZERO = Buffer.alloc(1);
