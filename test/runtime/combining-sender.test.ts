/**
 * The combining sender (lib/runtime/combining-sender.ts) and the window that takes its
 * partials, one partition at a time:
 * - each (key, pane) of a buffer becomes one partial, in the order of its first record,
 *   with its records folded in arrival order, its latest timestamp and the record count;
 * - a buffer is one envelope: records of one (key, pane) across a watermark move stay apart;
 * - a record in no window is not sent; a throw in add() is the window's failure at the
 *   sender's input record, and a retry parks that record alone;
 * - the receiver gives the same result from the columns and from their SQS encoding, and
 *   never changes the partials of the envelope it applied (a redelivery reuses them).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { AggregateFunction } from '../../lib/api/functions.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { keyToString, ManualClock, MIN_WATERMARK } from '../../lib/api/types.ts';
import { type WindowAssigner, Windows } from '../../lib/api/windows.ts';
import { decodeValue, encodeValue } from '../../lib/aws/dynamodb/dynamodb-layout.ts';
import { channelId, compile, type PhysicalPlan } from '../../lib/graph/compile.ts';
import { keyGroupOf, partitionOfKeyGroup } from '../../lib/graph/keygroups.ts';
import { locationId, type ParkedFailure, PartitionRuntime, RecordFailedError } from '../../lib/runtime/partition.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import { columnsOf, type Envelope, type OutboxEntry, recordCount, toPlainEnvelope } from '../../lib/transport/envelope.ts';

interface Ev {
  k: string;
  id: number;
  t: number;
}

const MAX_P = 16;
const WINDOW_P = 2;

/** Ids in arrival order; add and merge update their first argument in place (allowed: it is the window's own state). */
const ids: AggregateFunction<Ev, number[], number[]> = {
  createAccumulator: () => [],
  add: (e, acc) => {
    if (e.id < 0) throw new Error(`bad id ${e.id}`);
    acc.push(e.id);
    return acc;
  },
  getResult: (acc) => acc,
  merge: (a, b) => {
    a.push(...b);
    return a;
  },
};

/** in (1 partition) -> keyBy(k) -> window 'win' (2 partitions) -> out; `combine` false: the same without pre-aggregation. */
function combinedJob(assigner: WindowAssigner = Windows.sliding(10, 5), combine = true): PhysicalPlan {
  const job = new Job('combine', { parallelism: 1, maxParallelism: MAX_P });
  job
    .ingest<Ev>('in', { timestamp: (e) => e.t })
    .keyBy((e) => e.k)
    .window(assigner)
    .preAggregate(combine)
    .aggregate(ids, (list, { key, window }) => ({ key, ...window, ids: list }))
    .name('win')
    .parallelism(WINDOW_P)
    .sinkTo(Sinks.collect(), 'out');
  const plan = compile(job.graph);
  expect(plan.edges.filter((e) => e.combine).length).toBe(combine ? 1 : 0);
  return plan;
}

const open = (plan: PhysicalPlan, stage: number, partition: number, backend = new InMemoryStateBackend()) => PartitionRuntime.open({ plan, stage, partition, backend, clock: new ManualClock(0) });
const channelsOf = (outbox: readonly OutboxEntry[]) => outbox.flatMap((o) => (o.kind === 'channel' ? [o.envelope] : []));
const sourceEnvelope = (evs: readonly Ev[], seq = 1): Envelope => ({ channel: channelId(0, 0), edge: 0, toPartition: 0, seq, records: evs.map((e) => ({ value: e, timestamp: e.t })), watermark: MIN_WATERMARK });
const partitionOf = (k: string) => partitionOfKeyGroup(keyGroupOf(k, MAX_P), WINDOW_P, MAX_P);
const paneOf = (t: number, g: number) => t - (((t % g) + g) % g);

/** What one source envelope of `evs` should become on partition p: one partial per (key, pane) in first-record order. */
function expectedPartials(evs: readonly Ev[], p: number, g: number) {
  const out: { value: { partial: number[]; records: number }; timestamp: number; key: string }[] = [];
  const at = new Map<string, number>();
  for (const e of evs) {
    if (partitionOf(e.k) !== p) continue;
    const id = `${e.k}|${paneOf(e.t, g)}`;
    const i = at.get(id);
    if (i === undefined) {
      at.set(id, out.length);
      out.push({ value: { partial: [e.id], records: 1 }, timestamp: e.t, key: e.k });
    } else {
      out[i].value.partial.push(e.id);
      out[i].value.records++;
      out[i].timestamp = Math.max(out[i].timestamp, e.t);
    }
  }
  return out;
}

const evsArb = fc.array(fc.record({ k: fc.constantFrom('a', 'b', 'c', 'd', 'e'), id: fc.nat({ max: 1000 }), t: fc.integer({ min: -20, max: 40 }) }, { noNullPrototype: true }), { minLength: 1, maxLength: 40 });

