import crypto from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { finished, Transform, type Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../errors.ts';
import type { Db, MetadataStore } from '../store/db.ts';
import type { IdempotencyKeysTable } from '../store/schema.ts';
import { errorAnswer, headerSafe } from './answers.ts';

/**
 * `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header, and Stripe's API): a retried
 * async call (`POST /v1/algo/...?output=void`) or file upload (`PUT` of a data path, hosted or
 * connected) carrying the key of an earlier one gets that one's answer again, with
 * `Idempotent-Replayed: true`, instead of acting twice. docs/events.md#idempotency-key.
 *
 * A key belongs to the user who sent it, for 24 h from the request that answered it. Its row in
 * `idempotency_keys` is claimed first (`running`, with the claiming process as `holder`), then
 * the answer is stored (`done`) with a fingerprint of the request: the method and target (path
 * and query, as sent; for a call, the input's type too) and the SHA-256 of the body (an upload's
 * computed as it streams to storage, RFC 9530's `sha-256=:…:` form). Where the effect has a
 * transaction (an accepted call's request row, a hosted file's commit), the answer is written in
 * it: the key and the effect stand together or not at all.
 */

/** How long a key's answer is replayed. */
export const KEEP_MS = 24 * 3_600_000;
export const MAX_KEY_CHARS = 255;
export const REPLAYED_HEADER = 'idempotent-replayed';
/** The digest part of a fingerprint whose body has not been read to its end yet (an upload under way). */
const PENDING = 'pending';

/** An answer as it is sent and stored: always JSON on the routes that take a key. */
export interface StoredAnswer {
  status: number;
  body: string;
}

/**
 * The key a request carries: undefined without the header; 400 `invalid_idempotency_key` when it
 * is empty, longer than 255 characters or not printable ASCII. The draft sends it as a
 * Structured Field string (`"…"`), Stripe's clients bare: both are taken, as the same key.
 */
export function idempotencyKey(headers: IncomingHttpHeaders): string | undefined {
  const raw = headers['idempotency-key'];
  if (raw === undefined) return undefined;
  // Node joins a repeated header with ", " (a quoted pair then fails to unquote, below).
  let key = (Array.isArray(raw) ? raw.join(', ') : raw).trim();
  if (key.length >= 2 && key.startsWith('"') && key.endsWith('"')) key = unquote(key);
  if (key === '' || key.length > MAX_KEY_CHARS || !/^[\x20-\x7e]+$/.test(key)) {
    throw new AppError(
      'invalid_idempotency_key',
      `an Idempotency-Key is 1 to ${MAX_KEY_CHARS} printable ASCII characters (a UUID is a good one); got ${key === '' ? 'an empty one' : `${key.length} characters${/^[\x20-\x7e]*$/.test(key) ? '' : ', some not printable ASCII'}`}`,
    );
  }
  return key;
}

/** An RFC 8941 sf-string's content; '' (refused as empty) when it is not one. */
function unquote(quoted: string): string {
  let out = '';
  for (let i = 1; i < quoted.length - 1; i++) {
    const c = quoted[i]!;
    if (c === '"') return '';
    if (c === '\\') {
      const next = quoted[++i];
      if (next !== '"' && next !== '\\') return '';
      out += next;
    } else {
      out += c;
    }
  }
  return out;
}

/** A body's digest as the fingerprint keeps it (RFC 9530's Content-Digest value). */
export function bodyDigest(body: Buffer): string {
  return `sha-256=:${crypto.createHash('sha256').update(body).digest('base64')}:`;
}

/** A stream that passes `source` on and hashes it; `digest()` once it has ended, else undefined. */
function hashing(source: Readable): { body: Readable; digest(): string | undefined; dispose(): void } {
  const hash = crypto.createHash('sha256');
  let digest: string | undefined;
  const body = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      done(null, chunk);
    },
    flush(done) {
      digest = `sha-256=:${hash.digest('base64')}:`;
      done();
    },
  });
  // The client going away mid-body fails the stream (pipe alone would leave it waiting).
  const stop = finished(source, (err) => {
    if (err) body.destroy(err);
  });
  source.pipe(body);
  return {
    body,
    digest: () => digest,
    dispose() {
      stop();
      source.unpipe(body);
      if (!body.destroyed) body.destroy();
      // A body refused before its end is read and dropped, as Node does with one nobody read
      // (it does not, once it was read from): else the rest of it stays in the connection, where
      // the next request on it would be looked for.
      if (!source.readableEnded && !source.destroyed) source.resume();
    },
  };
}

