/**
 * User code that throws in a timer callback, through the operator handler against fauxqs
 * and DynamoDB Local (issue 3): a window firing (event time) and a processing-time timer.
 * Before, such a throw had no location: the group failed until SQS redrove the whole
 * message, leaving a sequence gap behind. Now it is retried (attempts counted per
 * callback, each a fresh recovery), then parked on the stage's DLQ with the operator,
 * the key, the timer and the error; the timer counts as consumed, and the partition goes
 * on: later windows fire, nothing is lost or out of sequence.
 */
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CollectSink, Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { type Clock, ManualClock } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { decodeBody, type DeadLetterMessage } from '../../lib/aws/sqs/sqs-codec.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { drainQueue, localClients, runUntilDrained, unique } from './helpers.ts';

interface Ev {
  user: string;
  ts: number;
}

const clients = localClients();
const table = unique('sluice-cb');
beforeAll(() => createStateTable(clients.dynamodb, table));
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

/** Queues, an ingest handler (no idle timeout: no probes) and a driver for both stages. */
async function setup<O>(job: Job, sink: CollectSink<O>, clock: Clock) {
  const plan = compile(job.graph);
  const queues = await createStageQueues(clients.sqs, plan, { maxReceiveCount: 10, visibilityTimeoutSeconds: 300 });
  const staticQueues = new StaticQueues(queues);
  const ingest = createIngestHandler({ job, sqs: clients.sqs, queues: staticQueues, clock });
  const send = async (events: readonly object[]) => {
    const event = { version: '2.0', rawPath: '/streams/events/events', headers: { 'content-type': 'application/json' }, requestContext: { http: { method: 'POST' }, requestId: unique('r') }, body: JSON.stringify(events), isBase64Encoded: false };
    expect((await ingest(event as unknown as APIGatewayProxyEventV2)).statusCode).toBe(202);
  };
  const handlers = plan.stages.map(() => createOperatorHandler({ job, sqs: clients.sqs, dynamodb: clients.dynamodb, tableName: table, queues: staticQueues, sinks: { out: sink }, clock, maxAttempts: 3, maxReceiveCount: 10 }));
  const drain = () => runUntilDrained({ sqs: clients.sqs, queues, container: (s) => ({ invoke: handlers[s] }), maxInvocations: 200 });
  const deadLetters = async () => {
    const out: (DeadLetterMessage & { k: string })[] = [];
    for (const q of queues) for (const m of await drainQueue(clients.sqs, q.dlqUrl)) out.push(decodeBody(m.Body!) as unknown as DeadLetterMessage & { k: string });
    return out;
  };
  return { send, drain, deadLetters };
}

const noIdle = { maxOutOfOrdernessMs: 0 };