describe('the combining sender', () => {
  it('sends one partial per (key, pane) of a buffer: first-record order, records folded in order, latest timestamp, record count', async () => {
    const plan = combinedJob();
    const edge = plan.edges.find((e) => e.combine)!;
    await fc.assert(
      fc.asyncProperty(evsArb, async (evs) => {
        const src = await open(plan, 0, 0);
        const sent = channelsOf((await src.process([sourceEnvelope(evs)])).outbox).filter((e) => recordCount(e) > 0);
        for (let p = 0; p < WINDOW_P; p++) {
          const expected = expectedPartials(evs, p, 5);
          const env = sent.find((e) => e.toPartition === p);
          if (expected.length === 0) {
            expect(env).toBeUndefined();
            continue;
          }
          expect(toPlainEnvelope(env!)).toStrictEqual({ channel: channelId(edge.id, 0), edge: edge.id, toPartition: p, seq: 1, records: expected, watermark: MIN_WATERMARK, idle: undefined });
          const cols = columnsOf(env!)!;
          expect(cols.maxTimestamp).toBe(Math.max(...evs.filter((e) => partitionOf(e.k) === p).map((e) => e.t)));
          expect(cols.keyStrings).toEqual(expected.map((r) => keyToString(r.key)));
          expect(cols.keyGroups).toEqual(expected.map((r) => keyGroupOf(r.key, MAX_P)));
          // The SQS and DynamoDB encoding (tagged JSON) keeps partials as they are.
          expect(decodeValue(encodeValue(env))).toStrictEqual(toPlainEnvelope(env!));
        }
      }),
      { numRuns: 80 },
    );
  });

  it('seals a buffer per watermark move: a (key, pane) in two source envelopes is two partials, one per envelope', async () => {
    const plan = combinedJob(Windows.tumbling(100));
    const src = await open(plan, 0, 0);
    const first: Ev[] = [{ k: 'a', id: 1, t: 10 }, { k: 'a', id: 2, t: 12 }];
    const second: Ev[] = [{ k: 'a', id: 3, t: 11 }, { k: 'a', id: 4, t: 30 }];
    const sent = channelsOf((await src.process([sourceEnvelope(first, 1), sourceEnvelope(second, 2)])).outbox).filter((e) => recordCount(e) > 0);
    expect(sent.map((e) => [e.watermark, e.records.map((r) => [r.value, r.timestamp])])).toEqual([
      [MIN_WATERMARK, [[{ partial: [1, 2], records: 2 }, 12]]],
      // The source watermark moved to 12 - 0 - 1 after the first envelope.
      [11, [[{ partial: [3, 4], records: 2 }, 30]]],
    ]);
  });

  it('does not send a record that lies in no window (slide longer than the size)', async () => {
    const plan = combinedJob(Windows.sliding(5, 10));
    const src = await open(plan, 0, 0);
    const evs: Ev[] = [0, 3, 4, 5, 9, 10, 14, 15].map((t, id) => ({ k: 'a', id, t }));
    const sent = channelsOf((await src.process([sourceEnvelope(evs)])).outbox).filter((e) => recordCount(e) > 0);
    // Panes are 5 ms long; [5, 10) and [15, 20) belong to no window.
    expect(sent.flatMap((e) => e.records.map((r) => r.value))).toEqual([{ partial: [0, 1, 2], records: 3 }, { partial: [5, 6], records: 2 }]);
    // A target whose records all lay in no window still gets the envelope it would have got, without records.
    const gapOnly = channelsOf((await (await open(plan, 0, 0)).process([sourceEnvelope([{ k: 'a', id: 0, t: 7 }])])).outbox);
    expect(gapOnly.map((e) => [e.toPartition, e.watermark, e.records.length, columnsOf(e)])).toEqual([
      [partitionOf('a'), MIN_WATERMARK, 0, undefined],
      // Then the watermark move (7 - 0 - 1), to every partition.
      [0, 6, 0, undefined],
      [1, 6, 0, undefined],
    ]);
  });

  it('makes a throw in add() the window\'s failure at the input record, and a retry parks that record alone', async () => {
    const plan = combinedJob(Windows.tumbling(100));
    const evs: Ev[] = [{ k: 'a', id: 1, t: 1 }, { k: 'a', id: 2, t: 2 }, { k: 'a', id: -1, t: 3 }, { k: 'a', id: 4, t: 4 }];
    const input = sourceEnvelope(evs);
    const backend = new InMemoryStateBackend();
    const err = (await (await open(plan, 0, 0, backend)).process([input]).catch((e: unknown) => e)) as RecordFailedError;
    expect(err).toBeInstanceOf(RecordFailedError);
    expect(err.operator).toBe('win');
    expect(err.record).toEqual(evs[2]);
    expect(err.location).toEqual({ channel: input.channel, seq: 1, index: 2 });
    expect(err.message).toContain('bad id -1');
    const skip = new Map<string, ParkedFailure>([[locationId(err.location!), { error: err.message, attempts: 3, operator: err.operator }]]);
    const retry = await (await open(plan, 0, 0, backend)).process([input], skip);
    expect(retry.parked).toEqual([locationId(err.location!)]);
    const dead = retry.outbox.flatMap((o) => (o.kind === 'deadLetter' ? [o.deadLetter] : []));
    expect(dead).toStrictEqual([{ operator: 'win', channel: input.channel, seq: 1, index: 2, record: { value: evs[2], timestamp: 3 }, error: err.message, attempts: 3 }]);
    const values = channelsOf(retry.outbox).flatMap((e) => e.records.map((r) => r.value));
    expect(values).toEqual([{ partial: [1, 2, 4], records: 3 }]);
  });

  it('makes a timestamp the window would reject the window\'s failure at the sender', async () => {
    const plan = combinedJob(Windows.tumbling(100));
    const err = (await (await open(plan, 0, 0)).process([sourceEnvelope([{ k: 'a', id: 1, t: 1.5 }])]).catch((e: unknown) => e)) as RecordFailedError;
    expect(err).toBeInstanceOf(RecordFailedError);
    expect(err.operator).toBe('win');
    expect(err.message).toContain('timestamp');
  });
});

