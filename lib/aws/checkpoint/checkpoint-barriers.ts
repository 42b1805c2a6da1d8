/**
 * Injecting barrier `e` into the source partitions on AWS: one message per (source,
 * partition) in the source stage's FIFO queue, MessageGroupId = partition, so it lands
 * behind everything the ingest function enqueued there before it (per-group order).
 *
 *   {"v":1,"k":"i","s":source,"r":[],"b":{"epoch":e,"baseEpoch":b,"full":[...],"savepoint":false}}
 *
 * It is an ingest message without records plus `b`, so it takes an SQS sequence number
 * in the source channel like any input (the runtime orders source channels by it). The
 * decoder must turn `b` into the envelope's barrier (sqs-codec.ts sourceEnvelope:
 * `barrier: body.b && { ...body.b, positions: { [`${source}#${partition}`]: <records before it> } }`);
 * until it does, the message is an empty input and the epoch times out harmlessly.
 *
 * Deduplication ids are deterministic per (job, stage, partition, source, epoch), so a
 * retried inject step sends nothing new within SQS's 5-minute window; after it, a
 * repeated barrier is dropped by the partition (an epoch at or below its last barrier,
 * or a channel that already delivered it).
 */
import type { BarrierTarget } from '../../checkpoint/protocol.ts';
import { dedupId, sqsSafeJson } from '../sqs/sqs-codec.ts';
import type { QueueResolver } from '../sqs/sqs-queues.ts';
import type { OutgoingMessage, SqsTransport } from '../sqs/sqs-transport.ts';

export interface BarrierSpec {
  readonly epoch: number;
  readonly baseEpoch: number;
  readonly full: readonly string[];
  readonly savepoint: boolean;
}

export function barrierBody(source: string, barrier: BarrierSpec): string {
  return sqsSafeJson(JSON.stringify({ v: 1, k: 'i', s: source, r: [], b: barrier }));
}

/** The barrier of a body built by barrierBody, or undefined for any other body. */
export function barrierOfBody(body: string): (BarrierSpec & { readonly source: string }) | undefined {
  const b = JSON.parse(body) as { k?: string; s?: string; b?: BarrierSpec };
  return b.k === 'i' && b.b ? { ...b.b, source: b.s! } : undefined;
}

export function barrierMessage(job: string, target: BarrierTarget, barrier: BarrierSpec): OutgoingMessage {
  const body = barrierBody(target.source, barrier);
  return {
    groupId: String(target.partition),
    body,
    bytes: Buffer.byteLength(body),
    dedupId: dedupId(`${job}/${target.stage}/${target.partition}`, [`barrier:${target.source}:${barrier.epoch}`]),
  };
}

/** Send barrier messages to every target, grouped per stage queue; throws SqsSendError when any did not go out. */
export async function injectBarriers(transport: SqsTransport, queues: QueueResolver, job: string, targets: readonly BarrierTarget[], barrier: BarrierSpec): Promise<void> {
  const byStage = new Map<number, OutgoingMessage[]>();
  for (const t of targets) {
    let list = byStage.get(t.stage);
    if (!list) byStage.set(t.stage, (list = []));
    list.push(barrierMessage(job, t, barrier));
  }
  await Promise.all([...byStage].map(async ([stage, messages]) => transport.sendAll(await queues.queueUrl(stage), messages, true)));
}
