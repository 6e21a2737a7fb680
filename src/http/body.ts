import type { Readable } from 'node:stream';
import { AppError } from '../errors.ts';

/** Reads a small request body (a directory name, an ACL) with a hard size limit. */
export async function readSmallBody(stream: Readable, limit = 64 * 1024): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new AppError('payload_too_large', `this request body may be at most ${limit} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Parses a JSON object body; refuses anything else, naming what was wrong. */
export function parseJsonObject(text: string, allowed: readonly string[]): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new AppError('invalid_json', text.trim() === '' ? 'the request body is empty; send a JSON object' : 'the request body is not valid JSON');
  }
  if (value === null) throw new AppError('invalid_body', 'the request body must be a JSON object');
  return checkObject(value, allowed);
}

/** A parsed body must be a JSON object with only the `allowed` fields (no body, or null: `{}`). */
export function checkObject(value: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new AppError('invalid_body', 'the request body must be a JSON object');
  }
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) {
      throw new AppError('invalid_body', `unknown field "${key.slice(0, 40)}"; this request takes ${allowed.join(', ')}`);
    }
  }
  return value as Record<string, unknown>;
}
