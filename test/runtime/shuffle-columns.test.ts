/**
 * Columnar shuffles: what a partition sends on a hash or rebalance channel is a columnar
 * envelope whose plain form (what the outbox in DynamoDB, SQS bodies, held envelopes and
 * dead letters see) is exactly what the record path built, `{value, timestamp, key}` per
 * record on hash channels; and a receiving partition gives the same outputs, state,
 * failures and dead letters from the columns as from the plain copy.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { type Key, keyToString, ManualClock, MIN_WATERMARK } from '../../lib/api/types.ts';
import { encodePart } from '../../lib/aws/sqs/sqs-codec.ts';
import { MemoryBlobStore } from '../../lib/checkpoint/local-storage.ts';
import { channelId, compile, type PhysicalPlan } from '../../lib/graph/compile.ts';
import { keyGroupOf, partitionOfKeyGroup } from '../../lib/graph/keygroups.ts';
import { locationId, type ParkedFailure, PartitionRuntime, RecordFailedError } from '../../lib/runtime/partition.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import { type Barrier, columnarEnvelope, columnsOf, type Envelope, type OutboxEntry, recordCount, toPlainEnvelope } from '../../lib/transport/envelope.ts';

interface Ev {
  k: Key;
  v: unknown;
  t: number;
}

const MAX_P = 16;
const KEYED_P = 3;

/** in (1 partition) -> keyBy(k) -> count (3 partitions, throws on v === 'boom') -> map (1 partition: a rebalance channel) -> out. */
function shuffleJob(sourceParallelism = 1): PhysicalPlan {
  const job = new Job('shuffle', { parallelism: sourceParallelism, maxParallelism: MAX_P });
  job
    .ingest<Ev>('in', { timestamp: (e) => e.t })
    .keyBy((e) => e.k)
    .process({
      state: { n: valueState<number>() },
      processElement(e, ctx) {
        if (e.v === 'boom') throw new Error('boom');
        const n = (ctx.state.n.get() ?? 0) + 1;
        ctx.state.n.set(n);
        ctx.emit({ key: ctx.key, v: e.v, n });
      },
    })
    .name('count')
    .parallelism(KEYED_P)
    .map((o) => ({ o, seen: true }))
    .name('mark')
    .parallelism(1)
    .sinkTo(Sinks.collect(), 'out');
  return compile(job.graph);
}

const key: fc.Arbitrary<Key> = fc.oneof(fc.string({ maxLength: 3 }), fc.integer({ min: -4, max: 4 }), fc.array(fc.oneof(fc.string({ maxLength: 2 }), fc.integer({ min: 0, max: 3 })), { maxLength: 2 }));
const payload = fc.oneof(fc.integer(), fc.string({ maxLength: 4 }), fc.constant(undefined), fc.record({ x: fc.integer() }, { noNullPrototype: true }));
const events = fc.array(fc.record({ k: key, v: payload, t: fc.integer({ min: 0, max: 1000 }) }, { noNullPrototype: true }), { minLength: 1, maxLength: 40 });

const open = (plan: PhysicalPlan, stage: number, partition: number, backend = new InMemoryStateBackend()) => PartitionRuntime.open({ plan, stage, partition, backend, clock: new ManualClock(0) });
const channelsOf = (outbox: readonly OutboxEntry[]) => outbox.flatMap((o) => (o.kind === 'channel' ? [o.envelope] : []));
/** What a consumer of the outbox that stores or encodes it sees. */
const plainOutbox = (outbox: readonly OutboxEntry[]) => outbox.map((o) => (o.kind === 'channel' ? { ...o, envelope: toPlainEnvelope(o.envelope) } : o));

/** The source partition's outbox for events (one source envelope). */
async function send(plan: PhysicalPlan, evs: readonly Ev[], partition = 0): Promise<Envelope[]> {
  const src = await open(plan, 0, partition);
  const r = await src.process([{ channel: channelId(0, partition), edge: 0, toPartition: partition, seq: 1, records: evs.map((e) => ({ value: e, timestamp: e.t })), watermark: MIN_WATERMARK }]);
  return channelsOf(r.outbox);
}

