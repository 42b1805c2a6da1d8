/**
 * Idempotency-Key semantics shared by both ingestion endpoints (lib/aws/ingest/ingest-handler.ts,
 * lib/local/ingest-server.ts). A keyed request is remembered as its body's fingerprint,
 * then its answer; a later request with the same key is decided against that memory:
 *
 * - nothing remembered (or expired): new, process it;
 * - another fingerprint: 409, nothing enqueued (the key names the first body until it expires);
 * - the same fingerprint, answered: the first answer again, with `replay: true` and
 *   `Idempotent-Replayed: true`, nothing enqueued;
 * - the same fingerprint, no answer yet (still in flight, or its outcome was unknown, or
 *   its process died): resend, as long as the queue's own deduplication still covers the
 *   first attempt (`resendWithinMs`); past that, 409 rather than a possible duplicate.
 *
 * Pure: the memory (DynamoDB, the embedded input log) belongs to the callers.
 */
import { createHash } from 'node:crypto';
import type { IngestAnswer, ShedEvent } from './ingest-validation.ts';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const REPLAYED_HEADER = 'Idempotent-Replayed';
export const MAX_KEY_LENGTH = 255;
/** How long a key is remembered by default. */
export const DEFAULT_RETENTION_MS = 24 * 3600_000;

/** sha256 (hex) of the route (stream) and the raw body bytes: the same request, byte for byte, on the same stream. */
export function bodyFingerprint(stream: string, body: Uint8Array): string {
  return createHash('sha256').update(`POST /streams/${encodeURIComponent(stream)}/events\n`).update(body).digest('hex');
}

/** The answer worth remembering: one that says what became of the events for good. */
export interface RememberedAnswer {
  readonly status: number;
  readonly body: Record<string, unknown>;
  readonly headers?: Readonly<Record<string, string>>;
}

export type Remembered =
  /** No answer yet: in flight, or its outcome unknown. `shed`: the indexes load shedding dropped from the attempt, which a resend drops again. */
  | { readonly state: 'pending'; readonly fingerprint: string; readonly startedAt: number; readonly expiresAt: number; readonly stream?: string; readonly shed?: readonly ShedEvent[] }
  | { readonly state: 'done'; readonly fingerprint: string; readonly startedAt: number; readonly expiresAt: number; readonly stream?: string; readonly answer: RememberedAnswer };

export type Decision =
  | { readonly kind: 'new' }
  /** `shed`: what the first attempt shed (a resend sends exactly the events it sent). */
  | { readonly kind: 'resend'; readonly startedAt: number; readonly shed?: readonly ShedEvent[] }
  | { readonly kind: 'replay'; readonly answer: IngestAnswer }
  | { readonly kind: 'conflict'; readonly answer: IngestAnswer }
  | { readonly kind: 'unresolved'; readonly answer: IngestAnswer };

export interface DecideOptions {
  /** Pending requests older than this are not resent (the queue would not deduplicate them); undefined: always resend. */
  readonly resendWithinMs?: number;
  /** What deduplicates a resend, for the message (e.g. "SQS's 5-minute deduplication window"). */
  readonly dedupName?: string;
  /** The request's stream: a conflict then says whether the stream or the body differs. */
  readonly stream?: string;
}

/** What to do with a request carrying `key` and `fingerprint`, given what is remembered of the key. */
export function decide(key: string, remembered: Remembered | undefined, fingerprint: string, now: number, options: DecideOptions = {}): Decision {
  if (!remembered || remembered.expiresAt <= now) return { kind: 'new' };
  if (remembered.fingerprint !== fingerprint) {
    const known = options.stream !== undefined && remembered.stream !== undefined;
    const differs = !known ? undefined : remembered.stream !== options.stream ? { first: remembered.stream!, now: options.stream! } : 'body';
    return { kind: 'conflict', answer: conflictAnswer(key, remembered.expiresAt, differs) };
  }
  if (remembered.state === 'done') return { kind: 'replay', answer: replayAnswer(remembered.answer) };
  const within = options.resendWithinMs;
  if (within === undefined || now - remembered.startedAt < within) return { kind: 'resend', startedAt: remembered.startedAt, ...(remembered.shed ? { shed: remembered.shed } : {}) };
  return { kind: 'unresolved', answer: unresolvedAnswer(key, remembered.startedAt, options.dedupName ?? 'the queue\'s deduplication window') };
}

/**
 * Whether an answer is final for its key: something was enqueued for good, or the request
 * itself was refused for good. A 429, or a 5xx saying nothing was enqueued, is not: a retry
 * with the same key must be tried for real. 503 outcome_unknown is not final either (pending).
 */
export function isFinal(answer: IngestAnswer): boolean {
  return answer.status < 500 && answer.status !== 429;
}

export function remembered(answer: IngestAnswer): RememberedAnswer {
  return { status: answer.status, body: answer.body, ...(answer.headers ? { headers: answer.headers } : {}) };
}

export function replayAnswer(first: RememberedAnswer): IngestAnswer {
  return { status: first.status, body: { ...first.body, replay: true }, headers: { ...first.headers, [REPLAYED_HEADER]: 'true' } };
}

/** `differs`: what is not the same as in the first request, when known. */
export function conflictAnswer(key: string, heldUntil: number, differs?: 'body' | { first: string; now: string }): IngestAnswer {
  const until = new Date(heldUntil).toISOString();
  const what =
    differs === 'body' ? 'with another body (same stream, other bytes)' : differs ? `on stream "${differs.first}", and this request is for stream "${differs.now}"` : 'with another body (or another stream)';
  return {
    status: 409,
    body: {
      error: 'idempotency_key_reused',
      message: `Idempotency-Key "${key}" was first used ${what}; nothing was enqueued. The key is held for its first request until ${until}: send this body with a new key`,
      idempotencyKey: key,
      heldUntil: until,
    },
  };
}

function unresolvedAnswer(key: string, startedAt: number, dedupName: string): IngestAnswer {
  return {
    status: 409,
    body: {
      error: 'idempotency_outcome_unknown',
      message: `the first request with Idempotency-Key "${key}" (${new Date(startedAt).toISOString()}) has no recorded outcome and ${dedupName} has passed: resending could enqueue its events twice, so nothing was enqueued. Its events may or may not be enqueued: check the results, then send what is missing with a new key`,
      idempotencyKey: key,
      startedAt: new Date(startedAt).toISOString(),
    },
  };
}

/** The 400 for a header that cannot be a key; undefined when `key` is one (1 to 255 visible ASCII characters). */
export function checkKey(key: string): IngestAnswer | undefined {
  if (key.length >= 1 && key.length <= MAX_KEY_LENGTH && /^[\x21-\x7e]+$/.test(key)) return undefined;
  const shown = key.length > 40 ? `${JSON.stringify(key.slice(0, 40))}... (${key.length} characters)` : JSON.stringify(key);
  return {
    status: 400,
    body: { error: 'bad_idempotency_key', message: `header Idempotency-Key: expected 1 to ${MAX_KEY_LENGTH} visible ASCII characters (no spaces), received ${shown}` },
  };
}
