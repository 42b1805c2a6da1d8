/**
 * The local SQS event source mapping against fauxqs with fake handlers: the event and
 * context Lambda would build, per-group order, partial batch failures, redrive to the
 * DLQ, the concurrency bound, timeouts and a clean stop. Batches with several messages
 * of one group (which real SQS returns and fauxqs never does) are covered with a mocked
 * client at the end.
 */
import { randomUUID } from 'node:crypto';
import { ChangeMessageVisibilityBatchCommand, DeleteMessageBatchCommand, GetQueueAttributesCommand, ReceiveMessageCommand, SendMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { SQSEvent } from 'aws-lambda';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { ConfigError } from '../../../lib/errors.ts';
import { SqsEventSource, type EventSourceOptions, type SqsHandler } from '../../../lib/testing/local-aws/event-source.ts';
import { createFifoQueueWithDlq, type FifoQueueOptions, queueDepth } from '../../../lib/testing/local-aws/queues.ts';

const sqs = new SQSClient({ endpoint: inject('fauxqsEndpoint'), region: inject('awsRegion'), credentials: inject('awsCredentials') });
afterAll(() => sqs.destroy());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let n = 0;
const newQueue = (opts?: FifoQueueOptions) => createFifoQueueWithDlq(sqs, `es-${process.pid}-${Date.now()}-${n++}`, opts);

/** Send `[group, body]` pairs in order, 10 per request, with unique dedup ids. */
async function send(url: string, messages: [string, string][]): Promise<void> {
  for (let i = 0; i < messages.length; i += 10) {
    const out = await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: url,
        Entries: messages.slice(i, i + 10).map(([g, body], j) => ({ Id: String(j), MessageBody: body, MessageGroupId: g, MessageDeduplicationId: randomUUID() })),
      }),
    );
    expect(out.Failed ?? []).toEqual([]);
  }
}

async function until(cond: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(20);
  }
}

async function withSource<T>(opts: Omit<EventSourceOptions, 'sqs'>, f: (src: SqsEventSource) => Promise<T>): Promise<T> {
  const src = new SqsEventSource({ sqs, waitTimeSeconds: 1, ...opts });
  await src.start();
  try {
    return await f(src);
  } finally {
    await src.stop();
  }
}

const bodies = (e: SQSEvent) => e.Records.map((r) => r.body);

