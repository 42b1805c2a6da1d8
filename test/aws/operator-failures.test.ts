/**
 * Failures in the operator handler against fauxqs and DynamoDB Local, with SQS events
 * built from real ReceiveMessage results:
 * - the FIFO rule: the first failed message and every later one of its group are
 *   reported; earlier messages of the group and other groups commit;
 * - a record whose user code throws is retried (one attempt per delivery), then parked
 *   on the stage's DLQ with its error, while the records behind it keep their order;
 * - a message that cannot be decoded fails with everything behind it in its group;
 * - the same through the event-source driver, with SQS's own receive counts.
 */
import type { Message } from '@aws-sdk/client-sqs';
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CollectSink, Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { decodeBody, type DeadLetterMessage, normaliseOffset } from '../../lib/aws/sqs/sqs-codec.ts';
import { createStageQueues, StaticQueues, type StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { drainQueue, localClients, runUntilDrained, sqsEvent, unique } from './helpers.ts';

interface Ev {
  id: string;
  user: string;
  poison?: boolean;
}

/** Source -> map (throws on poison) -> keyBy user -> pass-through -> sink. */
function poisonJob(name: string) {
  const job = new Job(name, { parallelism: 2, maxParallelism: 16 });
  job
    // No idle timeout: no idle probes among the messages these tests hand to the handler one by one.
    .ingest<Ev>('events', { watermark: { maxOutOfOrdernessMs: 0 } })
    .map((e) => {
      if (e.poison) throw new Error(`poisoned event ${e.id}`);
      return e;
    })
    .name('check')
    .keyBy((e) => e.user)
    .process<Ev>({ processElement: (e, ctx) => ctx.emit(e) })
    .name('pass')
    .sinkTo(Sinks.collect<Ev>(), 'out');
  return job;
}

const clients = localClients();
const table = unique('sluice-fail');
beforeAll(() => createStateTable(clients.dynamodb, table));
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

async function setup() {
  const job = poisonJob(unique('pz'));
  const queues: StageQueues[] = await createStageQueues(clients.sqs, compile(job.graph), { maxReceiveCount: 10, visibilityTimeoutSeconds: 300 });
  const staticQueues = new StaticQueues(queues);
  const sink = new CollectSink<Ev>();
  // Round-robin from partition 0 (the tests name the partitions of their requests).
  const ingest = createIngestHandler({ job, sqs: clients.sqs, queues: staticQueues, random: () => 0 });
  const handler = () => createOperatorHandler({ job, sqs: clients.sqs, dynamodb: clients.dynamodb, tableName: table, queues: staticQueues, sinks: { out: sink }, maxAttempts: 3, maxReceiveCount: 10 });
  /** One request: all its events go to the next partition in turn (0, 1, 0, ...). */
  const send = async (events: Ev[]) => {
    const event = { version: '2.0', rawPath: '/streams/events/events', headers: { 'content-type': 'application/json' }, requestContext: { http: { method: 'POST' }, requestId: unique('r') }, body: JSON.stringify(events), isBase64Encoded: false };
    expect((await ingest(event as unknown as APIGatewayProxyEventV2)).statusCode).toBe(202);
  };
  /** Run the downstream stage until its queue is empty. */
  const stage1 = handler();
  const drainStage1 = () => runUntilDrained({ sqs: clients.sqs, queues: [queues[1]], container: () => ({ invoke: stage1 }) });
  const byUser = (u: string) => sink.records.filter((e) => e.user === u).map((e) => e.id);
  const deadLetters = async () => (await drainQueue(clients.sqs, queues[0].dlqUrl)).map((m) => decodeBody(m.Body!) as unknown as DeadLetterMessage & { k: string });
  return { job, queues, send, handler, drainStage1, byUser, deadLetters, sink };
}

const ev = (id: string, user: string, poison?: boolean): Ev => (poison ? { id, user, poison } : { id, user });
/** The same messages delivered again, as SQS does after a failure: the receive count goes up. */
const again = (ms: Message[], count: number): Message[] => ms.map((m) => ({ ...m, Attributes: { ...m.Attributes, ApproximateReceiveCount: String(count) } }));

describe('operator handler failures', () => {
  it('reports the first failed message and the rest of its group, retries the record, then parks it while the group keeps order', async () => {
    const t = await setup();
    const stage0 = t.handler();
    await t.send([ev('a1', 'ann'), ev('a2', 'ann')]); // A1 -> partition 0
    await t.send([ev('b1', 'bob')]); // A2 -> 1
    await t.send([ev('a3', 'ann'), ev('X', 'ann', true), ev('a4', 'ann')]); // A3 -> 0
    await t.send([ev('b2', 'bob')]); // A4 -> 1
    await t.send([ev('a5', 'ann')]); // A5 -> 0
    const msgs = await drainQueue(clients.sqs, t.queues[0].url); // [A1, A2], [A3, A4], [A5]
    const [A1, A2, A3, A4, A5] = msgs;
    expect(msgs.map((m) => m.Attributes!.MessageGroupId)).toEqual(['0', '1', '0', '1', '0']);

    // Lambda's batch mixes the groups, each in order.
    const first = await stage0(sqsEvent([A1, A2, A3, A4, A5], t.queues[0].arn));
    expect(first.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([A3.MessageId, A5.MessageId]);
    await t.drainStage1();
    expect(t.byUser('ann')).toEqual(['a1', 'a2']); // a3 shares the failing message: not committed
    expect(t.byUser('bob')).toEqual(['b1', 'b2']); // the other group flowed

    const second = await stage0(sqsEvent(again([A3, A5], 2), t.queues[0].arn));
    expect(second.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([A3.MessageId, A5.MessageId]);
    await t.drainStage1();
    expect(t.byUser('ann')).toEqual(['a1', 'a2']);
    expect(await t.deadLetters()).toEqual([]);

    // Third failure of X: parked; a3, a4 and a5 go on, in order.
    const third = await stage0(sqsEvent(again([A3, A5], 3), t.queues[0].arn));
    expect(third.batchItemFailures).toEqual([]);
    await t.drainStage1();
    expect(t.byUser('ann')).toEqual(['a1', 'a2', 'a3', 'a4', 'a5']);
    const [dead, ...more] = await t.deadLetters();
    expect(more).toEqual([]);
    // The record as it entered the stage, named by the operator that threw (chained behind the source) and its message's SequenceNumber.
    expect(dead).toMatchObject({ k: 'd', job: t.job.name, stage: 0, partition: 0, operator: 'check', index: 1, attempts: 3, offset: normaliseOffset(A3.Attributes!.SequenceNumber!) });
    expect(dead.record!.value).toEqual(ev('X', 'ann', true));
    expect(dead.error).toMatch(/operator "check" threw: poisoned event X/);

    // The whole batch once more (a redelivery after everything committed): nothing new anywhere.
    expect((await t.handler()(sqsEvent(again(msgs, 4), t.queues[0].arn))).batchItemFailures).toEqual([]);
    await t.drainStage1();
    expect(t.sink.records).toHaveLength(7);
    expect(await t.deadLetters()).toEqual([]);
  });

  it('fails an undecodable message and the rest of its group only; parks at once at the queue\'s last receive', async () => {
    const t = await setup();
    const stage0 = t.handler();
    await t.send([ev('a1', 'ann')]); // -> 0
    await t.send([ev('b1', 'bob')]); // -> 1
    await t.send([ev('Y', 'ann', true), ev('a2', 'ann')]); // -> 0
    await t.send([ev('b2', 'bob')]); // -> 1
    const [R1, R2, R3, R4] = await drainQueue(clients.sqs, t.queues[0].url);
    const garbage: Message = { ...R2, MessageId: 'garbage-1', Body: 'not a sluice message' };
    const res = await stage0(sqsEvent([R1, R2, garbage, R4], t.queues[0].arn));
    expect(res.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(['garbage-1', R4.MessageId]);

    // R3 at receive 10 = maxReceiveCount: SQS would move it to the DLQ next, so Y is parked after one attempt.
    expect((await stage0(sqsEvent(again([R3], 10), t.queues[0].arn))).batchItemFailures).toEqual([]);
    expect((await stage0(sqsEvent([R4], t.queues[0].arn))).batchItemFailures).toEqual([]);
    await t.drainStage1();
    expect(t.byUser('ann')).toEqual(['a1', 'a2']);
    expect(t.byUser('bob')).toEqual(['b1', 'b2']);
    const dead = await t.deadLetters();
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ attempts: 1, record: { value: ev('Y', 'ann', true) } });
  });

  it('parks a poisoned record through real redeliveries and keeps every group in order', async () => {
    const t = await setup();
    const events = Array.from({ length: 24 }, (_, i) => ev(`e${i}`, ['ann', 'bob', 'cy'][i % 3], i === 9));
    for (let i = 0; i < events.length; i += 4) await t.send(events.slice(i, i + 4));
    const stats = await runUntilDrained({ sqs: clients.sqs, queues: t.queues, container: () => ({ invoke: t.handler() }), maxInvocations: 200 });
    expect(stats.failures).toBeGreaterThan(0);
    // Per key, the order in which each source partition received the events (request r went to partition r mod 2).
    const partitionOf = (id: string) => Math.floor(Number(id.slice(1)) / 4) % 2;
    for (const u of ['ann', 'bob', 'cy']) {
      const want = events.filter((e) => e.user === u && !e.poison).map((e) => e.id);
      expect([...t.byUser(u)].sort()).toEqual([...want].sort());
      for (const p of [0, 1]) expect(t.byUser(u).filter((id) => partitionOf(id) === p)).toEqual(want.filter((id) => partitionOf(id) === p));
    }
    const dead = await t.deadLetters();
    expect(dead.map((d) => [d.record!.value, d.attempts])).toEqual([[events[9], 3]]);
  });
});