describe('the window that takes partials', () => {
  it('gives the records\' output, from the columns and from their SQS encoding, and leaves the envelope\'s partials unchanged', async () => {
    const plan = combinedJob();
    const uncombined = combinedJob(Windows.sliding(10, 5), false);
    const rows = (r: { outbox: readonly OutboxEntry[] }) => r.outbox.flatMap((o) => (o.kind === 'sink' ? o.delivery.records : []));
    await fc.assert(
      fc.asyncProperty(evsArb, evsArb, async (a, b) => {
        const inputs = [sourceEnvelope(a, 1), sourceEnvelope(b, 2), { ...sourceEnvelope([], 3), watermark: Number.POSITIVE_INFINITY }];
        const sent = channelsOf((await (await open(plan, 0, 0)).process(inputs)).outbox);
        const records = channelsOf((await (await open(uncombined, 0, 0)).process(inputs)).outbox);
        for (let p = 0; p < WINDOW_P; p++) {
          const mine = sent.filter((e) => e.toPartition === p);
          const before = JSON.stringify(mine);
          const decoded = mine.map((e) => decodeValue(encodeValue(e)) as Envelope);
          const columnar = await (await open(plan, 1, p)).process(mine);
          const plain = await (await open(plan, 1, p)).process(decoded);
          const reference = await (await open(uncombined, 1, p)).process(records.filter((e) => e.toPartition === p));
          expect(rows(columnar)).toStrictEqual(rows(reference));
          expect(rows(plain)).toStrictEqual(rows(reference));
          // The window merged into its own copies: a redelivery would find the same partials.
          expect(JSON.stringify(mine)).toBe(before);
        }
      }),
      { numRuns: 60 },
    );
  });

  it('gives the records\' output when the sender\'s route cache starts over inside a buffer (a (key, pane) then has two partials)', async () => {
    const plan = combinedJob();
    const uncombined = combinedJob(Windows.sliding(10, 5), false);
    const rows = (r: { outbox: readonly OutboxEntry[] }) => r.outbox.flatMap((o) => (o.kind === 'sink' ? o.delivery.records : []));
    // More distinct keys than the cache keeps (4 096), then early keys again, all in one pane and one buffer.
    const keys = Array.from({ length: 10_000 }, (_, i) => `k${i}`);
    const evs: Ev[] = [...keys.map((k, i) => ({ k, id: i, t: 1 })), ...keys.slice(0, 50).map((k, i) => ({ k, id: 20_000 + i, t: 2 }))];
    const inputs = [sourceEnvelope(evs, 1), { ...sourceEnvelope([], 2), watermark: Number.POSITIVE_INFINITY }];
    const sent = channelsOf((await (await open(plan, 0, 0)).process(inputs)).outbox);
    const records = channelsOf((await (await open(uncombined, 0, 0)).process(inputs)).outbox);
    const partials = sent.flatMap((e) => e.records.map((r) => r.key));
    // The recurring keys started partials of their own after the cache started over.
    expect(partials.length).toBe(10_050);
    for (let p = 0; p < WINDOW_P; p++) {
      const combined = await (await open(plan, 1, p)).process(sent.filter((e) => e.toPartition === p));
      const reference = await (await open(uncombined, 1, p)).process(records.filter((e) => e.toPartition === p));
      expect(rows(combined)).toStrictEqual(rows(reference));
      expect(rows(combined).length).toBeGreaterThan(1000);
    }
    expect(sent.reduce((n, e) => n + recordCount(e), 0)).toBe(10_050);
  });
});
