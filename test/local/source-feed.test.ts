import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { SourceDef } from '../../lib/api/sources.ts';
import { ManualClock, WatermarkStrategies } from '../../lib/api/types.ts';
import { type FeedHost, SourceFeed } from '../../lib/local/source-feed.ts';
import { SourcePartitioner } from '../../lib/local/sources.ts';
import { createReader, type RejectedInput, toRecord } from '../../lib/transport/sources.ts';
import { columnsOf, type Envelope } from '../../lib/transport/envelope.ts';

/** An event whose timestamp is fine, missing, not finite, of the wrong type, or whose extractor throws. */
type Ev = { t: unknown } | { boom: string };
const evArb: fc.Arbitrary<Ev> = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0, max: 1_000_000 }).map((t) => ({ t })) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>(Number.NaN, Number.POSITIVE_INFINITY, 'late', undefined, null).map((t) => ({ t })) },
  { weight: 1, arbitrary: fc.constant({ boom: 'no timestamp here' }) },
);

const extract = (e: Ev): number => {
  if ('boom' in e) throw new Error(e.boom);
  return e.t as number;
};

function defOf(items: readonly Ev[], withSchema: boolean): SourceDef<Ev> {
  return {
    name: 'in',
    binding: { kind: 'items', items },
    timestamp: extract,
    watermark: WatermarkStrategies.boundedOutOfOrderness(5),
    // A schema that accepts everything but the events with t === 7 (the record path with a schema).
    ...(withSchema ? { schema: z.any().refine((e: Ev) => !('t' in e) || e.t !== 7, 't must not be 7') as unknown as z.ZodType<Ev> } : {}),
  };
}

async function feedAll(items: readonly Ev[], batchSize: number, partitions: number, withSchema: boolean) {
  const clock = new ManualClock(0);
  const def = defOf(items, withSchema);
  const feed = new SourceFeed(def, createReader(def.binding as never, 'in', clock), new SourcePartitioner(def, 0, partitions, clock), 0, undefined, false);
  const envelopes: Envelope[] = [];
  const rejected: RejectedInput[] = [];
  let accepted = 0;
  const host: FeedHost = { clock, batchSize, room: () => true, enqueue: (env) => envelopes.push(env), rejected: (r) => rejected.push(r), accepted: (n) => (accepted += n) };
  while (!feed.done) await feed.pull(host);
  // Data envelopes (not the final ones), their chunks stamped in order, as their partitions would.
  const data = envelopes.filter((e) => columnsOf(e) !== undefined);
  const heads: Record<string, number> = {};
  feed.heads(heads);
  return { envelopes: data, rejected, accepted, def, clock, heads, stampedOnApply: feed.stampOnApply };
}

const recordsOf = (env: Envelope) => {
  const c = columnsOf(env);
  return c ? c.values.map((value, i) => ({ value, timestamp: c.timestamps[i] })) : env.records;
};

describe('source feed: events into chunks of records', () => {
  it('matches the record-per-event model: chunks cut before rejection, round-robin over partitions, rejections with their positions', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(evArb, { maxLength: 60 }), fc.integer({ min: 1, max: 7 }), fc.integer({ min: 1, max: 3 }), fc.boolean(), async (items, batchSize, partitions, withSchema) => {
        const { envelopes, rejected, accepted, def, clock, heads, stampedOnApply } = await feedAll(items, batchSize, partitions, withSchema);
        // Without a schema, chunks are stamped when applied (SourceStamp): sent before their
        // events are read.
        expect(stampedOnApply).toBe(!withSchema);
        // The model: pulled events are cut into chunks of batchSize per partition turn
        // (a pull reads batchSize * partitions events), each event becomes a record or a
        // rejection; a chunk left without records sends nothing and takes no turn, whether
        // stamped before it is sent (with a schema) or when applied.
        const want: { partition: number; records: { value: unknown; timestamp: number }[] }[] = [];
        const wantRejected: RejectedInput[] = [];
        let next = 0;
        for (let i = 0; i < items.length; i += batchSize) {
          const records = [];
          for (let j = i; j < Math.min(i + batchSize, items.length); j++) {
            const r = toRecord(def, items[j], clock);
            if (typeof r === 'string') wantRejected.push({ source: 'in', position: `event ${j}`, error: r });
            else records.push(r);
          }
          if (records.length === 0) continue;
          want.push({ partition: next, records });
          next = (next + 1) % partitions;
        }
        expect(envelopes.map((e) => ({ partition: e.toPartition, records: recordsOf(e) }))).toEqual(want);
        expect(rejected).toEqual(wantRejected);
        expect(accepted).toBe(items.length - wantRejected.length);
        // Each partition's envelopes carry consecutive sequence numbers, and its channel's
        // watermark after each (the envelope's, or the one derived from its records, as the
        // partition takes it) is its largest timestamp so far minus the delay. Stamped before
        // sent, the envelope's own says so.
        for (let p = 0; p < partitions; p++) {
          let max = Number.NEGATIVE_INFINITY;
          let channel = Number.NEGATIVE_INFINITY;
          envelopes
            .filter((e) => e.toPartition === p)
            .forEach((e, k) => {
              for (const r of recordsOf(e)) max = Math.max(max, r.timestamp);
              expect(e.seq).toBe(k + 1);
              channel = Math.max(channel, e.watermark, columnsOf(e)!.maxTimestamp - 5 - 1);
              expect(channel).toBe(max - 5 - 1);
              if (!stampedOnApply) expect(e.watermark).toBe(max - 5 - 1);
            });
          // The partition's position (records sent) counts every stamped chunk.
          expect(heads[`in#${p}`]).toBe(want.filter((w) => w.partition === p).reduce((n, w) => n + w.records.length, 0));
        }
      }),
      { numRuns: 300 },
    );
  });

  it('names what is wrong with each rejected event', async () => {
    const { rejected } = await feedAll([{ t: 1 }, { boom: 'bad event' }, { t: 'late' }, { t: 2 }], 2, 1, false);
    expect(rejected).toEqual([
      { source: 'in', position: 'event 1', error: 'timestamp: the extractor threw: bad event' },
      { source: 'in', position: 'event 2', error: 'timestamp: expected a finite number of epoch milliseconds, received "late" (string)' },
    ]);
  });
});
