import crypto from 'node:crypto';

/**
 * Credentials of connected accounts are encrypted at rest with AES-256-GCM under a key
 * derived from the server secret (or given by ALGOHOST_CREDENTIALS_KEY). Each sealed value is
 * bound to its owner and label (the GCM additional data), so a sealed blob copied onto another
 * account's row does not open.
 */
export class CredentialBox {
  constructor(private readonly key: Buffer) {
    if (key.length !== 32) throw new Error('the credentials key must be 32 bytes');
  }

  seal(value: unknown, binding: string): string {
    const iv = crypto.randomBytes(12);
    const cipher = crypto.createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(Buffer.from(binding, 'utf8'));
    const body = Buffer.concat([cipher.update(JSON.stringify(value), 'utf8'), cipher.final()]);
    return `v1:${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
  }

  /** Throws when the value was not sealed by this key for this binding. */
  open(sealed: string, binding: string): unknown {
    if (!sealed.startsWith('v1:')) throw new Error('unknown credentials format');
    const raw = Buffer.from(sealed.slice(3), 'base64');
    const decipher = crypto.createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, 12));
    decipher.setAAD(Buffer.from(binding, 'utf8'));
    decipher.setAuthTag(raw.subarray(12, 28));
    return JSON.parse(Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8'));
  }
}
