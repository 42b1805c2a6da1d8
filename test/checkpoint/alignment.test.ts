/**
 * Barrier alignment in the runtime core, driven envelope by envelope: records behind
 * an early barrier wait (held in committed progress), the snapshot is the consistent
 * cut, the barrier and the ack follow what precedes them in the outbox, a crash in the
 * middle of an alignment loses nothing, and stale or superseding barriers are handled.
 */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { MemoryBlobStore } from '../../lib/checkpoint/local-storage.ts';
import { decodeSnapshot } from '../../lib/checkpoint/snapshot.ts';
import { InjectedCrash } from '../../lib/errors.ts';
import { compile } from '../../lib/graph/compile.ts';
import { PartitionRuntime } from '../../lib/runtime/partition.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import type { Barrier, BarrierAck, Envelope, OutboxEntry } from '../../lib/transport/envelope.ts';

/** Counts per key; a key written `-k` has its count cleared (its entity is gone). */
function plan() {
  const job = new Job('align', { parallelism: 2 });
  job
    .fromItems<{ k: string }>('in', [])
    .keyBy((e) => e.k.replace('-', ''))
    .process({
      state: { n: valueState<number>() },
      processElement(e, ctx) {
        if (e.k.startsWith('-')) {
          ctx.state.n.clear();
          return;
        }
        const n = (ctx.state.n.get() ?? 0) + 1;
        ctx.state.n.set(n);
        ctx.emit({ k: e.k, n });
      },
    })
    .name('count')
    .parallelism(1)
    .sinkTo(Sinks.collect(), 'out');
  return compile(job.graph);
}

const barrier = (epoch: number, baseEpoch = 0, full: string[] = ['1/0']): Barrier => ({ epoch, baseEpoch, full, savepoint: false });
const rec = (ch: string, seq: number, ...keys: string[]): Envelope => ({
  channel: ch,
  edge: 1,
  toPartition: 0,
  seq,
  records: keys.map((k) => ({ value: { k }, timestamp: 0, key: k.replace('-', '') })),
  watermark: 0,
});
const bar = (ch: string, seq: number, b: Barrier): Envelope => ({ channel: ch, edge: 1, toPartition: 0, seq, records: [], watermark: 0, barrier: b });

class World {
  readonly plan = plan();
  readonly backend = new InMemoryStateBackend();
  readonly blobs = new MemoryBlobStore();
  readonly clock = new ManualClock(1000);
  crashOnCommit = -1;
  private commits = 0;
  open(): Promise<PartitionRuntime> {
    return PartitionRuntime.open({
      plan: this.plan,
      stage: 1,
      partition: 0,
      backend: this.backend,
      clock: this.clock,
      checkpointStore: this.blobs,
      beforeCommit: () => {
        if (this.commits++ === this.crashOnCommit) throw new InjectedCrash('before-commit');
      },
    });
  }
  async snapshotOf(ack: BarrierAck): Promise<Record<string, unknown>> {
    const s = decodeSnapshot((await this.blobs.get(ack.snapshot!.key))!);
    return Object.fromEntries(s.entities.map(([, e, f]) => [e.split('\u0001')[1].slice(1), f && Object.fromEntries(f).n]));
  }
}

/** The outbox as a readable trace: sink rows with their barrier tag, barriers forwarded, acks. */
function trace(outbox: readonly OutboxEntry[]): string[] {
  return outbox.flatMap((o) => {
    if (o.kind === 'sink') return o.delivery.records.map((r) => `${(r as { k: string }).k}=${(r as { n: number }).n}@${o.delivery.afterBarrier}`);
    if (o.kind === 'ack') return [`ack ${o.ack.epoch}`];
    if (o.kind === 'channel' && o.envelope.barrier) return [`barrier ${o.envelope.barrier.epoch}`];
    return [];
  });
}

const acks = (outbox: readonly OutboxEntry[]) => outbox.flatMap((o) => (o.kind === 'ack' ? [o.ack] : []));

