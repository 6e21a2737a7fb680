import type { CallResult } from './calls.ts';
import type { CallError, CallFailure, CallMetadata, FailureMetadata } from '../../client/src/types.ts';

/**
 * A call's answer as JSON (spec 2.2): the envelope a sync call answers with, and that an async
 * call (output=void) keeps for GET /v1/requests/:id. Framework-free: the HTTP routes and the
 * async runner (asyncCalls.ts) render through it alike.
 */

const seconds = (ms: number) => Math.round(ms * 1000) / 1_000_000;

export function describeFailure(r: CallResult, timeoutS: number): CallError & { stacktrace: string } {
  const o = r.outcome;
  const ref = r.target ? `algo://${r.target.algorithm.owner}/${r.target.algorithm.name}` : 'the algorithm';
  switch (o.kind) {
    case 'algorithm_error':
      return o.error;
    case 'timeout':
      return { message: `${ref} timed out after ${timeoutS} seconds`, error_type: 'TimeoutError', stacktrace: '' };
    case 'out_of_memory':
      return { message: `${ref} ran out of memory`, error_type: 'OutOfMemoryError', stacktrace: '' };
    case 'crashed':
      return {
        message: o.signal ? `${ref} was killed by signal ${o.signal}` : o.exitCode !== null ? `${ref} exited with code ${o.exitCode}` : `${ref} broke the runtime protocol and was stopped`,
        error_type: 'SystemExit',
        stacktrace: '',
      };
    case 'result':
      throw new Error('not a failure');
  }
}

/** The JSON text of a result, by content type; undefined when a json result is not JSON. */
export function resultJson(contentType: string, body: Buffer): string | undefined {
  switch (contentType) {
    case 'void':
      return 'null';
    case 'text':
      return JSON.stringify(body.toString('utf8'));
    case 'binary':
      return `"${body.toString('base64')}"`;
    default: {
      const text = body.toString('utf8');
      try {
        JSON.parse(text);
      } catch {
        return undefined;
      }
      return text;
    }
  }
}

/**
 * Spec 2.2: `{result, metadata}` or `{error, metadata}` (the wire's CallSuccess and
 * CallFailure), as JSON text.
 */
export function envelope(r: CallResult, timeoutS: number): string {
  const o = r.outcome;
  if (o.kind === 'result') {
    const json = resultJson(o.contentType, o.body);
    if (json !== undefined) {
      const contentType: CallMetadata['content_type'] = o.contentType;
      // The usual answer, written as it stands: the same text JSON.stringify makes of it.
      if (!r.showStdout) return `{"result":${json},"metadata":{"content_type":"${contentType}","duration":${JSON.stringify(seconds(o.durationMs))}}}`;
      const metadata: CallMetadata = { content_type: contentType, duration: seconds(o.durationMs) };
      addStdout(metadata, r);
      return `{"result":${json},"metadata":${JSON.stringify(metadata)}}`;
    }
    r = { ...r, outcome: { ...o, kind: 'algorithm_error', error: { message: 'the algorithm returned a json result that is not JSON', error_type: 'AlgorithmError', stacktrace: '' } } };
  }
  const f = describeFailure(r, timeoutS);
  const error: CallError = { message: f.message, error_type: f.error_type };
  if (r.showTrace && f.stacktrace) {
    error.stacktrace = f.stacktrace;
    error.stack_trace = f.stacktrace; // the Python client reads this spelling
  }
  const metadata: FailureMetadata = { duration: seconds(r.outcome.durationMs) };
  addStdout(metadata, r);
  return JSON.stringify({ error, metadata } satisfies CallFailure);
}

function addStdout(metadata: FailureMetadata, r: CallResult): void {
  if (!r.showStdout) return;
  metadata.stdout = r.outcome.stdout;
  if (r.outcome.stdoutTruncated) metadata.stdout_truncated = true;
}

