/**
 * Where a failure is (issue 3): a record on a log-fed source channel is located by its
 * offset (on AWS the SQS SequenceNumber), and the dead letter a retry parks carries that
 * offset and names the operator that threw, not the first operator of the stage.
 */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { compile } from '../../lib/graph/compile.ts';
import { locationId, type ParkedFailure, PartitionRuntime, RecordFailedError } from '../../lib/runtime/partition.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import type { Envelope } from '../../lib/transport/envelope.ts';

describe('record locations', () => {
  it('carry the source offset, and the parked dead letter names the operator that threw', async () => {
    const job = new Job('offsets', { parallelism: 1 });
    job
      .ingest<number>('in', { timestamp: () => 0 })
      .map((n) => n + 1)
      .name('inc')
      .map((n) => {
        if (n === 3) throw new Error('three');
        return n;
      })
      .name('no-three')
      .sinkTo(Sinks.collect(), 'out');
    const plan = compile(job.graph);
    const backend = new InMemoryStateBackend();
    const open = () => PartitionRuntime.open({ plan, stage: 0, partition: 0, backend, clock: new ManualClock(0) });
    const env: Envelope = { channel: '0:0', edge: 0, toPartition: 0, seq: 7, offset: '18000000000000000042', records: [1, 2, 3].map((value) => ({ value, timestamp: 0 })), watermark: Number.NEGATIVE_INFINITY };

    const err = await (await open()).process([env]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RecordFailedError);
    const failed = err as RecordFailedError;
    expect(failed.operator).toBe('no-three');
    expect(failed.location).toEqual({ channel: '0:0', seq: 7, index: 1, offset: '18000000000000000042' });
    const id = locationId(failed.location!);
    expect(id).toBe('0:0#18000000000000000042#1');

    const skip = new Map<string, ParkedFailure>([[id, { error: failed.message, attempts: 3, operator: failed.operator }]]);
    const result = await (await open()).process([env], skip);
    expect(result.parked).toEqual([id]);
    const dead = result.outbox.flatMap((o) => (o.kind === 'deadLetter' ? [o.deadLetter] : []));
    expect(dead).toEqual([{ operator: 'no-three', channel: '0:0', seq: 7, index: 1, offset: '18000000000000000042', record: { value: 2, timestamp: 0 }, error: 'operator "no-three" threw: three', attempts: 3 }]);
    const out = result.outbox.flatMap((o) => (o.kind === 'sink' ? o.delivery.records : []));
    expect(out).toEqual([2, 4]);
  });
});
