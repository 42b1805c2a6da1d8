/**
 * Acceptance of local-AWS mode (issue 3): whole jobs through the real Lambda handlers,
 * polled by the local event source mapping, against DynamoDB Local and fauxqs, must give
 * exactly the output of the embedded runtime (compared sorted: partitions interleave
 * differently). Nexmark Q5 (keyed sliding-window aggregation) and Q8 (window join) on
 * generated events through the ingest handler; a two-source window join fed straight
 * into the queues; a record whose user code throws ends as the same dead letter.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, describe, expect, inject, it } from 'vitest';
import q5 from '../../../examples/nexmark/q5.ts';
import q8 from '../../../examples/nexmark/q8.ts';
import { Sinks, type Sink } from '../../../lib/api/sinks.ts';
import type { SourceBinding } from '../../../lib/api/sources.ts';
import { Job } from '../../../lib/api/stream.ts';
import { Windows } from '../../../lib/api/windows.ts';
import { localAwsAt } from '../../../lib/testing/local-aws/endpoints.ts';
import { type LocalAwsRunResult, LocalAwsRuntime } from '../../../lib/testing/local-aws/runner.ts';
import { EmbeddedRuntime } from '../../../lib/local/embedded.ts';
import { generateEvents, serializeEvent } from '../../../lib/nexmark/index.ts';

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
afterAll(() => env.close());

const dir = mkdtempSync(join(tmpdir(), 'sluice-local-aws-'));
/** 3,000 Nexmark events at 100 events/s of event time: 30 s, so 10 s windows fire many times. */
const EVENTS = join(dir, 'events.jsonl');
writeFileSync(EVENTS, [...generateEvents(0, 3000, { ratePerSec: 100 })].map(serializeEvent).join('\n') + '\n');

const sorted = (records: readonly unknown[]) => records.map((r) => JSON.stringify(r)).sort();

interface Both {
  embedded: string[];
  aws: string[];
  run: LocalAwsRunResult;
  embeddedDeadLetters: number;
}

/** The same job, bindings and sink on both runtimes. */
async function runBoth(makeJob: () => Job, sink: string, sources: Record<string, SourceBinding<any>> = {}): Promise<Both> {
  const a = Sinks.collect<unknown>();
  const embedded = new EmbeddedRuntime(makeJob(), { sources, sinks: { [sink]: a as Sink<any> } });
  await embedded.run();
  const b = Sinks.collect<unknown>();
  const runtime = new LocalAwsRuntime(makeJob(), { env, sources, sinks: { [sink]: b as Sink<any> } });
  const run = await runtime.run();
  return { embedded: sorted(a.records), aws: sorted(b.records), run, embeddedDeadLetters: embedded.deadLetters.length };
}

function expectCleanRun(run: LocalAwsRunResult): void {
  for (const s of run.stages) {
    expect(s.metrics.fifoRuleViolations, s.name).toBe(0);
    expect(s.metrics.invalidResponses, s.name).toBe(0);
    expect(s.metrics.groupConflicts, s.name).toBe(0);
  }
}