describe('SqsEventSource on fauxqs', () => {
  it('builds the SQS event and context as Lambda does', async () => {
    const q = await newQueue();
    await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: q.url,
        Entries: [{ Id: 'a', MessageBody: '{"x":1}', MessageGroupId: 'p0', MessageDeduplicationId: 'd-1', MessageAttributes: { kind: { DataType: 'String', StringValue: 'env' } } }],
      }),
    );
    const seen: { event: SQSEvent; fn: string; remaining: number; arn: string }[] = [];
    await withSource({ queueUrl: q.url, functionName: 'stage-1', timeoutMs: 5000, handler: async (event, ctx) => void seen.push({ event, fn: ctx.functionName, remaining: ctx.getRemainingTimeInMillis(), arn: ctx.invokedFunctionArn }) }, async (src) => {
      await until(() => src.metrics.deleted === 1);
    });
    expect(seen).toHaveLength(1);
    const r = seen[0].event.Records[0];
    expect(r).toMatchObject({ body: '{"x":1}', eventSource: 'aws:sqs', eventSourceARN: q.arn, awsRegion: 'us-east-1' });
    expect(r.messageId).toMatch(/\S/);
    expect(r.receiptHandle).toMatch(/\S/);
    expect(r.md5OfBody).toMatch(/^[0-9a-f]{32}$/);
    expect(r.attributes).toMatchObject({ ApproximateReceiveCount: '1', MessageGroupId: 'p0', MessageDeduplicationId: 'd-1' });
    expect(r.attributes.SequenceNumber).toMatch(/^\d+$/);
    expect(Number(r.attributes.SentTimestamp)).toBeGreaterThan(Date.now() - 60_000);
    expect(Number(r.attributes.ApproximateFirstReceiveTimestamp)).toBeGreaterThanOrEqual(Number(r.attributes.SentTimestamp));
    expect(r.messageAttributes).toEqual({ kind: { stringValue: 'env', stringListValues: [], binaryListValues: [], dataType: 'String' } });
    expect(seen[0].fn).toBe('stage-1');
    expect(seen[0].arn).toMatch(/^arn:aws:lambda:us-east-1:\d+:function:stage-1$/);
    expect(seen[0].remaining).toBeGreaterThan(4000);
    expect(seen[0].remaining).toBeLessThanOrEqual(5000);
  });

  it('keeps order within each group and never runs one group twice at once', async () => {
    const q = await newQueue();
    const groups = ['a', 'b', 'c', 'd'];
    const msgs: [string, string][] = [];
    for (let i = 0; i < 25; i++) for (const g of groups) msgs.push([g, `${g}:${i}`]);
    await send(q.url, msgs);
    const got = new Map<string, number[]>(groups.map((g) => [g, []]));
    const active = new Set<string>();
    let overlap = 0;
    await withSource(
      {
        queueUrl: q.url,
        batchSize: 3,
        maximumConcurrency: 4,
        handler: async (event) => {
          const gs = new Set(event.Records.map((r) => r.attributes.MessageGroupId!));
          for (const g of gs) (active.has(g) ? overlap++ : active.add(g));
          await sleep(Math.random() * 10);
          for (const r of event.Records) got.get(r.attributes.MessageGroupId!)!.push(Number(r.body.split(':')[1]));
          for (const g of gs) active.delete(g);
        },
      },
      async (src) => {
        await until(() => src.metrics.deleted === msgs.length);
        expect(src.metrics.failures).toBe(0);
      },
    );
    expect(overlap).toBe(0);
    for (const g of groups) expect(got.get(g)).toEqual(Array.from({ length: 25 }, (_, i) => i));
    expect(await queueDepth(sqs, q.url)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('retries a failed message and what follows it in its group; other groups keep flowing', async () => {
    const q = await newQueue();
    const msgs: [string, string][] = [];
    for (let i = 0; i < 10; i++) msgs.push(['slow', `slow:${i}`], ['fast', `fast:${i}`]);
    await send(q.url, msgs);
    const log: string[] = [];
    let failuresLeft = 2;
    await withSource(
      {
        queueUrl: q.url,
        retryDelayMs: 300,
        handler: async (event) => {
          // The FIFO rule: report the first failure and every later message of its group.
          const failed = new Set<string>();
          const out = [];
          for (const r of event.Records) {
            const g = r.attributes.MessageGroupId!;
            if (failed.has(g) || (r.body === 'slow:3' && failuresLeft-- > 0)) {
              failed.add(g);
              out.push({ itemIdentifier: r.messageId });
            } else log.push(r.body);
          }
          return { batchItemFailures: out };
        },
      },
      async (src) => {
        await until(() => src.metrics.deleted === msgs.length);
        expect(src.metrics.failures).toBe(2);
        expect(src.metrics.fifoRuleViolations).toBe(0);
      },
    );
    expect(log.filter((b) => b.startsWith('slow'))).toEqual(Array.from({ length: 10 }, (_, i) => `slow:${i}`));
    expect(log.filter((b) => b.startsWith('fast'))).toEqual(Array.from({ length: 10 }, (_, i) => `fast:${i}`));
    // While "slow" waited for its retries, "fast" finished.
    expect(log.indexOf('fast:9')).toBeLessThan(log.indexOf('slow:3'));
  });

  it('honours a visibility the handler set on a failed message (a backoff), in scaled time; other failures come back after retryDelayMs', async () => {
    const q = await newQueue();
    await send(q.url, [['held', 'held:0'], ['quick', 'quick:0']]);
    // The handler's own client, as the operator handler has one: the source watches it for visibility changes.
    const own = new SQSClient({ endpoint: inject('fauxqsEndpoint'), region: inject('awsRegion'), credentials: inject('awsCredentials') });
    const log: string[] = [];
    let quickFailures = 3;
    try {
      await withSource(
        {
          queueUrl: q.url,
          retryDelayMs: 10,
          // One second of the handler's visibility lasts 150 ms here.
          visibilityScaleMs: 150,
          handler: async (event) => {
            const out = [];
            for (const r of event.Records) {
              log.push(`${r.body}#${r.attributes.ApproximateReceiveCount}`);
              if (r.body === 'held:0' && r.attributes.ApproximateReceiveCount === '1') {
                const res = await own.send(new ChangeMessageVisibilityBatchCommand({ QueueUrl: q.url, Entries: [{ Id: '0', ReceiptHandle: r.receiptHandle, VisibilityTimeout: 10 }] }));
                expect(res.Failed ?? []).toEqual([]);
                out.push({ itemIdentifier: r.messageId });
              } else if (r.body === 'quick:0' && quickFailures-- > 0) out.push({ itemIdentifier: r.messageId });
            }
            return { batchItemFailures: out };
          },
        },
        async (src) => {
          src.observe(own);
          await until(() => src.metrics.deleted === 2);
          expect(src.metrics.handlerVisibility).toBe(1);
          expect(src.metrics.failures).toBe(4);
        },
      );
    } finally {
      own.destroy();
    }
    // "quick" came back three times after retryDelayMs and went through before "held" returned from its backoff.
    expect(log.filter((l) => l.startsWith('held'))).toEqual(['held:0#1', 'held:0#2']);
    expect(log.indexOf('quick:0#4')).toBeGreaterThan(-1);
    expect(log.indexOf('quick:0#4')).toBeLessThan(log.indexOf('held:0#2'));
  });

  it('fails the whole batch when the handler throws or names a message not in the batch', async () => {
    const q = await newQueue();
    await send(q.url, [['a', 'a:0'], ['b', 'b:0']]);
    let calls = 0;
    const errors: string[] = [];
    await withSource(
      {
        queueUrl: q.url,
        retryDelayMs: 50,
        onError: (e) => errors.push(e.message),
        handler: async (event) => {
          calls++;
          if (calls === 1) throw new Error('boom');
          if (calls === 2) return { batchItemFailures: [{ itemIdentifier: 'not-in-batch' }] };
          return { batchItemFailures: [] };
        },
      },
      async (src) => {
        await until(() => src.metrics.deleted === 2);
        expect(src.metrics).toMatchObject({ invocations: 3, errors: 2, invalidResponses: 1, failures: 4 });
      },
    );
    expect(errors[0]).toBe('boom');
    expect(errors[1]).toMatch(/invalid SQSBatchResponse.*not-in-batch/);
  });

  it('lets SQS redrive a message to the DLQ after maxReceiveCount; its group then moves on', async () => {
    const q = await newQueue({ maxReceiveCount: 2 });
    await send(q.url, [['g', 'poison'], ['g', 'next'], ['h', 'other']]);
    const receiveCounts: string[] = [];
    const done: string[] = [];
    await withSource(
      {
        queueUrl: q.url,
        retryDelayMs: 20,
        handler: async (event) => {
          const out = [];
          for (const r of event.Records) {
            if (r.body === 'poison') {
              receiveCounts.push(r.attributes.ApproximateReceiveCount);
              out.push({ itemIdentifier: r.messageId });
            } else done.push(r.body);
          }
          return { batchItemFailures: out };
        },
      },
      async () => {
        await until(() => done.length === 2);
      },
    );
    expect(receiveCounts).toEqual(['1', '2']);
    expect(done.sort()).toEqual(['next', 'other']);
    const dlq = await sqs.send(new ReceiveMessageCommand({ QueueUrl: q.dlqUrl, MaxNumberOfMessages: 10, MessageSystemAttributeNames: ['All'] }));
    expect(dlq.Messages?.map((m) => [m.Body, m.Attributes?.MessageGroupId])).toEqual([['poison', 'g']]);
    expect(await queueDepth(sqs, q.url)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('runs at most maximumConcurrency invocations at once', async () => {
    const q = await newQueue();
    await send(q.url, Array.from({ length: 16 }, (_, i) => [`g${i % 8}`, String(i)] as [string, string]));
    let running = 0;
    let peak = 0;
    const handler: SqsHandler = async () => {
      peak = Math.max(peak, ++running);
      await sleep(40);
      running--;
    };
    await withSource({ queueUrl: q.url, batchSize: 1, maximumConcurrency: 2, handler }, async (src) => {
      await until(() => src.metrics.deleted === 16);
      expect(src.metrics.maxConcurrentSeen).toBe(2);
    });
    expect(peak).toBe(2);
    // With room for more, as many run as there are active groups. A fresh queue: the aborted
    // long poll of the stopped source still waits in fauxqs and would take a message.
    const q2 = await newQueue();
    await send(q2.url, Array.from({ length: 16 }, (_, i) => [`g${i % 8}`, String(i)] as [string, string]));
    peak = 0;
    await withSource({ queueUrl: q2.url, batchSize: 1, maximumConcurrency: 50, handler }, async (src) => {
      await until(() => src.metrics.deleted === 16);
    });
    expect(peak).toBeGreaterThan(2);
    expect(peak).toBeLessThanOrEqual(8);
  });

  it('rejects settings outside Lambda limits', () => {
    const base = { sqs, queueUrl: 'http://x/q.fifo', handler: async () => undefined };
    expect(() => new SqsEventSource({ ...base, maximumConcurrency: 1 })).toThrow(ConfigError);
    expect(() => new SqsEventSource({ ...base, maximumConcurrency: 1001 })).toThrow(/maximumConcurrency: expected an integer from 2 to 1000, received 1001/);
    expect(() => new SqsEventSource({ ...base, batchSize: 11 })).toThrow(/batchSize/);
  });

  it('treats a timeout as a failed batch that returns after the visibility timeout', async () => {
    const q = await newQueue({ visibilityTimeoutSeconds: 1 });
    await send(q.url, [['g', 'x']]);
    const counts: string[] = [];
    const t0 = Date.now();
    let second = 0;
    await withSource(
      {
        queueUrl: q.url,
        timeoutMs: 100,
        retryDelayMs: 0, // not applied to timeouts: the first run may still be working
        handler: async (event) => {
          counts.push(event.Records[0].attributes.ApproximateReceiveCount);
          if (counts.length === 1) await sleep(300);
          else second = Date.now() - t0;
        },
      },
      async (src) => {
        await until(() => src.metrics.deleted === 1);
        expect(src.metrics.timeouts).toBe(1);
      },
    );
    expect(counts).toEqual(['1', '2']);
    expect(second).toBeGreaterThanOrEqual(900);
  });

  it('stops promptly during a long poll', async () => {
    const q = await newQueue();
    const src = new SqsEventSource({ sqs, queueUrl: q.url, waitTimeSeconds: 20, handler: async () => undefined });
    await src.start();
    await sleep(100);
    await src.stop();
    // The 20 s poll was aborted, not waited out: it never returned (an empty receive would count).
    expect(src.metrics.receives).toBe(0);
    expect(src.metrics.emptyReceives).toBe(0);
  });
});

/**
 * Requests that fail as a loaded or restarting server fails them, which fauxqs cannot be
 * asked to do: the first `n` requests of each named command throw before they are sent
 * (added before the SDK's retries, so each counts once). Everything else reaches fauxqs.
 */
function failingFirst(failures: Partial<Record<'ChangeMessageVisibilityBatchCommand' | 'DeleteMessageBatchCommand', number>>): SQSClient {
  const client = new SQSClient({ endpoint: inject('fauxqsEndpoint'), region: inject('awsRegion'), credentials: inject('awsCredentials'), maxAttempts: 1 });
  const left: Record<string, number> = { ...failures };
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const name = context.commandName ?? '';
      if ((left[name] ?? 0) > 0) {
        left[name]--;
        throw Object.assign(new Error(`injected: ${name} failed`), { name: 'InternalError', $metadata: {} });
      }
      return next(args);
    },
    { step: 'initialize', name: 'failFirstRequests' },
  );
  return client;
}

/** A source over `queueUrl` through `client` (faults injected), run until `done`; its errors kept. */
async function runUntil(queueUrl: string, client: SQSClient, handler: SqsHandler, done: (src: SqsEventSource) => boolean) {
  const errors: string[] = [];
  const src = new SqsEventSource({ sqs: client, queueUrl, waitTimeSeconds: 1, retryDelayMs: 0, onError: (e) => errors.push(e.message), handler });
  await src.start();
  try {
    await until(() => done(src));
  } finally {
    await src.stop();
    client.destroy();
  }
  return { src, errors };
}

describe('SqsEventSource when releases and deletes fail (a visibility timeout of 10 minutes: nothing may wait for it)', () => {
  it('tries a failed release again, so the failed message comes back promptly', async () => {
    const q = await newQueue({ visibilityTimeoutSeconds: 600 });
    await send(q.url, [['g', 'a'], ['g', 'b']]);
    const seen: string[] = [];
    const { src, errors } = await runUntil(
      q.url,
      failingFirst({ ChangeMessageVisibilityBatchCommand: 2 }),
      async (event) => {
        const r = event.Records[0];
        seen.push(r.body);
        return { batchItemFailures: r.body === 'a' && seen.length === 1 ? [{ itemIdentifier: r.messageId }] : [] };
      },
      (x) => x.metrics.deleted === 2,
    );
    expect(seen).toEqual(['a', 'a', 'b']);
    expect(src.metrics.releaseFailures).toBe(0);
    expect(errors).toEqual([]);
    expect(await queueDepth(sqs, q.url)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('makes a processed message whose delete failed visible again, and reports the failure', async () => {
    const q = await newQueue({ visibilityTimeoutSeconds: 600 });
    await send(q.url, [['g', 'a'], ['g', 'b']]);
    const seen: string[] = [];
    const { src, errors } = await runUntil(q.url, failingFirst({ DeleteMessageBatchCommand: 1 }), async (event) => void seen.push(event.Records[0].body), (x) => x.metrics.deleted === 2);
    // Delivered again (a handler is idempotent: the runtime drops what it applied), in order, then deleted.
    expect(seen).toEqual(['a', 'a', 'b']);
    expect(src.metrics.undeleted).toBe(1);
    expect(errors).toEqual(['injected: DeleteMessageBatchCommand failed']);
    expect(await queueDepth(sqs, q.url)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('reports the messages it could not release after every attempt', async () => {
    const q = await newQueue({ visibilityTimeoutSeconds: 600 });
    await send(q.url, [['g', 'a']]);
    const { errors } = await runUntil(
      q.url,
      failingFirst({ ChangeMessageVisibilityBatchCommand: 100 }),
      async (event) => ({ batchItemFailures: [{ itemIdentifier: event.Records[0].messageId }] }),
      (x) => x.metrics.releaseFailures === 1,
    );
    expect(errors).toEqual([expect.stringMatching(/^ChangeMessageVisibilityBatch failed for 1 message\(s\) after 4 attempts \(injected: ChangeMessageVisibilityBatchCommand failed\): they stay invisible until the visibility timeout$/)]);
    expect((await queueDepth(sqs, q.url)).inFlight).toBe(1);
  });
});

describe('SqsEventSource with several messages of one group per batch (as real SQS returns them)', () => {
  const arn = 'arn:aws:sqs:us-east-1:123456789012:q.fifo';
  const msg = (id: string, group: string) => ({ MessageId: id, ReceiptHandle: `rh-${id}`, Body: id, MD5OfBody: '0'.repeat(32), Attributes: { MessageGroupId: group, ApproximateReceiveCount: '1' } });

  async function runOnce(handler: SqsHandler) {
    const mock = mockClient(SQSClient);
    mock.on(GetQueueAttributesCommand).resolves({ Attributes: { QueueArn: arn } });
    mock.on(ReceiveMessageCommand).resolvesOnce({ Messages: [msg('a1', 'A'), msg('b1', 'B'), msg('a2', 'A'), msg('a3', 'A')] }).resolves({});
    mock.on(DeleteMessageBatchCommand).resolves({ Successful: [] });
    const client = new SQSClient({ region: 'us-east-1' });
    const errors: string[] = [];
    const src = new SqsEventSource({ sqs: client, queueUrl: 'https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo', handler, onError: (e) => errors.push(e.message) });
    await src.start();
    await until(() => src.metrics.invocations === 1 && !src.busy);
    await src.stop();
    const deleted = mock.commandCalls(DeleteMessageBatchCommand).flatMap((c) => c.args[0].input.Entries!.map((e) => e.ReceiptHandle));
    mock.restore();
    return { src, deleted, errors };
  }

  it('deletes the messages not reported, keeping the failed one and the rest of its group', async () => {
    const { src, deleted } = await runOnce(async (e) => {
      expect(bodies(e)).toEqual(['a1', 'b1', 'a2', 'a3']);
      return { batchItemFailures: [{ itemIdentifier: 'a2' }, { itemIdentifier: 'a3' }] };
    });
    expect(deleted).toEqual(['rh-a1', 'rh-b1']);
    expect(src.metrics).toMatchObject({ failures: 2, fifoRuleViolations: 0 });
  });

  it('flags a response that breaks the FIFO rule (Lambda would delete the later message)', async () => {
    const { src, deleted, errors } = await runOnce(async () => ({ batchItemFailures: [{ itemIdentifier: 'a2' }] }));
    expect(deleted).toEqual(['rh-a1', 'rh-b1', 'rh-a3']);
    expect(src.metrics.fifoRuleViolations).toBe(1);
    expect(errors[0]).toMatch(/FIFO rule broken: message a3 of group A/);
  });
});
