/**
 * Shared by the AWS adapter tests: SDK clients for the local servers (endpoints from
 * the global setup), unique resource names, ingest requests and an SQS client that
 * records (and can lose the answers of) what it sends, and a deterministic stand-in for Lambda's
 * SQS event source that can simulate a crashed invocation (the handler's answer is
 * lost, its container gone, the batch visible again).
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { ChangeMessageVisibilityBatchCommand, DeleteMessageBatchCommand, type Message, ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { APIGatewayProxyEventV2, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { inject } from 'vitest';
import { sqsRecord } from '../../lib/testing/local-aws/lambda-event.ts';
import type { StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { decodeBody } from '../../lib/aws/sqs/sqs-codec.ts';

/**
 * The global setup's servers as the SDK's own endpoint variables and credentials, for a
 * child process (the CLI starts no servers of its own then, and they outlive a killed run,
 * as AWS does).
 */
export function localServerEnv(): NodeJS.ProcessEnv {
  const { accessKeyId, secretAccessKey } = inject('awsCredentials');
  return {
    AWS_ENDPOINT_URL_DYNAMODB: inject('dynamodbEndpoint'),
    AWS_ENDPOINT_URL_SQS: inject('fauxqsEndpoint'),
    AWS_ENDPOINT_URL_S3: inject('fauxqsEndpoint'),
    AWS_REGION: inject('awsRegion'),
    AWS_ACCESS_KEY_ID: accessKeyId,
    AWS_SECRET_ACCESS_KEY: secretAccessKey,
  };
}

let counter = 0;
/** A name no other test run or file uses (letters, digits, '-'). */
export function unique(base: string): string {
  return `${base}-${process.pid}-${Date.now().toString(36)}-${counter++}`;
}

export function localClients(options: { sqsMaxAttempts?: number } = {}) {
  const common = { region: inject('awsRegion'), credentials: inject('awsCredentials') };
  return {
    dynamodb: new DynamoDBClient({ ...common, endpoint: inject('dynamodbEndpoint') }),
    sqs: new SQSClient({ ...common, endpoint: inject('fauxqsEndpoint'), maxAttempts: options.sqsMaxAttempts }),
    s3: new S3Client({ ...common, endpoint: inject('fauxqsEndpoint'), forcePathStyle: true }),
  };
}

export type Clients = ReturnType<typeof localClients>;

/** A data entry of a SendMessageBatch call. */
export interface SentEntry {
  group: string;
  dedup: string;
  body: string;
}

/** An SQS client that records every data entry sent (idle probes aside) and can lose SendMessageBatch answers (after SQS took the batch). */
export function recordingSqs() {
  const { sqs } = localClients({ sqsMaxAttempts: 1 });
  const sent: SentEntry[] = [];
  const state = { lose: false };
  sqs.middlewareStack.add(
    (next) => async (args) => {
      const entries = (args as { input: { Entries?: { MessageGroupId: string; MessageDeduplicationId: string; MessageBody: string }[] } }).input.Entries;
      for (const e of entries ?? []) if (!(decodeBody(e.MessageBody) as { probe?: boolean }).probe) sent.push({ group: e.MessageGroupId, dedup: e.MessageDeduplicationId, body: e.MessageBody });
      const out = await next(args);
      if (state.lose && entries) throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
      return out;
    },
    { step: 'initialize', name: 'recordEntries' },
  );
  return { sqs, sent, state };
}

/** An HTTP API v2 request that POSTs `body` (JSON) to a stream of the ingest function. */
export function httpEvent(stream: string, body: string, key?: string): APIGatewayProxyEventV2 {
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: `/streams/${stream}/events`,
    rawQueryString: '',
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }) },
    requestContext: { http: { method: 'POST', path: `/streams/${stream}/events`, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'test' }, requestId: unique('req'), stage: '$default' } as never,
    body,
    isBase64Encoded: false,
  };
}

