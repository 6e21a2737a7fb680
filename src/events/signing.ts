import crypto from 'node:crypto';

/**
 * Webhook signatures as the Standard Webhooks specification has them
 * (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):
 * a secret `whsec_<base64>`, and for each message the headers `webhook-id`,
 * `webhook-timestamp` (seconds) and `webhook-signature`: `v1,<base64 HMAC-SHA256 of
 * "<id>.<timestamp>.<body>" under the secret's bytes>`, several separated by spaces while a
 * rotated secret still signs beside the new one.
 */

/** A new secret: `whsec_` and 32 random bytes in base64. */
export function newSecret(): string {
  return `whsec_${crypto.randomBytes(32).toString('base64')}`;
}

/** The bytes a `whsec_` secret stands for. */
function keyOf(secret: string): Buffer {
  return Buffer.from(secret.startsWith('whsec_') ? secret.slice(6) : secret, 'base64');
}

/** `v1,<signature>` of one message under one secret. */
export function signature(secret: string, id: string, timestampS: number, body: string): string {
  return `v1,${crypto.createHmac('sha256', keyOf(secret)).update(`${id}.${timestampS}.${body}`).digest('base64')}`;
}

/** The three headers of a message, signed by every secret given. */
export function webhookHeaders(secrets: string[], id: string, timestampS: number, body: string): Record<string, string> {
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestampS),
    'webhook-signature': secrets.map((s) => signature(s, id, timestampS, body)).join(' '),
  };
}

/** How far a message's timestamp may be from the receiver's clock (the specification's suggestion). */
export const TOLERANCE_S = 5 * 60;

/**
 * Whether a received message is genuine: one of its signatures is `secret`'s, and its
 * timestamp is within TOLERANCE_S of now. What a receiver written with the npm client calls
 * (client/src verifyWebhook does the same).
 */
export function verify(secret: string, headers: Record<string, string | string[] | undefined>, body: string, nowS = Math.floor(Date.now() / 1000)): boolean {
  const one = (name: string) => {
    const v = headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  const id = one('webhook-id');
  const ts = Number(one('webhook-timestamp'));
  const given = one('webhook-signature');
  if (!id || !Number.isInteger(ts) || !given || Math.abs(nowS - ts) > TOLERANCE_S) return false;
  const expected = Buffer.from(signature(secret, id, ts, body));
  return given.split(' ').some((sig) => {
    const b = Buffer.from(sig);
    return b.length === expected.length && crypto.timingSafeEqual(b, expected);
  });
}
