/**
 * What the operator handler does with a message group that failed for a reason other
 * than user code (DynamoDB, SQS or S3 throttling, a timeout, a stale runtime that fails
 * again): the group backs off instead of coming back after the visibility timeout.
 *
 * Every delivery adds one to a message's ApproximateReceiveCount, and SQS moves a message
 * received more than the queue's maxReceiveCount times to the DLQ. A group that fails
 * because the infrastructure does would reach that count with its input unprocessed, and
 * the partition would go on past the gap. So:
 *
 * - the failed messages' visibility is changed (ChangeMessageVisibilityBatch) to a bounded
 *   exponential backoff of their receive count: `baseSeconds` doubling per receive up to
 *   `maxSeconds`, with deterministic "equal" jitter (half fixed, half from a hash of the
 *   partition, the receive count and `seed`), so partitions throttled together spread out;
 * - the receive limit (DEFAULT_MAX_RECEIVE_COUNT) is for messages that can never be
 *   decoded; a record whose user code keeps throwing is parked by the handler after its
 *   attempts (record-attempts.ts), long before;
 * - once a group comes within `stallReserve` receives of the limit it is stalled: it stays
 *   in the queue with the visibility `stalledSeconds`, the handler logs an error and emits
 *   `stalledPartitions`, which an alarm watches (infra/monitoring.ts). A stalled partition
 *   is an incident for someone to resolve; it is still tried once per `stalledSeconds`
 *   and resumes by itself when the failure clears.
 *
 * With the defaults (100 receives, 2 s doubling to 15 min, 10 receives in reserve, 3 h
 * apart) a group stalls after 15 to 20 hours of failures, and SQS would move it about
 * 33 hours later, within the queues' retention of 4 days (infra/props.ts QUEUE_RETENTION).
 */
import { ChangeMessageVisibilityBatchCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { SQSRecord } from 'aws-lambda';
import { ConfigError } from '../../errors.ts';
import type { AwsAccounting } from '../cost/accounting.ts';

/** The stage queues' redrive maxReceiveCount, and the operator handler's default: infra/stages.ts uses this. */
export const DEFAULT_MAX_RECEIVE_COUNT = 100;
/** SQS's largest visibility timeout (12 hours). */
export const MAX_VISIBILITY_SECONDS = 43_200;

export interface GroupBackoffOptions {
  /** The first backoff, seconds (default 2). */
  readonly baseSeconds?: number;
  /** The longest backoff before a stall, seconds (default 900). */
  readonly maxSeconds?: number;
  /** Receives before the queue's limit at which a failing group stalls (default 10). */
  readonly stallReserve?: number;
  /** A stalled group's visibility, seconds (default 10,800: tried again every 3 hours). */
  readonly stalledSeconds?: number;
  /** Mixed into the jitter (default 0). */
  readonly seed?: number;
}

export interface ResolvedGroupBackoff {
  readonly baseSeconds: number;
  readonly maxSeconds: number;
  readonly stallReserve: number;
  readonly stalledSeconds: number;
  readonly seed: number;
}

export interface BackoffDecision {
  /** The visibility to set, seconds. */
  readonly seconds: number;
  /** Within stallReserve receives of maxReceiveCount. */
  readonly stalled: boolean;
  /** The receive count the decision used (the highest of the messages). */
  readonly receives: number;
}

export function resolveGroupBackoff(o: GroupBackoffOptions = {}, maxReceiveCount: number): ResolvedGroupBackoff {
  const r = {
    baseSeconds: o.baseSeconds ?? 2,
    maxSeconds: o.maxSeconds ?? 900,
    stallReserve: o.stallReserve ?? 10,
    stalledSeconds: o.stalledSeconds ?? 10_800,
    seed: o.seed ?? 0,
  };
  const int = (field: string, v: number, min: number, max: number) => {
    if (!Number.isInteger(v) || v < min || v > max) throw new ConfigError(`backoff.${field}`, `an integer from ${min} to ${max}`, String(v));
  };
  int('baseSeconds', r.baseSeconds, 1, MAX_VISIBILITY_SECONDS);
  int('maxSeconds', r.maxSeconds, r.baseSeconds, MAX_VISIBILITY_SECONDS);
  int('stalledSeconds', r.stalledSeconds, r.maxSeconds, MAX_VISIBILITY_SECONDS);
  int('stallReserve', r.stallReserve, 1, maxReceiveCount - 1);
  if (!Number.isFinite(r.seed)) throw new ConfigError('backoff.seed', 'a finite number', String(r.seed));
  return r;
}

/**
 * The visibility for a group whose messages were received `receives` times (the highest
 * count) and failed on the infrastructure: exponential with equal jitter, or the stall.
 */
export function backoffFor(receives: number, maxReceiveCount: number, o: ResolvedGroupBackoff, key: string): BackoffDecision {
  const r = Math.max(1, Math.floor(receives));
  if (r >= maxReceiveCount - o.stallReserve) return { seconds: o.stalledSeconds, stalled: true, receives: r };
  const full = Math.min(o.maxSeconds, o.baseSeconds * 2 ** Math.min(r - 1, 30));
  const jitter = unitHash(`${o.seed}\u0000${key}\u0000${r}`);
  const seconds = Math.max(o.baseSeconds, Math.min(o.maxSeconds, Math.round(full / 2 + (full / 2) * jitter)));
  return { seconds, stalled: false, receives: r };
}

/** The highest ApproximateReceiveCount of the messages (1 when absent). */
export function receivesOf(records: readonly SQSRecord[]): number {
  return records.reduce((n, r) => Math.max(n, Number(r.attributes.ApproximateReceiveCount ?? '1') || 1), 1);
}

export interface VisibilityOutcome {
  /** Messages whose visibility was changed. */
  readonly changed: number;
  /** Entries SQS refused, or the whole request's error. */
  readonly failures: readonly string[];
}

/**
 * Set the visibility of received messages (at most 10 per request, as one group's
 * messages of a Lambda batch are). Never throws: a message whose visibility was not
 * changed comes back after the queue's visibility timeout, which costs one receive.
 */
export async function changeVisibility(sqs: SQSClient, queueUrl: string, records: readonly SQSRecord[], seconds: number, accounting?: AwsAccounting): Promise<VisibilityOutcome> {
  let changed = 0;
  const failures: string[] = [];
  for (let i = 0; i < records.length; i += 10) {
    const slice = records.slice(i, i + 10);
    try {
      const out = await sqs.send(
        new ChangeMessageVisibilityBatchCommand({ QueueUrl: queueUrl, Entries: slice.map((r, j) => ({ Id: String(j), ReceiptHandle: r.receiptHandle, VisibilityTimeout: seconds })) }),
      );
      accounting?.record('sqs', 'ChangeMessageVisibilityBatch', { requests: 1, items: slice.length, estimatedReadUnits: 1 });
      changed += out.Successful?.length ?? 0;
      for (const f of out.Failed ?? []) failures.push(`${f.Code ?? 'Failed'}: ${f.Message ?? ''}`.trim());
    } catch (e) {
      accounting?.record('sqs', 'ChangeMessageVisibilityBatch', { requests: 1, errors: 1, estimatedReadUnits: 1 });
      failures.push(`${(e as Error).name}: ${(e as Error).message}`);
    }
  }
  return { changed, failures };
}

/** A number in [0, 1) from a string (FNV-1a, then a 32-bit avalanche). */
function unitHash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return (h >>> 0) / 2 ** 32;
}
