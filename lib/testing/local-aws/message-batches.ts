/**
 * The event source's batch requests on received messages (event-source.ts): delete what
 * succeeded, make failed messages visible again. Each request is counted in the
 * accounting (Lambda's pollers are billed to the queue owner). Neither throws: a message
 * left invisible holds its FIFO group back for the whole visibility timeout, so the
 * caller learns exactly which messages were not deleted or not released, and why.
 */
import { ChangeMessageVisibilityBatchCommand, DeleteMessageBatchCommand, type Message, type SQSClient } from '@aws-sdk/client-sqs';
import type { AwsAccounting } from '../../aws/cost/accounting.ts';

export interface BatchTarget {
  readonly sqs: SQSClient;
  readonly queueUrl: string;
  readonly accounting: AwsAccounting;
}

/** Tries of a release (ChangeMessageVisibility 0), the n-th after n x the backoff. */
export const RELEASE_ATTEMPTS = 4;
const RELEASE_BACKOFF_MS = 200;

interface BatchFailure {
  Id?: string;
  Code?: string;
  Message?: string;
}

/** DeleteMessageBatch in tens: the messages not deleted (a failed request, or entries SQS reported failed) and the errors. */
export async function deleteMessages(t: BatchTarget, messages: readonly Message[]): Promise<{ undeleted: Message[]; errors: Error[] }> {
  const undeleted: Message[] = [];
  const errors: Error[] = [];
  for (let i = 0; i < messages.length; i += 10) {
    const group = messages.slice(i, i + 10);
    try {
      const out = await send(t, 'DeleteMessageBatch', new DeleteMessageBatchCommand({ QueueUrl: t.queueUrl, Entries: group.map((m, j) => ({ Id: String(j), ReceiptHandle: m.ReceiptHandle! })) }));
      const failed = out.Failed ?? [];
      if (failed.length) errors.push(new Error(`DeleteMessageBatch failed for ${failed.length} message(s): ${failed[0].Message}`));
      undeleted.push(...group.filter((_, j) => failed.some((f) => f.Id === String(j))));
    } catch (e) {
      errors.push(e as Error);
      undeleted.push(...group);
    }
  }
  return { undeleted, errors };
}

/**
 * ChangeMessageVisibility 0 for `messages`, in reverse (fauxqs puts each released message
 * at the front of its group, so the group keeps its order), tried RELEASE_ATTEMPTS times.
 * A receipt handle SQS no longer knows (the message was deleted, or came back on its own)
 * needs nothing more. Returns how many are still invisible, and the last error.
 */
export async function releaseMessages(t: BatchTarget, messages: readonly Message[]): Promise<{ left: number; why: string }> {
  let entries = [...messages].reverse().map((m, j) => ({ Id: String(j), ReceiptHandle: m.ReceiptHandle!, VisibilityTimeout: 0 }));
  let why = '';
  for (let attempt = 0; entries.length && attempt < RELEASE_ATTEMPTS; attempt++) {
    if (attempt > 0) await new Promise((r) => setTimeout(r, RELEASE_BACKOFF_MS * attempt));
    const left: typeof entries = [];
    for (let i = 0; i < entries.length; i += 10) {
      const slice = entries.slice(i, i + 10);
      try {
        const out = await send(t, 'ChangeMessageVisibilityBatch', new ChangeMessageVisibilityBatchCommand({ QueueUrl: t.queueUrl, Entries: slice }));
        const retry = (out.Failed ?? []).filter((f) => !/ReceiptHandleIsInvalid|MessageNotInflight/i.test(`${f.Code} ${f.Message}`));
        if (retry.length) why = `${retry[0].Code ?? ''} ${retry[0].Message ?? ''}`.trim();
        left.push(...slice.filter((e) => retry.some((f) => f.Id === e.Id)));
      } catch (e) {
        why = (e as Error).message;
        left.push(...slice);
      }
    }
    entries = left;
  }
  return { left: entries.length, why };
}

async function send(t: BatchTarget, operation: string, command: DeleteMessageBatchCommand | ChangeMessageVisibilityBatchCommand): Promise<{ Failed?: BatchFailure[] }> {
  try {
    const out = await t.sqs.send(command as DeleteMessageBatchCommand);
    t.accounting.record('sqs', operation, { requests: 1, items: command.input.Entries?.length ?? 0, estimatedReadUnits: 1 });
    return out;
  } catch (e) {
    t.accounting.record('sqs', operation, { requests: 1, errors: 1, estimatedReadUnits: 1 });
    throw e;
  }
}