/** Reads `source` to its end only to hash it (a retried upload compared with the first). */
async function readDigest(source: Readable, maxBytes: number): Promise<string> {
  const hash = crypto.createHash('sha256');
  let n = 0;
  for await (const chunk of source) {
    n += (chunk as Buffer).length;
    if (n > maxBytes) throw new AppError('payload_too_large', `the file is larger than the limit of ${maxBytes} bytes`);
    hash.update(chunk as Buffer);
  }
  return `sha-256=:${hash.digest('base64')}:`;
}

/**
 * Whether an answer is kept for the key's retries (else the key is freed, and a retry runs
 * again). Kept: a 2xx, and a 4xx that is the request's own (bad input, a path or algorithm that
 * is not there, too large), which a retry of the same request would get again. Freed: every 5xx
 * (503 `server_busy` too), and the 4xx that depend on who asks or on the moment rather than on
 * the request (401, 403: a key's permissions; 408; 409: the state of the target or another
 * request; 429). A refused request did nothing, so freeing its key never lets one act twice.
 */
export function worthKeeping(status: number): boolean {
  if (status >= 200 && status < 300) return true;
  return status >= 400 && status < 500 && ![401, 403, 408, 409, 423, 425, 429].includes(status);
}

type KeyRow = Pick<IdempotencyKeysTable, 'fingerprint' | 'status' | 'holder' | 'response_status' | 'response' | 'created_at'>;

/** `<digest> <method> <target>[ (<input type>)]`: what the key was first used for. */
function parseFingerprint(fingerprint: string): { digest: string; line: string } {
  const at = fingerprint.indexOf(' ');
  return at < 0 ? { digest: fingerprint, line: '' } : { digest: fingerprint.slice(0, at), line: fingerprint.slice(at + 1) };
}

function reused(key: string, what: string): AppError {
  return new AppError(
    'idempotency_key_reused',
    `Idempotency-Key "${key.slice(0, 60)}" was used within 24 h for another request (${what}); send a retry exactly as the first request was sent, or use a new key for a new operation`,
  );
}

function inUse(key: string): AppError {
  return new AppError('idempotency_key_in_use', `a request with Idempotency-Key "${key.slice(0, 60)}" is still being answered; retry with the same key once it has been, to get its answer`);
}

/** 422 when `row` was made for another request than this one (the body's digest compared only when both are known). */
function refuseOther(row: KeyRow, key: string, line: string, digest: string | undefined): void {
  const first = parseFingerprint(row.fingerprint);
  if (first.line !== line) throw reused(key, `it was first sent as ${first.line.slice(0, 300)}`);
  if (digest !== undefined && first.digest !== PENDING && first.digest !== digest) throw reused(key, 'the same method and path, another body');
}

/** What `begin` found: a claim to act under, an answer to replay, or (an upload) an answer to replay if the body's digest is `digest`. */
type Begun = { kind: 'claimed'; claim: KeyClaim } | { kind: 'replay'; answer: StoredAnswer } | { kind: 'check'; answer: StoredAnswer; digest: string };

/** The request a key is used for: an upload's body is hashed as it streams; a call's input is already read. */
export type KeyedRequest = { line: string; digest: string } | { line: string; stream: Readable; maxBytes: number };

interface Log {
  warn(obj: object, msg: string): void;
}

/**
 * A key this process holds while it answers its request. `record` writes the answer inside the
 * effect's transaction; `withdraw` frees the key inside the one undoing it; `settle` stores the
 * answer afterwards (where nothing recorded it), or frees the key. Every write names the holder,
 * so a claim that another process took over (this one was thought dead) writes nothing, and a
 * `record` for it fails, taking the effect's transaction with it.
 */
export class KeyClaim {
  private recorded = false;
  /** The body's digest: known at once for a call, at the body's end for an upload. */
  digest: () => string | undefined;

  constructor(
    private readonly store: MetadataStore,
    readonly userId: number,
    readonly key: string,
    readonly holder: string,
    private readonly line: string,
    digest: string | undefined,
  ) {
    this.digest = () => digest;
  }

  private fingerprint(): string {
    return `${this.digest() ?? PENDING} ${this.line}`;
  }

  /** Inside the effect's transaction: the answer stands with the effect, or neither does. */
  async record(trx: Db, answer: StoredAnswer): Promise<void> {
    const r = await trx
      .updateTable('idempotency_keys')
      .set({ status: 'done', fingerprint: this.fingerprint(), response_status: answer.status, response: answer.body })
      .where('user_id', '=', this.userId)
      .where('key', '=', this.key)
      .where('holder', '=', this.holder)
      .where('status', '=', 'running')
      .executeTakeFirst();
    if (Number(r.numUpdatedRows) !== 1) throw inUse(this.key);
    this.recorded = true;
  }

  /** Inside the transaction that undoes what `record` stood for (a call that could not be queued): the key is free again. */
  async withdraw(trx: Db): Promise<void> {
    await trx.deleteFrom('idempotency_keys').where('user_id', '=', this.userId).where('key', '=', this.key).where('holder', '=', this.holder).execute();
    this.recorded = false;
  }

