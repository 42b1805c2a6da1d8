import { describe, expect, it } from 'vitest';
import { bodyFingerprint, checkKey, decide, isFinal, type Remembered, replayAnswer } from '../../lib/transport/idempotency.ts';

const body = (s: string) => new TextEncoder().encode(s);
const fp = bodyFingerprint('orders', body('[{"id":1}]'));
const answer = { status: 202, body: { accepted: 1, rejected: [], message: 'accepted 1 event' } };
const pending = (startedAt: number, fingerprint = fp): Remembered => ({ state: 'pending', fingerprint, startedAt, expiresAt: startedAt + 86_400_000 });
const done = (fingerprint = fp): Remembered => ({ state: 'done', fingerprint, startedAt: 0, expiresAt: 86_400_000, answer });

describe('body fingerprint', () => {
  it('covers every byte of the body and the stream', () => {
    expect(bodyFingerprint('orders', body('[{"id":1}]'))).toBe(fp);
    expect(bodyFingerprint('orders', body('[{"id":1} ]'))).not.toBe(fp);
    expect(bodyFingerprint('clicks', body('[{"id":1}]'))).not.toBe(fp);
    // The stream is delimited: "a" + "b..." is not "ab" + "...".
    expect(bodyFingerprint('a', body('b'))).not.toBe(bodyFingerprint('ab', body('')));
  });
});

describe('the decision for a keyed request', () => {
  const opts = { resendWithinMs: 240_000, dedupName: "SQS's deduplication window" };
  const cases: [string, Remembered | undefined, string, number, string][] = [
    ['nothing remembered', undefined, fp, 10, 'new'],
    ['remembered, expired', { ...done(), expiresAt: 10 }, fp, 10, 'new'],
    ['same body, answered', done(), fp, 10, 'replay'],
    ['other body, answered', done('other'), fp, 10, 'conflict'],
    ['other body, in flight', pending(0, 'other'), fp, 10, 'conflict'],
    ['same body, in flight or outcome unknown', pending(0), fp, 239_999, 'resend'],
    ['same body, unknown past the dedup window', pending(0), fp, 240_000, 'unresolved'],
  ];
  it.each(cases)('%s', (_name, memory, fingerprint, now, kind) => {
    expect(decide('k1', memory, fingerprint, now, opts).kind).toBe(kind);
  });

  it('without a resend bound, a pending request is always resent', () => {
    expect(decide('k1', pending(0), fp, 86_399_999, { resendWithinMs: undefined }).kind).toBe('resend');
  });

  it('a replay answers as the first did, saying it is one', () => {
    const d = decide('k1', done(), fp, 10);
    expect(d).toEqual({ kind: 'replay', answer: { status: 202, body: { ...answer.body, replay: true }, headers: { 'Idempotent-Replayed': 'true' } } });
    expect(replayAnswer({ status: 400, body: { error: 'all_events_rejected' }, headers: { A: 'b' } }).headers).toEqual({ A: 'b', 'Idempotent-Replayed': 'true' });
  });

  it('a conflict names the key and until when it is held', () => {
    const d = decide('k1', done('other'), fp, 10);
    if (d.kind !== 'conflict') throw new Error(d.kind);
    expect(d.answer.status).toBe(409);
    expect(d.answer.body).toMatchObject({ error: 'idempotency_key_reused', idempotencyKey: 'k1', heldUntil: '1970-01-02T00:00:00.000Z' });
    expect(d.answer.body.message).toBe('Idempotency-Key "k1" was first used with another body (or another stream); nothing was enqueued. The key is held for its first request until 1970-01-02T00:00:00.000Z: send this body with a new key');
  });

  it('a conflict says what differs when the streams are known', () => {
    const first: Remembered = { ...done('other'), stream: 'orders' };
    const onOther = decide('k1', first, fp, 10, { stream: 'clicks' });
    expect(onOther.kind === 'conflict' && onOther.answer.body.message).toMatch(/^Idempotency-Key "k1" was first used on stream "orders", and this request is for stream "clicks"; nothing was enqueued/);
    const sameStream = decide('k1', first, fp, 10, { stream: 'orders' });
    expect(sameStream.kind === 'conflict' && sameStream.answer.body.message).toMatch(/^Idempotency-Key "k1" was first used with another body \(same stream, other bytes\)/);
  });

  it('an unresolved request says why nothing was sent', () => {
    const d = decide('k1', pending(0), fp, 300_000, opts);
    expect(d.kind === 'unresolved' && d.answer.body.message).toMatch(/^the first request with Idempotency-Key "k1" \(1970-01-01T00:00:00.000Z\) has no recorded outcome and SQS's deduplication window has passed/);
  });
});

describe('final answers and keys', () => {
  it('remembers what is final; a 429 or a 5xx leaves the key to a retry', () => {
    expect([202, 400, 413, 429, 500, 503].map((status) => isFinal({ status, body: {} }))).toEqual([true, true, true, false, false, false]);
  });

  it('refuses keys that are empty, too long or not visible ASCII, naming the header', () => {
    expect(checkKey('run-1:1-500')).toBeUndefined();
    expect(checkKey('a'.repeat(255))).toBeUndefined();
    expect(checkKey('')?.body.message).toBe('header Idempotency-Key: expected 1 to 255 visible ASCII characters (no spaces), received ""');
    expect(checkKey('a b')?.status).toBe(400);
    expect(checkKey('é')?.status).toBe(400);
    expect(checkKey('a'.repeat(256))?.body.message).toMatch(/received "a{40}"\.\.\. \(256 characters\)$/);
  });
});