/** Receive up to `max` messages with every attribute (one per message group per call on fauxqs). */
export async function receive(sqs: SQSClient, url: string, max = 10): Promise<Message[]> {
  const out = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: max, WaitTimeSeconds: 0, MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'] }));
  return out.Messages ?? [];
}

/** Receive and delete everything in a queue, in order per group. */
export async function drainQueue(sqs: SQSClient, url: string): Promise<Message[]> {
  const all: Message[] = [];
  for (;;) {
    const batch = await receive(sqs, url);
    if (!batch.length) return all;
    all.push(...batch);
    await sqs.send(new DeleteMessageBatchCommand({ QueueUrl: url, Entries: batch.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle! })) }));
  }
}

export function sqsEvent(messages: readonly Message[], arn: string): SQSEvent {
  return { Records: messages.map((m) => sqsRecord(m, arn, inject('awsRegion'))) };
}

export type Handler = (event: SQSEvent) => Promise<SQSBatchResponse>;

/** One warm Lambda container of a stage function. */
export interface Container {
  readonly invoke: Handler;
  /** True once the container crashed (its process is gone): its last answer is lost. */
  crashed?(): boolean;
  close?(): void;
}

export interface DriverOptions {
  readonly sqs: SQSClient;
  readonly queues: readonly StageQueues[];
  /** A new container for a stage (cold start); called again after a crash. */
  readonly container: (stage: number) => Container;
  /** Warm containers per stage, used in turn (default 1): more than one makes cached partitions go stale. */
  readonly warm?: number;
  /** After a successful invocation: true to lose its answer, as if the process died just before returning. */
  readonly loseAnswer?: () => boolean;
  /** Stop after this many invocations (a test that never drains fails instead of hanging). */
  readonly maxInvocations?: number;
}

/**
 * Lambda's event source mapping, one invocation at a time, downstream stages first:
 * receive a batch, invoke, delete what succeeded and make the failures visible again at
 * once (in reverse, since fauxqs puts a released message at the front of its group).
 * A crashed container's whole batch comes back, and a cold one replaces it.
 */
export async function runUntilDrained(o: DriverOptions): Promise<{ invocations: number; crashes: number; failures: number }> {
  const warm = o.warm ?? 1;
  const pools = o.queues.map((_, s) => Array.from({ length: warm }, () => o.container(s)));
  const stats = { invocations: 0, crashes: 0, failures: 0 };
  try {
    for (;;) {
      let progressed = false;
      for (let s = o.queues.length - 1; s >= 0; s--) {
        const q = o.queues[s];
        const batch = await receive(o.sqs, q.url);
        if (!batch.length) continue;
        progressed = true;
        if (++stats.invocations > (o.maxInvocations ?? 10_000)) throw new Error(`not drained after ${o.maxInvocations} invocations`);
        const slot = stats.invocations % warm;
        const c = pools[s][slot];
        let failed: Set<string>;
        try {
          const res = await c.invoke(sqsEvent(batch, q.arn));
          failed = new Set(res.batchItemFailures.map((f) => f.itemIdentifier));
        } catch {
          failed = new Set(batch.map((m) => m.MessageId!));
        }
        if (c.crashed?.() || o.loseAnswer?.()) {
          stats.crashes++;
          failed = new Set(batch.map((m) => m.MessageId!));
          c.close?.();
          pools[s][slot] = o.container(s);
        }
        stats.failures += failed.size;
        const done = batch.filter((m) => !failed.has(m.MessageId!));
        const back = batch.filter((m) => failed.has(m.MessageId!)).reverse();
        if (done.length) await o.sqs.send(new DeleteMessageBatchCommand({ QueueUrl: q.url, Entries: done.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle! })) }));
        if (back.length) await o.sqs.send(new ChangeMessageVisibilityBatchCommand({ QueueUrl: q.url, Entries: back.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle!, VisibilityTimeout: 0 })) }));
      }
      if (!progressed) return stats;
    }
  } finally {
    for (const pool of pools) for (const c of pool) c.close?.();
  }
}