  /**
   * After the request: its answer kept for the retries if it is worth keeping and its body was
   * read to the end (an upload refused before that has no fingerprint to compare a retry with),
   * else the key freed. Nothing happens to a key recorded with the effect, or taken over.
   */
  async settle(answer: StoredAnswer, succeeded: boolean): Promise<void> {
    if (this.recorded && succeeded) return;
    const mine = (q: 'u' | 'd') =>
      q === 'u'
        ? this.store.db
            .updateTable('idempotency_keys')
            .set({ status: 'done', fingerprint: this.fingerprint(), response_status: answer.status, response: answer.body })
            .where('user_id', '=', this.userId)
            .where('key', '=', this.key)
            .where('holder', '=', this.holder)
            .where('status', '=', 'running')
        : this.store.db.deleteFrom('idempotency_keys').where('user_id', '=', this.userId).where('key', '=', this.key).where('holder', '=', this.holder).where('status', '=', 'running');
    if (worthKeeping(answer.status) && this.digest() !== undefined) await mine('u').execute();
    else await mine('d').execute();
  }
}

/** The keys of every user, in the store; one per API node (they share the table). */
export class IdempotencyKeys {
  constructor(
    private readonly store: MetadataStore,
    private readonly log?: Log,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Claims `key` of user `userId` for this request, or says what the earlier request answered.
   * 422 when the key was used for another request, 409 while a live process answers it. A key
   * whose holder is dead (killed mid-request) is taken over; an answer older than KEEP_MS is
   * forgotten. The holder's liveness is asked before the write (on PostgreSQL it is a query of
   * its own, never made while holding the store's write lock), then checked unchanged in it.
   */
  async begin(userId: number, key: string, line: string, digest: string | undefined): Promise<Begun> {
    const read = (db: Db) =>
      db
        .selectFrom('idempotency_keys')
        .select(['fingerprint', 'status', 'holder', 'response_status', 'response', 'created_at'])
        .where('user_id', '=', userId)
        .where('key', '=', key)
        .executeTakeFirst();
    for (let round = 0; round < 5; round++) {
      const seen = await read(this.store.db);
      let dead: string | null | undefined;
      if (seen?.status === 'running') {
        // A live holder's request is under way (another request under its key is still 422); a
        // dead one's left no answer, so the key is free, for any request.
        if (await this.store.isLive(seen.holder)) {
          refuseOther(seen, key, line, digest);
          throw inUse(key);
        }
        dead = seen.holder;
      }
      const holder = `${this.store.instance}#idem-${crypto.randomBytes(6).toString('hex')}`;
      const begun = await this.store.write(async (trx): Promise<Begun | undefined> => {
        const row = await read(trx);
        const now = this.now();
        const claimed = () => ({ kind: 'claimed' as const, claim: new KeyClaim(this.store, userId, key, holder, line, digest) });
        const fresh = { fingerprint: `${digest ?? PENDING} ${line}`, status: 'running' as const, holder, response_status: null, response: null, created_at: now };
        if (!row) {
          await trx.insertInto('idempotency_keys').values({ user_id: userId, key, ...fresh }).execute();
          return claimed();
        }
        const expired = row.status === 'done' && Number(row.created_at) <= now - KEEP_MS;
        if (row.status === 'done' && !expired) {
          refuseOther(row, key, line, digest);
          const answer = { status: row.response_status!, body: row.response! };
          return digest === undefined ? { kind: 'check', answer, digest: parseFingerprint(row.fingerprint).digest } : { kind: 'replay', answer };
        }
        // A running key is taken over only from the holder found dead above; else look again.
        if (!expired && (dead === undefined || row.holder !== dead)) return undefined;
        await trx.updateTable('idempotency_keys').set(fresh).where('user_id', '=', userId).where('key', '=', key).execute();
        return claimed();
      });
      if (begun) return begun;
    }
    throw inUse(key);
  }

  /**
   * Answers a request under `key`: the first answer again (same status and body,
   * `Idempotent-Replayed: true`) for a retry, else `act`'s, kept or not as `worthKeeping` says.
   * `act` gets the claim (to `record` its answer inside its own transaction) and, for an upload,
   * the body to store, hashed as it streams. `replayed` hears of each replay (before it is sent).
   */
  async answer(
    req: FastifyRequest,
    reply: FastifyReply,
    key: string,
    request: KeyedRequest,
    act: (claim: KeyClaim, body: Readable | undefined) => Promise<StoredAnswer>,
    replayed?: (answer: StoredAnswer) => Promise<void>,
  ): Promise<FastifyReply> {
    const userId = req.principal!.userId;
    const begun = await this.begin(userId, key, request.line, 'digest' in request ? request.digest : undefined);
    if (begun.kind !== 'claimed') {
      if (begun.kind === 'check' && 'stream' in request) {
        const digest = await readDigest(request.stream, request.maxBytes);
        if (digest !== begun.digest) throw reused(key, 'the same method and path, another body');
      }
      try {
        await replayed?.(begun.answer);
      } catch (err) {
        // The answer stands whatever its follow-up does; the next retry tries that again.
        req.log.warn({ err }, 'a replayed Idempotency-Key answer\'s follow-up failed');
      }
      return sendReplay(reply, begun.answer);
    }
    const claim = begun.claim;
    const hashed = 'stream' in request ? hashing(request.stream) : undefined;
    if (hashed) claim.digest = () => hashed.digest();
    let answer: StoredAnswer;
    try {
      answer = await act(claim, hashed?.body);
    } catch (err) {
      const a = errorAnswer(err, req.id);
      await this.settle(claim, { status: a.status, body: a.body }, false);
      throw err;
    } finally {
      hashed?.dispose();
    }
    await this.settle(claim, answer, true);
    return reply.code(answer.status).type('application/json').send(answer.body);
  }

  /**
   * `claim.settle`, retried a few times in the background when the store fails now: the answer
   * still goes out (what the request did stands), and the key, still held by this live process,
   * answers its retries 409 until then.
   */
  private async settle(claim: KeyClaim, answer: StoredAnswer, succeeded: boolean): Promise<void> {
    try {
      await claim.settle(answer, succeeded);
    } catch (err) {
      this.log?.warn({ err, key: claim.key }, 'could not store an Idempotency-Key\'s answer; trying again');
      void (async () => {
        for (let i = 1; i <= 5; i++) {
          await new Promise((r) => setTimeout(r, 1000 * 2 ** i).unref());
          try {
            await claim.settle(answer, succeeded);
            return;
          } catch (e) {
            if (i === 5) this.log?.warn({ err: e, key: claim.key }, 'gave up storing an Idempotency-Key\'s answer; the key is freed when this process stops');
          }
        }
      })();
    }
  }

  /** Removes the keys past KEEP_MS now and every `everyMs` (on every API node; they share the table). Returns what stops it. */
  sweepEvery(everyMs = 10 * 60_000): () => void {
    const sweep = () =>
      void sweepIdempotencyKeys(this.store, this.now()).catch((err: unknown) => this.log?.warn({ err }, 'could not remove expired Idempotency-Keys; trying again later'));
    sweep();
    const timer = setInterval(sweep, everyMs);
    timer.unref();
    return () => clearInterval(timer);
  }
}

function sendReplay(reply: FastifyReply, answer: StoredAnswer): FastifyReply {
  reply.code(answer.status).header(REPLAYED_HEADER, 'true');
  if (answer.status >= 400) {
    try {
      const message = (JSON.parse(answer.body) as { error?: { message?: unknown } }).error?.message;
      if (typeof message === 'string') reply.header('x-error-message', headerSafe(message));
    } catch {
      // Not an error envelope: sent as it is.
    }
  }
  return reply.type('application/json').send(answer.body);
}

const SWEEP_BATCH = 5000;

/**
 * Removes the keys whose 24 h ended by `now`: answered ones, in batches (no write holds the
 * store long), and running ones whose holder is dead (a live one may still be uploading).
 * How many went.
 */
export async function sweepIdempotencyKeys(store: MetadataStore, now = Date.now()): Promise<number> {
  const cutoff = now - KEEP_MS;
  let removed = 0;
  for (;;) {
    const edge = await store.db
      .selectFrom('idempotency_keys')
      .select('created_at')
      .where('status', '=', 'done')
      .where('created_at', '<=', cutoff)
      .orderBy('created_at')
      .offset(SWEEP_BATCH - 1)
      .limit(1)
      .executeTakeFirst();
    const upTo = edge ? Number(edge.created_at) : cutoff;
    const r = await store.db.deleteFrom('idempotency_keys').where('status', '=', 'done').where('created_at', '<=', upTo).executeTakeFirst();
    removed += Number(r.numDeletedRows);
    if (!edge) break;
  }
  const holders = await store.db.selectFrom('idempotency_keys').select('holder').distinct().where('status', '=', 'running').where('created_at', '<=', cutoff).execute();
  for (const { holder } of holders) {
    if (await store.isLive(holder)) continue;
    let q = store.db.deleteFrom('idempotency_keys').where('status', '=', 'running').where('created_at', '<=', cutoff);
    q = holder === null ? q.where('holder', 'is', null) : q.where('holder', '=', holder);
    removed += Number((await q.executeTakeFirst()).numDeletedRows);
  }
  return removed;
}