describe('barrier alignment', () => {
  it('envelopes behind an early barrier wait; the snapshot is the cut; outputs and ack come in order', async () => {
    const w = new World();
    const rt = await w.open();
    const r1 = await rt.process([rec('1:0', 1, 'a'), bar('1:0', 2, barrier(1)), rec('1:0', 3, 'a', 'b')]);
    expect(trace(r1.outbox)).toEqual(['a=1@0']);
    expect(rt.aligningEpoch).toBe(1);
    expect(rt.heldEnvelopes).toBe(1);

    const r2 = await rt.process([rec('1:1', 1, 'c'), bar('1:1', 2, barrier(1)), rec('1:1', 3, 'c')]);
    // c=1 precedes the barrier on 1:1; a=2, b=1 waited behind it on 1:0; c=2 follows it on 1:1.
    expect(trace(r2.outbox)).toEqual(['c=1@0', 'ack 1', 'a=2@1', 'b=1@1', 'c=2@1']);
    const [ack] = acks(r2.outbox);
    expect(ack).toMatchObject({ epoch: 1, stage: 1, partition: 0, baseEpoch: 0, positions: {} });
    expect(ack.snapshot!.full).toBe(true);
    expect(await w.snapshotOf(ack)).toEqual({ a: 1, c: 1 });
    expect(rt.aligningEpoch).toBeUndefined();
    expect(rt.heldEnvelopes).toBe(0);
    expect(rt.lastBarrier).toBe(1);
  });

  it('a crash in the middle of an alignment loses nothing: held envelopes are committed', async () => {
    const w = new World();
    let rt = await w.open();
    await rt.process([rec('1:0', 1, 'a'), bar('1:0', 2, barrier(1)), rec('1:0', 3, 'a')]);
    // Crash: a new runtime from committed state; the queue redelivers what it had (duplicates dropped).
    rt = await w.open();
    expect(rt.aligningEpoch).toBe(1);
    expect(rt.heldEnvelopes).toBe(1);
    const again = await rt.process([rec('1:0', 1, 'a'), bar('1:0', 2, barrier(1)), rec('1:0', 3, 'a')]);
    expect(again.duplicatesDropped).toBe(3);
    // Crash on the barrier's own commit (the second commit since the first open): nothing of it lands.
    w.crashOnCommit = 1;
    await expect(rt.process([bar('1:1', 1, barrier(1))])).rejects.toThrow(InjectedCrash);
    rt = await w.open();
    const r = await rt.process([bar('1:1', 1, barrier(1)), rec('1:1', 2, 'b')]);
    expect(trace(r.outbox)).toEqual(['ack 1', 'a=2@1', 'b=1@1']);
    expect(await w.snapshotOf(acks(r.outbox)[0])).toEqual({ a: 1 });
    // The outbox (nothing was marked delivered here) survives a crash after the commit.
    const reopened = await w.open();
    expect(trace(reopened.recoveredOutbox)).toEqual(['a=1@0', 'ack 1', 'a=2@1', 'b=1@1']);
  });

  it('forwards the barrier downstream and writes deltas of the keys changed since the base', async () => {
    const w = new World();
    const rt = await w.open();
    await rt.process([rec('1:0', 1, 'a', 'b', 'c'), bar('1:0', 2, barrier(1)), bar('1:1', 1, barrier(1))]);
    const r = await rt.process([rec('1:0', 3, 'b'), bar('1:0', 4, barrier(2, 1, [])), bar('1:1', 2, barrier(2, 1, []))]);
    const [ack] = acks(r.outbox);
    expect(ack.snapshot!.full).toBe(false);
    expect(await w.snapshotOf(ack)).toEqual({ b: 2 });
    // Epoch 3 aborted before it was acked everywhere? Here: barrier 3 completes, but the
    // coordinator never commits it; epoch 4's delta is still against base 2 and must include 3's keys.
    const r3 = await rt.process([rec('1:0', 5, 'c'), bar('1:0', 6, barrier(3, 2, [])), bar('1:1', 3, barrier(3, 2, []))]);
    expect(await w.snapshotOf(acks(r3.outbox)[0])).toEqual({ c: 2 });
    const r4 = await rt.process([rec('1:0', 7, 'a'), bar('1:0', 8, barrier(4, 2, [])), bar('1:1', 4, barrier(4, 2, []))]);
    expect(await w.snapshotOf(acks(r4.outbox)[0])).toEqual({ a: 2, c: 2 });
  });

  it('a delta leaves out entities that came and went since its base, while it knows what the base held', async () => {
    const w = new World();
    let rt = await w.open();
    const entitiesOf = async (ack: BarrierAck) => decodeSnapshot((await w.blobs.get(ack.snapshot!.key))!).entities.map(([, e, f]) => `${e.split('\u0001')[1].slice(1)}=${f && Object.fromEntries(f).n}`);
    const r1 = await rt.process([rec('1:0', 1, 'a', 'b'), bar('1:0', 2, barrier(1)), bar('1:1', 1, barrier(1))]);
    expect(await entitiesOf(acks(r1.outbox)[0])).toEqual(['a=1', 'b=1']);
    // c comes and goes after base 1: no row; a goes: its row says so.
    const r2 = await rt.process([rec('1:0', 3, 'c', '-c', '-a'), bar('1:0', 4, barrier(2, 1, [])), bar('1:1', 2, barrier(2, 1, []))]);
    expect(await entitiesOf(acks(r2.outbox)[0])).toEqual(['a=null']);
    // Epoch 2 never committed: epoch 3's base is 1 again, which this runtime no longer knows
    // (its last snapshot is 2): every changed entity has its row, gone ones included.
    const r3 = await rt.process([rec('1:0', 5, 'd', '-d'), bar('1:0', 6, barrier(3, 1, [])), bar('1:1', 3, barrier(3, 1, []))]);
    expect(await entitiesOf(acks(r3.outbox)[0])).toEqual(['a=null', 'c=null', 'd=null']);
    // Base 3 is known again (the rows of 3 brought the entities at 2 up to date).
    const r4 = await rt.process([rec('1:0', 7, 'e', '-e', '-b'), bar('1:0', 8, barrier(4, 3, [])), bar('1:1', 4, barrier(4, 3, []))]);
    expect(await entitiesOf(acks(r4.outbox)[0])).toEqual(['b=null']);
    // A recovered runtime does not know what its base held: gone entities keep their rows.
    rt = await w.open();
    const r5 = await rt.process([rec('1:0', 9, 'f', '-f'), bar('1:0', 10, barrier(5, 4, [])), bar('1:1', 5, barrier(5, 4, []))]);
    expect(await entitiesOf(acks(r5.outbox)[0])).toEqual(['f=null']);
    // A full snapshot holds the present entities, and the next delta knows them.
    const r6 = await rt.process([rec('1:0', 11, 'g'), bar('1:0', 12, barrier(6, 5)), bar('1:1', 6, barrier(6, 5))]);
    expect(await entitiesOf(acks(r6.outbox)[0])).toEqual(['g=1']);
    const r7 = await rt.process([rec('1:0', 13, 'h', '-h', '-g'), bar('1:0', 14, barrier(7, 6, [])), bar('1:1', 7, barrier(7, 6, []))]);
    expect(await entitiesOf(acks(r7.outbox)[0])).toEqual(['g=null']);
  });

  it('a barrier above the one being aligned supersedes it; stale barriers are ignored', async () => {
    const w = new World();
    const rt = await w.open();
    // Epoch 1's barrier reached 1:0 only (a coordinator restart gave it up); epoch 2 arrives everywhere.
    await rt.process([bar('1:0', 1, barrier(1)), rec('1:0', 2, 'a'), bar('1:0', 3, barrier(2))]);
    expect(rt.aligningEpoch).toBe(1);
    const r = await rt.process([rec('1:1', 1, 'b'), bar('1:1', 2, barrier(2))]);
    expect(trace(r.outbox)).toEqual(['b=1@0', 'a=1@0', 'ack 2']);
    expect(await w.snapshotOf(acks(r.outbox)[0])).toEqual({ a: 1, b: 1 });
    // The late barrier 1 on 1:1 is stale now.
    const late = await rt.process([bar('1:1', 3, barrier(1)), rec('1:1', 4, 'b')]);
    expect(trace(late.outbox)).toEqual(['b=2@2']);
    expect(rt.aligningEpoch).toBeUndefined();
  });

  it('an idle partition (no records) still aligns, snapshots and acks', async () => {
    const w = new World();
    const rt = await w.open();
    const r = await rt.process([bar('1:0', 1, barrier(1)), bar('1:1', 1, barrier(1))]);
    expect(trace(r.outbox)).toEqual(['ack 1']);
    expect(acks(r.outbox)[0].snapshot).toMatchObject({ full: true, entities: 0 });
  });
});
