/**
 * Verifying a webhook delivery, as the Standard Webhooks specification has it
 * (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md),
 * which is how algohost signs them (docs/events.md): the headers `webhook-id`,
 * `webhook-timestamp` (seconds) and `webhook-signature`, one or more `v1,<base64 HMAC-SHA256 of
 * "<id>.<timestamp>.<body>">` separated by spaces (a rotated secret signs beside the new one for
 * a day), under the bytes of the secret `whsec_<base64>`.
 *
 * Written on WebCrypto (`crypto.subtle`), which Node 20 and browsers both have, so it goes
 * into both entries; no Node built-in, no Buffer. The server's own signing is
 * src/events/signing.ts: this is a separate implementation of the same specification, and the
 * tests hold both to the specification's own package (`standardwebhooks`).
 */
import { AlgohostError } from './errors.ts';
import type { CloudEvent } from './types.ts';

/** How far a delivery's timestamp may be from the receiver's clock by default: 5 minutes, the specification's. */
export const WEBHOOK_TOLERANCE_S = 5 * 60;

/** Why a delivery was not accepted; `code` says which check failed. */
export type WebhookErrorCode =
  /** The secret is not `whsec_<base64>` (or base64), or is empty. */
  | 'webhook_secret_invalid'
  /** `webhook-id`, `webhook-timestamp` or `webhook-signature` is missing. */
  | 'webhook_headers_missing'
  /** `webhook-timestamp` is not a whole number of seconds. */
  | 'webhook_timestamp_invalid'
  /** The timestamp is further from now than the tolerance: an old message replayed, or a clock far off. */
  | 'webhook_timestamp_out_of_range'
  /** No `v1` signature in the header is the secret's for this id, timestamp and body: forged, changed, or another secret. */
  | 'webhook_signature_invalid'
  /** Genuine, but the body is not a JSON object. */
  | 'webhook_body_invalid';

/** A delivery that did not verify. Reject it (answer 400 or 401); never act on its body. */
export class WebhookVerificationError extends AlgohostError {
  declare readonly code: WebhookErrorCode;

  constructor(message: string, code: WebhookErrorCode) {
    super(message, code);
    this.name = 'WebhookVerificationError';
  }
}

/**
 * The request's headers: a `Headers` (fetch, a Request's), or a plain object with names in any
 * case (Node's `req.headers`, Express's, a framework's), values strings or arrays of them.
 */
export type WebhookHeaders = { get(name: string): string | null } | Record<string, string | readonly string[] | undefined>;

export interface VerifyWebhookOptions {
  /** Seconds a timestamp may be from now, either way. Default WEBHOOK_TOLERANCE_S (300). */
  toleranceSeconds?: number;
  /** The receiver's clock, in ms since the epoch (tests, a clock of your own). Default `Date.now()`. */
  now?: number;
}

const encoder = new TextEncoder();

function headerOf(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as { get?: unknown }).get === 'function') {
    return (headers as { get(name: string): string | null }).get(name) ?? undefined;
  }
  const record = headers as Record<string, string | readonly string[] | undefined>;
  let value = record[name];
  if (value === undefined) {
    const key = Object.keys(record).find((k) => k.toLowerCase() === name);
    value = key === undefined ? undefined : record[key];
  }
  if (typeof value === 'string') return value;
  // Repeated headers (an array from Node): the specification's three are single, take the first.
  return value?.[0];
}

/** Bytes from standard base64 (or base64url), or undefined if it is not base64. */
function fromBase64(text: string): Uint8Array<ArrayBuffer> | undefined {
  const plain = text.replace(/-/g, '+').replace(/_/g, '/');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(plain)) return undefined;
  let binary: string;
  try {
    binary = atob(plain.length % 4 === 0 ? plain : plain + '='.repeat(4 - (plain.length % 4)));
  } catch {
    return undefined;
  }
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