describe('callback failures in the operator handler', () => {
  it('retries a window firing that throws, parks it with its key and timer, and the partition goes on', async () => {
    let badFirings = 0;
    const job = new Job(unique('wcb'), { parallelism: 2, maxParallelism: 16 });
    const sink = new CollectSink<{ user: string; start: number; n: number }>();
    job
      .ingest<Ev>('events', { timestamp: (e) => e.ts, watermark: noIdle })
      .keyBy((e) => e.user)
      .window(Windows.tumbling(1000))
      .process<{ user: string; start: number; n: number }>((els, { key, window }, out) => {
        if (key === 'bad' && window.start === 0) {
          badFirings++;
          throw new Error(`cannot count ${key}`);
        }
        out.emit({ user: key as string, start: window.start, n: els.length });
      })
      .name('counts')
      .sinkTo(Sinks.collect(), 'out');
    const t = await setup(job, sink, new ManualClock(0));
    // Requests go to source partitions 0, 1, 0, 1: both partitions' watermarks pass 999, then 2999.
    await t.send([{ user: 'ann', ts: 100 }, { user: 'bad', ts: 200 }]);
    await t.send([{ user: 'bob', ts: 300 }, { user: 'bad', ts: 400 }]);
    await t.send([{ user: 'ann', ts: 2500 }]);
    await t.send([{ user: 'bob', ts: 2600 }]);
    const first = await t.drain();
    expect(first.failures).toBeGreaterThan(0); // the firing failed, and its message came back
    expect(badFirings).toBe(3);
    const byStart = () => [...sink.records].sort((a, b) => a.start - b.start || a.user.localeCompare(b.user));
    expect(byStart()).toEqual([
      { user: 'ann', start: 0, n: 1 },
      { user: 'bob', start: 0, n: 1 },
    ]);
    const dead = await t.deadLetters();
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({
      k: 'd',
      stage: 1,
      operator: 'counts',
      timer: { operator: 'counts', domain: 'event', time: 999, key: 'bad', namespace: '', consumed: true },
      attempts: 3,
    });
    expect(dead[0].error).toMatch(/operator "counts" threw: cannot count bad/);
    expect(dead[0].record).toBeUndefined();

    // The partition goes on: the next windows fire, bad's too (a new timer), in sequence.
    await t.send([{ user: 'bad', ts: 2700 }, { user: 'ann', ts: 5000 }]);
    await t.send([{ user: 'bob', ts: 5100 }]);
    expect((await t.drain()).failures).toBe(0);
    expect(badFirings).toBe(3);
    expect(byStart().filter((w) => w.start === 2000)).toEqual([
      { user: 'ann', start: 2000, n: 1 },
      { user: 'bad', start: 2000, n: 1 },
      { user: 'bob', start: 2000, n: 1 },
    ]);
    expect(await t.deadLetters()).toEqual([]);
  }, 120_000);

  it('retries a processing-time timer that throws (its group as a whole), then parks it; the other timers fire once', async () => {
    const clock = new ManualClock(1000);
    let badCalls = 0;
    const job = new Job(unique('pcb'), { parallelism: 2, maxParallelism: 16 });
    const sink = new CollectSink<string>();
    job
      .ingest<{ user: string }>('events', { watermark: noIdle })
      .keyBy((e) => e.user)
      .process<string>({
        processElement(e, ctx) {
          if (e.user !== 'tick') ctx.timers.registerProcessingTimeTimer(ctx.timers.currentProcessingTime() + 500);
        },
        onTimer(time, ctx) {
          if (ctx.key === 'bad') {
            badCalls++;
            throw new Error('processing timer refuses');
          }
          ctx.emit(`${ctx.key}@${time}`);
        },
      })
      .name('later')
      .sinkTo(Sinks.collect(), 'out');
    const t = await setup(job, sink, clock);
    await t.send([{ user: 'ann' }, { user: 'bad' }, { user: 'bob' }]);
    await t.drain();
    // At 1500 an event (arrival time 1500) moves the source watermark, so every keyed partition gets a batch and fires its due timers.
    clock.set(1500);
    await t.send([{ user: 'tick' }]);
    await t.send([{ user: 'tick' }]);
    const run = await t.drain();
    expect(run.failures).toBeGreaterThan(0);
    expect(badCalls).toBe(3);
    expect([...sink.records].sort()).toEqual(['ann@1500', 'bob@1500']);
    const dead = await t.deadLetters();
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ operator: 'later', stage: 1, timer: { operator: 'later', domain: 'processing', time: 1500, key: 'bad', namespace: '', consumed: true }, attempts: 3 });

    // The partition goes on: new timers fire, the parked one never again.
    await t.send([{ user: 'ann' }]);
    await t.drain(); // registered at 1500 + 500
    clock.set(2000);
    await t.send([{ user: 'tick' }]);
    await t.send([{ user: 'tick' }]);
    expect((await t.drain()).failures).toBe(0);
    expect([...sink.records].sort()).toEqual(['ann@1500', 'ann@2000', 'bob@1500']);
    expect(badCalls).toBe(3);
  }, 120_000);
});
