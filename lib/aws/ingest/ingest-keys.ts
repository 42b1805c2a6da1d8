/**
 * Source partitions of ingested requests. Stage queues deduplicate per message group
 * (high-throughput FIFO), so a resend is deduplicated only if it lands in the partition
 * the first attempt used: a keyed request's partition is its key's hash, and a keyless
 * one that may need a resend is given a key minted for the partition it went to.
 */
import { randomUUID } from 'node:crypto';
import { type Key, keyToString } from '../../api/types.ts';
import { keyGroupOfString, partitionOfKeyGroup } from '../../graph/keygroups.ts';
import { type IngestAnswer, plural, type RejectedEvent } from '../../transport/ingest-validation.ts';

/** A resend reuses the first attempt's arrival this long: inside SQS's 5-minute deduplication window, with a margin. */
export const RESEND_WITHIN_MS = 4 * 60_000;


export function partitionOf(key: Key, partitions: number, maxParallelism: number): number {
  return partitionOfKeyGroup(keyGroupOfString(keyToString(key), maxParallelism), partitions, maxParallelism);
}

/**
 * A fresh Idempotency-Key whose hash picks partition `p`: a client resending with it
 * lands in the message group of the first attempt. About `partitions` hashes on average.
 */
export function keyOfPartition(p: number, partitions: number, maxParallelism: number, base: string = randomUUID()): string {
  if (p < 0 || p >= partitions) throw new RangeError(`partition: expected 0 to ${partitions - 1}, received ${p}`);
  for (let i = 0; ; i++) {
    const key = `${base}.${i.toString(36)}`;
    if (partitionOf(key, partitions, maxParallelism) === p) return key;
  }
}

/** 503 when SQS's answer was lost for some events: the key to resend them with, and until when a resend is deduplicated. */
export function outcomeUnknown(key: string, unsure: number[], accepted: number, rejected: RejectedEvent[], retryAfterMs: number): IngestAnswer {
  return {
    status: 503,
    body: {
      error: 'outcome_unknown',
      message: `SQS did not confirm ${plural(unsure.length, 'event')}; they may be enqueued. Send the same body again with header "Idempotency-Key: ${key}" within ${RESEND_WITHIN_MS / 60_000} minutes: nothing will be enqueued twice`,
      idempotencyKey: key,
      accepted,
      unconfirmed: unsure.sort((a, b) => a - b),
      rejected,
    },
    headers: { 'Retry-After': String(Math.ceil(retryAfterMs / 1000)) },
  };
}