function concat(...parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

type Subtle = typeof globalThis.crypto.subtle;

function subtle(): Subtle {
  const s = (globalThis as { crypto?: { subtle?: Subtle } }).crypto?.subtle;
  if (!s) {
    // Browsers give crypto.subtle to secure contexts only (https, localhost).
    throw new AlgohostError('WebCrypto (crypto.subtle) is not available here: a browser offers it to https pages only', 'no_webcrypto');
  }
  return s;
}

/** The body as bytes, and as text. */
function bodyOf(body: string | Uint8Array | ArrayBuffer): { bytes: Uint8Array; text: () => string } {
  if (typeof body === 'string') return { bytes: encoder.encode(body), text: () => body };
  const bytes = body instanceof Uint8Array ? body : new Uint8Array(body);
  return { bytes, text: () => new TextDecoder('utf-8', { ignoreBOM: true }).decode(bytes) };
}

/**
 * Verifies a webhook delivery and answers its event. Throws a WebhookVerificationError (with a
 * `code` saying what failed) unless one of the `v1` signatures in `webhook-signature` is the
 * secret's for this id, timestamp and body, and the timestamp is within the tolerance of now.
 *
 * Pass the body exactly as it arrived (the raw bytes or text, not JSON parsed and serialised
 * again: that changes it), and the request's headers as they are. Signatures are compared in
 * constant time (WebCrypto's HMAC verify). During a secret's rotation a delivery carries a
 * signature per secret, and verifies with either.
 *
 *   const event = await verifyWebhook(process.env.WHSEC, req.headers, rawBody);
 */
export async function verifyWebhook<D = Record<string, unknown>>(
  secret: string | Uint8Array,
  headers: WebhookHeaders,
  body: string | Uint8Array | ArrayBuffer,
  options: VerifyWebhookOptions = {},
): Promise<CloudEvent<D>> {
  let key: Uint8Array<ArrayBuffer> | undefined;
  if (typeof secret === 'string') key = fromBase64(secret.startsWith('whsec_') ? secret.slice(6) : secret);
  else key = new Uint8Array(secret);
  if (!key || key.byteLength === 0) throw new WebhookVerificationError('the secret is not a webhook secret (whsec_ and base64)', 'webhook_secret_invalid');

  const id = headerOf(headers, 'webhook-id');
  const timestamp = headerOf(headers, 'webhook-timestamp');
  const signatures = headerOf(headers, 'webhook-signature');
  const missing = [['webhook-id', id], ['webhook-timestamp', timestamp], ['webhook-signature', signatures]].filter(([, v]) => !v).map(([n]) => n);
  if (missing.length > 0) throw new WebhookVerificationError(`not a webhook delivery: no ${missing.join(', ')} header`, 'webhook_headers_missing');
  if (!/^\d{1,15}$/.test(timestamp!.trim())) throw new WebhookVerificationError(`webhook-timestamp "${timestamp!.slice(0, 32)}" is not a time in seconds`, 'webhook_timestamp_invalid');
  const seconds = Number(timestamp!.trim());
  const now = Math.floor((options.now ?? Date.now()) / 1000);
  const tolerance = options.toleranceSeconds ?? WEBHOOK_TOLERANCE_S;
  if (Math.abs(now - seconds) > tolerance) {
    const off = now - seconds;
    throw new WebhookVerificationError(
      `webhook-timestamp is ${Math.abs(off)} s ${off > 0 ? 'in the past' : 'in the future'}, beyond the ${tolerance} s tolerated: a replayed message, or a clock far off`,
      'webhook_timestamp_out_of_range',
    );
  }

  const { bytes, text } = bodyOf(body);
  const signed = concat(encoder.encode(`${id}.${seconds}.`), bytes);
  const crypto = subtle();
  const hmac = await crypto.importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
  let genuine = false;
  for (const candidate of signatures!.split(' ')) {
    const comma = candidate.indexOf(',');
    if (comma < 0 || candidate.slice(0, comma) !== 'v1') continue;
    const given = fromBase64(candidate.slice(comma + 1));
    if (!given || given.byteLength !== 32) continue;
    // WebCrypto's verify compares in constant time; every candidate is checked, whichever matches.
    if (await crypto.verify('HMAC', hmac, given, signed)) genuine = true;
  }
  if (!genuine) throw new WebhookVerificationError('no signature in webhook-signature is this secret\'s for this body: forged, changed on the way, or signed with another secret', 'webhook_signature_invalid');

  let event: unknown;
  try {
    event = JSON.parse(text());
  } catch {
    throw new WebhookVerificationError('the delivery is signed but its body is not JSON', 'webhook_body_invalid');
  }
  if (!event || typeof event !== 'object' || Array.isArray(event)) throw new WebhookVerificationError('the delivery is signed but its body is not a JSON object', 'webhook_body_invalid');
  return event as CloudEvent<D>;
}
