/**
 * End to end: the partition runtime (the same core the Lambda handler runs) over the
 * DynamoDB backend on DynamoDB Local, for a small keyed job with state and event-time
 * timers, fed envelopes by hand. Outputs and state must equal the in-memory run, and a
 * redelivered envelope must be dropped, also by a fresh process that only has DynamoDB.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { keyToString, ManualClock, MAX_WATERMARK } from '../../lib/api/types.ts';
import { createStateTable, DynamoDbStateBackend } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { compile } from '../../lib/graph/compile.ts';
import { keyGroupOf } from '../../lib/graph/keygroups.ts';
import { entityId, PartitionRuntime } from '../../lib/runtime/partition.ts';
import type { StateBackend } from '../../lib/state/backend.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import type { Envelope } from '../../lib/transport/envelope.ts';
import { read } from '../state/backend-conformance.ts';

const client = new DynamoDBClient({ endpoint: inject('dynamodbEndpoint'), region: inject('awsRegion'), credentials: inject('awsCredentials') });
const table = `sluice-e2e-${process.pid}-${Date.now()}`;
beforeAll(() => createStateTable(client, table));
afterAll(() => client.destroy());

interface Click {
  user: string;
  ts: number;
}
type Out = { user: string; n: number; kind: 'count' | 'timer' };

const job = new Job(`e2e-${process.pid}-${Date.now() % 100000}`, { parallelism: 2, maxParallelism: 16 });
job
  .fromItems<Click>('clicks', [], { timestamp: (c) => c.ts, parallelism: 1 })
  .keyBy((c) => c.user)
  .process<Out, { n: ReturnType<typeof valueState<number>> }>({
    state: { n: valueState<number>() },
    processElement(c, ctx) {
      const n = (ctx.state.n.get() ?? 0) + 1;
      ctx.state.n.set(n);
      ctx.emit({ user: c.user, n, kind: 'count' });
      ctx.timers.registerEventTimeTimer(c.ts + 100);
    },
    onTimer(_ts, ctx) {
      ctx.emit({ user: String(ctx.key), n: ctx.state.n.get() ?? 0, kind: 'timer' });
    },
  })
  .name('count')
  .sinkTo(Sinks.collect<Out>());
const plan = compile(job.graph);
const users = ['ann', 'bob', 'cy', 'dee', 'eve', 'fay', 'gus'];
/** 12 source envelopes of 5 clicks, watermark trailing, then one that closes event time. */
const sourceEnvelopes: Envelope[] = Array.from({ length: 13 }, (_, i) => {
  const records = i < 12 ? Array.from({ length: 5 }, (_, j) => ({ value: { user: users[(i * 5 + j) % 7], ts: i * 50 + j }, timestamp: i * 50 + j })) : [];
  return { channel: '0:0', edge: 0, toPartition: 0, seq: i + 1, records, watermark: i < 12 ? i * 50 - 1 : MAX_WATERMARK };
});

async function run(backend: () => StateBackend) {
  const clock = new ManualClock(0);
  const b = backend();
  const open = (stage: number, partition: number) => PartitionRuntime.open({ plan, stage, partition, backend: b, clock });
  const source = await open(0, 0);
  const downstream = [await open(1, 0), await open(1, 1)];
  const outputs: Out[] = [];
  const delivered: Envelope[] = [];
  for (const env of sourceEnvelopes) {
    const r = await source.process([env]);
    await source.outboxDelivered(r.version);
    for (const o of r.outbox) {
      if (o.kind !== 'channel') continue;
      delivered.push(o.envelope);
      const d = downstream[o.envelope.toPartition];
      const r2 = await d.process([o.envelope]);
      await d.outboxDelivered(r2.version);
      for (const s of r2.outbox) if (s.kind === 'sink') outputs.push(...(s.delivery.records as Out[]));
    }
  }
  return { outputs, delivered, versions: [source.currentVersion, ...downstream.map((d) => d.currentVersion)] };
}

async function counts(backend: StateBackend): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const u of users) {
    const kg = keyGroupOf(u, 16);
    const partition = Math.floor((kg * 2) / 16);
    const scope = { job: plan.job.name, stage: 1, partition };
    await backend.recover(scope);
    out[u] = (await read(backend, scope, kg, entityId('count', keyToString(u))))?.n;
  }
  return out;
}

describe('PartitionRuntime over DynamoDbStateBackend', () => {
  it('gives the same outputs and state as over the in-memory backend, and drops redelivered envelopes', async () => {
    const memory = new InMemoryStateBackend();
    const expected = await run(() => memory);
    const dynamo = await run(() => new DynamoDbStateBackend({ client, tableName: table }));

    expect(expected.outputs.filter((o) => o.kind === 'count')).toHaveLength(60);
    expect(expected.outputs.filter((o) => o.kind === 'timer').length).toBeGreaterThan(0);
    expect(dynamo.outputs).toEqual(expected.outputs);
    expect(dynamo.delivered).toEqual(expected.delivered);
    expect(dynamo.versions).toEqual(expected.versions);
    const want = await counts(memory);
    expect(want).toEqual(Object.fromEntries(users.map((u, i) => [u, i < 4 ? 9 : 8])));
    expect(await counts(new DynamoDbStateBackend({ client, tableName: table }))).toEqual(want);

    // A redelivery to a fresh process (new backend, new runtime: only DynamoDB remembers) is dropped.
    const fresh = new DynamoDbStateBackend({ client, tableName: table });
    const first = dynamo.delivered.find((e) => e.records.length > 0)!;
    const rt = await PartitionRuntime.open({ plan, stage: 1, partition: first.toPartition, backend: fresh, clock: new ManualClock(0) });
    const again = await rt.process([first]);
    expect(again).toMatchObject({ committed: false, duplicatesDropped: 1, recordsIn: 0, outbox: [] });
    const src = await PartitionRuntime.open({ plan, stage: 0, partition: 0, backend: fresh, clock: new ManualClock(0) });
    expect(await src.process([sourceEnvelopes[3]])).toMatchObject({ committed: false, duplicatesDropped: 1 });
    expect(await counts(new DynamoDbStateBackend({ client, tableName: table }))).toEqual(want);
    expect(rt.recoveredOutbox).toEqual([]); // every outbox was delivered and cleared
  });
});
