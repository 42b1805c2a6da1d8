/**
 * The runtime core after an in-place restore on AWS (lib/aws/restore/restore.ts): a source
 * channel whose installed progress carries `replay` takes replayed envelopes (records
 * of the input log) first. They move the channel's record count, never its offset, are
 * not logged again, and clear the marker once it is reached; then the queue continues
 * strictly after the offset consumed before the restore (an older message is a duplicate).
 * A replayed envelope the marker does not cover is an InvariantError, never applied.
 */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock, MIN_WATERMARK, WatermarkStrategies } from '../../lib/api/types.ts';
import { compile } from '../../lib/graph/compile.ts';
import { InvariantError } from '../../lib/errors.ts';
import { replayChunks } from '../../lib/aws/restore/restore-replay.ts';
import { PartitionRuntime } from '../../lib/runtime/partition.ts';
import { emptyProgress } from '../../lib/state/backend.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import type { CommitBatch } from '../../lib/state/backend.ts';
import type { Envelope } from '../../lib/transport/envelope.ts';

function job() {
  const j = new Job('replay', { parallelism: 1, maxParallelism: 4 });
  j.ingest<{ n: number }>('in', { timestamp: () => 0, watermark: WatermarkStrategies.boundedOutOfOrderness(0) })
    .map((e) => e.n * 10)
    .sinkTo(Sinks.collect<number>(), 'out');
  return j;
}

const records = (...ns: number[]) => ns.map((n) => ({ value: { n }, timestamp: 0 }));

async function restored(replayUpTo?: number) {
  const plan = compile(job().graph);
  const backend = new InMemoryStateBackend();
  const scope = { job: 'replay', stage: 0, partition: 0 };
  const logged: CommitBatch[] = [];
  // The runtime commits to an in-memory store synchronously (StateBackend.commitSync).
  const commitSync = backend.commitSync.bind(backend);
  backend.commitSync = (b) => {
    logged.push(b);
    commitSync(b);
  };
  backend.install(scope, { progress: { ...emptyProgress(), inputs: { '0:0': { seq: 9, offset: '900', records: 3, watermark: MIN_WATERMARK, idle: false } }, ...(replayUpTo === undefined ? {} : { replay: { '0:0': replayUpTo } }) }, timers: [], entities: [] }, [0, 1, 2, 3]);
  const rt = await PartitionRuntime.open({ plan, stage: 0, partition: 0, backend, clock: new ManualClock(0), logInput: true });
  return { rt, backend, scope, logged };
}

const replayed = (seq: number, ...ns: number[]): Envelope => ({ channel: '0:0', edge: 0, toPartition: 0, seq, records: records(...ns), watermark: MIN_WATERMARK, replayed: true });
const fromQueue = (offset: string, ...ns: number[]): Envelope => ({ channel: '0:0', edge: 0, toPartition: 0, seq: Number(offset), offset, records: records(...ns), watermark: MIN_WATERMARK });

describe('replayed input after an in-place restore', () => {
  it('counts replayed records without moving the offset or logging them, clears the marker, then continues after the old offset', async () => {
    const { rt, backend, scope, logged } = await restored(6);
    expect(rt.pendingReplay).toEqual([{ channel: '0:0', from: 3, upTo: 6 }]);
    const r = await rt.process([replayed(-1, 1, 2), replayed(-2, 3), fromQueue('850', 99), fromQueue('901', 4)]);
    const sink = r.outbox.flatMap((e) => (e.kind === 'sink' ? e.delivery.records : []));
    // 99 was consumed before the restore (offset 850 <= 900): a duplicate.
    expect(sink).toEqual([10, 20, 30, 40]);
    expect(r.duplicatesDropped).toBe(1);
    expect(rt.pendingReplay).toEqual([]);
    const p = (await backend.recover(scope)).progress;
    expect(p.inputs['0:0']).toMatchObject({ offset: '901', records: 7 });
    expect(p.replay).toBeUndefined();
    // Only the queue's record is logged again, at its index.
    expect(logged.at(-1)!.inputLog).toEqual([{ channel: '0:0', source: 'in#0', from: 6, after: 0, records: records(4) }]);
  });

  it('refuses replayed records beyond the marker, or on a channel without one', async () => {
    const { rt } = await restored(4);
    await expect(rt.process([replayed(-1, 1, 2)])).rejects.toThrow(InvariantError);
    const none = await restored();
    await expect(none.rt.process([replayed(-1, 1)])).rejects.toThrow(/no replay/);
  });
});

describe('replayChunks', () => {
  it('cuts a replay into commits of about the given size, never splitting an envelope', () => {
    const envs = [replayed(-1, 1, 2, 3), replayed(-2, 4), replayed(-3, 5, 6), replayed(-4, 7, 8, 9, 10, 11)];
    expect(replayChunks(envs, 4).map((c) => c.map((e) => e.seq))).toEqual([[-1, -2], [-3], [-4]]);
    expect(replayChunks(envs, 100)).toHaveLength(1);
    expect(replayChunks([], 4)).toEqual([]);
  });
});
