/**
 * What a local-AWS run parked: the stage DLQs drained into reports. A DLQ holds two kinds
 * of message: a record the operator handler parked with its error (an envelope of kind
 * dead letter), and a whole message SQS moved there after maxReceiveCount receives.
 */
import { DeleteMessageBatchCommand, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { AwsAccounting } from '../../aws/cost/accounting.ts';
import { type DeadLetterMessage, decodeBody } from '../../aws/sqs/sqs-codec.ts';
import type { StageQueues } from '../../aws/sqs/sqs-queues.ts';
import type { DeadLetter } from '../../transport/envelope.ts';

/** A record parked by the operator handler, or a message SQS redrove after maxReceiveCount. */
export type DeadLetterReport = ({ kind: 'deadLetter' } & DeadLetterMessage) | { kind: 'redriven'; stage: number; partition?: number; messageId: string; receives: string; body: string };

/**
 * Read and delete every message of the stages' DLQs; requests are counted in `overhead`.
 * `keep` sees each batch before it is deleted (a checkpointed run writes it to its
 * dead-letter file first, so a crash in between loses nothing).
 */
export async function drainDeadLetters(sqs: SQSClient, queues: readonly StageQueues[], overhead: AwsAccounting, keep?: (reports: readonly DeadLetterReport[]) => void): Promise<DeadLetterReport[]> {
  const out: DeadLetterReport[] = [];
  for (const [stage, q] of queues.entries()) {
    for (;;) {
      const got = await sqs.send(new ReceiveMessageCommand({ QueueUrl: q.dlqUrl, MaxNumberOfMessages: 10, MessageSystemAttributeNames: ['All'] }));
      overhead.record('sqs', 'ReceiveMessage', { requests: 1 });
      const messages = got.Messages ?? [];
      if (!messages.length) break;
      const batch = messages.map((m): DeadLetterReport => {
        try {
          const body = decodeBody(m.Body ?? '', m.MessageId);
          return body.k === 'd' ? { kind: 'deadLetter', ...body } : redriven(stage, m);
        } catch {
          return redriven(stage, m);
        }
      });
      keep?.(batch);
      out.push(...batch);
      // Drained as read: fauxqs hands out one message per group while any is in flight.
      await sqs.send(new DeleteMessageBatchCommand({ QueueUrl: q.dlqUrl, Entries: messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle! })) }));
      overhead.record('sqs', 'DeleteMessageBatch', { requests: 1 });
    }
  }
  return out;
}

function redriven(stage: number, m: { MessageId?: string; Body?: string; Attributes?: Record<string, string> }): DeadLetterReport {
  const group = m.Attributes?.MessageGroupId;
  return { kind: 'redriven', stage, ...(group !== undefined && /^\d+$/.test(group) ? { partition: Number(group) } : {}), messageId: m.MessageId ?? '?', receives: m.Attributes?.ApproximateReceiveCount ?? '?', body: (m.Body ?? '').slice(0, 200) };
}

/** A report as `sluice run` prints dead letters: a message SQS redrove whole reads like a parked record (what, why, how often). */
export function asDeadLetter(d: DeadLetterReport): DeadLetter {
  if (d.kind === 'deadLetter') return d;
  return {
    operator: `(stage ${d.stage} message)`,
    channel: d.messageId,
    seq: 0,
    index: 0,
    record: { value: d.body, timestamp: 0 },
    error: `SQS moved the whole message to the dead-letter queue after ${d.receives} receives (the function never acknowledged it)`,
    attempts: Number(d.receives) || 0,
  };
}