describe('columnar shuffle envelopes', () => {
  it('seal to the record path plain form: {value, timestamp, key} per record, routed by key group, in input order', async () => {
    const plan = shuffleJob();
    const hash = plan.edges.find((e) => e.partitioning === 'hash')!;
    await fc.assert(
      fc.asyncProperty(events, async (evs) => {
        const sent = await send(plan, evs);
        // The record path: each record to the partition of its key group, with its key, one envelope per partition that got records.
        const expected: Envelope[] = [];
        for (let p = 0; p < KEYED_P; p++) {
          const records = evs.filter((e) => partitionOfKeyGroup(keyGroupOf(e.k, MAX_P), KEYED_P, MAX_P) === p).map((e) => ({ value: e, timestamp: e.t, key: e.k }));
          if (records.length) expected.push({ channel: channelId(hash.id, 0), edge: hash.id, toPartition: p, seq: 1, records, watermark: MIN_WATERMARK, idle: undefined });
        }
        const withRecords = sent.filter((e) => recordCount(e) > 0);
        expect(withRecords.map(toPlainEnvelope)).toStrictEqual(expected);
        for (const [i, env] of withRecords.entries()) {
          const cols = columnsOf(env)!;
          expect(cols.keyStrings).toEqual(cols.keys!.map(keyToString));
          expect(cols.keyGroups).toEqual(cols.keys!.map((k) => keyGroupOf(k, MAX_P)));
          // What the outbox in DynamoDB and the SQS bodies hold: the same bytes as the record path's.
          expect(encodePart(env)).toBe(encodePart(expected[i]));
          expect(JSON.parse(JSON.stringify(env))).toStrictEqual(JSON.parse(JSON.stringify(expected[i])));
          expect(structuredClone(toPlainEnvelope(env))).toStrictEqual(expected[i]);
        }
        // The watermark that follows goes to every partition, as a plain envelope without records.
        for (const env of sent.filter((e) => recordCount(e) === 0)) expect(columnsOf(env)).toBeUndefined();
      }),
      { numRuns: 60 },
    );
  });

  it('are applied with the same outputs and state as their plain copies, on hash and rebalance channels', async () => {
    const plan = shuffleJob();
    await fc.assert(
      fc.asyncProperty(events, async (evs) => {
        for (const env of (await send(plan, evs)).filter((e) => recordCount(e) > 0)) {
          const columnar = await open(plan, 1, env.toPartition);
          const plain = await open(plan, 1, env.toPartition);
          // Twice each: the second envelope finds the keys' state from the first.
          const again = columnarEnvelope({ ...toPlainEnvelope(env), seq: 2 }, columnsOf(env)!);
          const a = [await columnar.process([env]), await columnar.process([again])];
          const b = [await plain.process([toPlainEnvelope(env)]), await plain.process([toPlainEnvelope(again)])];
          expect(a.map((r) => plainOutbox(r.outbox))).toStrictEqual(b.map((r) => plainOutbox(r.outbox)));
          expect(a.map((r) => r.recordsIn)).toEqual([recordCount(env), recordCount(env)]);
          expect(columnar.operatorStats()).toEqual(plain.operatorStats());

          // The rebalance channel into 'mark': columns without keys; plain records without a key.
          const forward = channelsOf(a[0].outbox).filter((e) => recordCount(e) > 0);
          expect(forward.length).toBe(1);
          expect(columnsOf(forward[0])!.keys).toBeUndefined();
          expect(toPlainEnvelope(forward[0]).records.every((r) => Object.keys(r).join() === 'value,timestamp')).toBe(true);
          const down = [await (await open(plan, 2, 0)).process(forward), await (await open(plan, 2, 0)).process(forward.map(toPlainEnvelope))];
          expect(plainOutbox(down[0].outbox)).toStrictEqual(plainOutbox(down[1].outbox));
          expect(down[0].outbox.flatMap((o) => (o.kind === 'sink' ? o.delivery.records : []))).toHaveLength(recordCount(env));
        }
      }),
      { numRuns: 40 },
    );
  });

  it('attribute a failure to the record and park it as the same dead letter, with its key', async () => {
    const plan = shuffleJob();
    const evs: Ev[] = [0, 1, 2, 3, 4, 5].map((i) => ({ k: ['u', i % 2], v: i === 3 ? 'boom' : i, t: i }));
    const [env] = (await send(plan, evs)).filter((e) => recordCount(e) > 0 && e.records.some((r) => (r.value as Ev).v === 'boom'));
    const index = env.records.findIndex((r) => (r.value as Ev).v === 'boom');
    const rerun = async (input: Envelope) => {
      const backend = new InMemoryStateBackend();
      const err = (await (await open(plan, 1, input.toPartition, backend)).process([input]).catch((e: unknown) => e)) as RecordFailedError;
      expect(err).toBeInstanceOf(RecordFailedError);
      const skip = new Map<string, ParkedFailure>([[locationId(err.location!), { error: err.message, attempts: 3, operator: err.operator }]]);
      const retry = await (await open(plan, 1, input.toPartition, backend)).process([input], skip);
      return { operator: err.operator, record: err.record, location: err.location, outbox: plainOutbox(retry.outbox), parked: retry.parked };
    };
    const columnar = await rerun(env);
    expect(columnar.operator).toBe('count');
    expect(columnar.location).toEqual({ channel: env.channel, seq: env.seq, index });
    expect(columnar.record).toEqual({ k: ['u', 1], v: 'boom', t: 3 });
    const dead = columnar.outbox.flatMap((o) => (o.kind === 'deadLetter' ? [o.deadLetter] : []));
    expect(dead).toStrictEqual([{ operator: 'count', channel: env.channel, seq: env.seq, index, record: { value: { k: ['u', 1], v: 'boom', t: 3 }, timestamp: 3, key: ['u', 1] }, error: 'operator "count" threw: boom', attempts: 3 }]);
    expect(columnar).toStrictEqual(await rerun(toPlainEnvelope(env)));
  });

  it('held behind a barrier, are committed as their plain form with keys, and applied the same after alignment', async () => {
    const plan = shuffleJob(2);
    const hash = plan.edges.find((e) => e.partitioning === 'hash')!;
    const barrier: Barrier = { epoch: 1, baseEpoch: 0, full: ['1/0', '1/1', '1/2'], savepoint: false };
    const bar = (from: number, seq: number): Envelope => ({ channel: channelId(hash.id, from), edge: hash.id, toPartition: 0, seq, records: [], watermark: MIN_WATERMARK, barrier });
    const evs: Ev[] = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'].map((k, i) => ({ k, v: i, t: i }));
    // The first record-carrying envelope of source partition 0 into partition 0, renumbered to follow a barrier.
    const sent = (await send(plan, evs, 0)).find((e) => e.toPartition === 0 && recordCount(e) > 0)!;
    const data = columnarEnvelope({ ...toPlainEnvelope(sent), seq: 2 }, columnsOf(sent)!);
    const run = async (input: Envelope) => {
      const backend = new InMemoryStateBackend();
      const at = () => PartitionRuntime.open({ plan, stage: 1, partition: 0, backend, clock: new ManualClock(0), checkpointStore: new MemoryBlobStore() });
      const rt = await at();
      await rt.process([bar(0, 1), input]);
      expect(rt.heldEnvelopes).toBe(1);
      const held = (await backend.recover(rt.scope)).progress.held!;
      // A crash here: the held envelope comes back from committed progress.
      const after = await (await at()).process([bar(1, 1)]);
      return { held, outbox: plainOutbox(after.outbox).filter((o) => o.kind !== 'ack') };
    };
    const columnar = await run(data);
    expect(columnar.held).toHaveLength(1);
    expect(columnsOf(columnar.held[0])).toBeUndefined();
    const routedTo0 = evs.filter((e) => partitionOfKeyGroup(keyGroupOf(e.k, MAX_P), KEYED_P, MAX_P) === 0);
    expect(routedTo0.length).toBeGreaterThan(0);
    expect(columnar.held[0]).toStrictEqual({ channel: channelId(hash.id, 0), edge: hash.id, toPartition: 0, seq: 2, records: routedTo0.map((e) => ({ value: e, timestamp: e.t, key: e.k })), watermark: MIN_WATERMARK, idle: undefined });
    expect(columnar.outbox.flatMap((o) => (o.kind === 'channel' ? o.envelope.records.map((r) => r.value) : []))).toHaveLength(recordCount(data));
    expect(columnar).toStrictEqual(await run(toPlainEnvelope(data)));
  });
});