describe('local-AWS mode gives the embedded runtime\'s output', () => {
  it('Nexmark Q5: keyed sliding-window counts and the hottest auctions', async () => {
    const { embedded, aws, run } = await runBoth(() => q5({ parallelism: 2 }), 'results', { events: { kind: 'file', path: EVENTS } });
    expect(embedded.length).toBeGreaterThan(10);
    expect(aws).toEqual(embedded);
    expectCleanRun(run);
    expect(run.sourceRecords).toBe(3000);
    expect(run.rejectedInputs).toEqual([]);
    expect(run.deadLetters).toEqual([]);
    // Every stage ran through the handlers, and every request was counted and priced.
    expect(run.stages.every((s) => s.metrics.invocations > 0)).toBe(true);
    const rows = run.accounting.rows();
    for (const op of ['TransactWriteItems', 'ReceiveMessage', 'SendMessageBatch', 'DeleteMessageBatch', 'Request']) expect(rows.some((r) => r.operation === op && r.requests > 0), op).toBe(true);
    expect(run.cost.dollars).toBeGreaterThan(0);
    const perMillion = (run.cost.dollars / run.sourceRecords) * 1e6;
    console.log(
      `Q5 local-AWS, ${run.sourceRecords} events, ${(run.durationMs / 1000).toFixed(1)} s: ` +
        run.cost.lines.filter((l) => l.quantity).map((l) => `${l.service} ${l.quantity.toFixed(l.unit === 'GB-seconds' ? 1 : 0)} ${l.unit}`).join(', ') +
        `; $${run.cost.dollars.toFixed(5)} = $${perMillion.toFixed(2)} per million events`,
    );
  }, 180_000);

  it('Nexmark Q8: a tumbling-window join of persons and auctions', async () => {
    const { embedded, aws, run } = await runBoth(() => q8({ parallelism: 2 }), 'results', { events: { kind: 'file', path: EVENTS } });
    expect(embedded.length).toBeGreaterThan(5);
    expect(aws).toEqual(embedded);
    expectCleanRun(run);
  }, 180_000);

  it('a window join of two sources fed straight into their queues (no ingest function)', async () => {
    interface Order {
      id: number;
      user: string;
      ts: number;
    }
    interface Payment {
      order: number;
      amount: number;
      ts: number;
    }
    const orders: Order[] = Array.from({ length: 300 }, (_, i) => ({ id: i, user: `u${i % 17}`, ts: 1_000_000 + i * 50 }));
    // Payments arrive up to ~0.7 s after their order; every fifth order is never paid.
    const payments: Payment[] = orders.filter((o) => o.id % 5 !== 0).map((o) => ({ order: o.id, amount: (o.id * 37) % 101, ts: o.ts + ((o.id * 13) % 700) }));
    payments.sort((x, y) => x.ts - y.ts);
    const makeJob = () => {
      const job = new Job('orders-payments', { parallelism: 3, maxParallelism: 32 });
      const o = job.fromItems('orders', orders, { timestamp: (x) => x.ts, parallelism: 2 });
      const p = job.fromItems('payments', payments, { timestamp: (x) => x.ts });
      o.keyBy((x) => x.id)
        .join(p.keyBy((x) => x.order))
        .window(Windows.tumbling(1000))
        .apply((order, payment) => ({ order: order.id, user: order.user, amount: payment.amount }))
        .name('paid-orders')
        .sinkTo(Sinks.collect(), 'paid');
      return job;
    };
    const { embedded, aws, run } = await runBoth(makeJob, 'paid');
    expect(embedded.length).toBeGreaterThan(150);
    expect(aws).toEqual(embedded);
    expectCleanRun(run);
    // Nothing went through the ingest function: no HTTP API requests.
    expect(run.accounting.get('httpapi', 'Request').requests).toBe(0);
  }, 180_000);

  it('parks a record whose user code keeps throwing, with its error; the rest is unchanged', async () => {
    const makeJob = () => {
      const job = new Job('poison', { parallelism: 2, maxParallelism: 16 });
      job
        .fromItems('n', Array.from({ length: 200 }, (_, i) => i), { timestamp: (i) => i * 10 })
        .keyBy((i) => i % 7)
        .process<{ k: number; i: number }, Record<string, never>>({
          processElement(i, ctx) {
            if (i === 123) throw new Error('no 123 please');
            ctx.emit({ k: i % 7, i });
          },
        })
        .name('picky')
        .sinkTo(Sinks.collect(), 'out');
      return job;
    };
    const { embedded, aws, run, embeddedDeadLetters } = await runBoth(makeJob, 'out');
    expect(aws).toEqual(embedded);
    expect(embedded).toHaveLength(199);
    expect(embeddedDeadLetters).toBe(1);
    expect(run.deadLetters).toHaveLength(1);
    const d = run.deadLetters[0];
    expect(d.kind).toBe('deadLetter');
    if (d.kind === 'deadLetter') {
      expect(d.operator).toBe('picky');
      expect(d.error).toMatch(/no 123 please/);
      expect((d.record as { value: unknown }).value).toBe(123);
    }
    // Its group was retried (failed messages came back) before the record was parked.
    expect(run.stages.reduce((n, s) => n + s.metrics.failures, 0)).toBeGreaterThan(0);
    expectCleanRun(run);
  }, 180_000);

  it('a message no handler can read is redriven to the DLQ by SQS after maxReceiveCount; its partition then flows', async () => {
    const makeJob = () => {
      const job = new Job('garbage', { parallelism: 2, maxParallelism: 16 });
      job
        .fromItems('n', Array.from({ length: 50 }, (_, i) => i), { timestamp: (i) => i })
        .keyBy((i) => i % 5)
        .process<number, Record<string, never>>({
          processElement(i, ctx) {
            ctx.emit(i * 2);
          },
        })
        .name('double')
        .sinkTo(Sinks.collect(), 'out');
      return job;
    };
    const out = Sinks.collect<number>();
    const runtime = new LocalAwsRuntime(makeJob(), { env, sinks: { out: out as Sink<any> }, maxReceiveCount: 4 });
    await runtime.start();
    // Ahead of any real input, partition 1 of the keyed stage gets a body that is not a Sluice message.
    await env.clients.sqs.send(new SendMessageCommand({ QueueUrl: runtime.queues[1].url, MessageBody: 'not a sluice message', MessageGroupId: '1', MessageDeduplicationId: 'garbage-1' }));
    const run = await runtime.run();
    expect([...out.records].sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i * 2));
    expect(run.deadLetters).toEqual([{ kind: 'redriven', stage: 1, partition: 1, messageId: expect.any(String), receives: expect.any(String), body: 'not a sluice message' }]);
    // Received maxReceiveCount times, failing each time, before SQS moved it.
    expect(run.stages[1].metrics.failures).toBeGreaterThanOrEqual(4);
  }, 180_000);
});
