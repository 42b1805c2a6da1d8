/**
 * Keyed state and timers in the runtime core, batch by batch: a failed batch leaves
 * committed state and timers untouched (its state writes and timer registrations are
 * dropped with it), and incremental-snapshot tracking marks every entity a commit
 * changed, including those changed only by their timers (registered or fired).
 */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { keyToString, ManualClock } from '../../lib/api/types.ts';
import { MemoryBlobStore } from '../../lib/checkpoint/local-storage.ts';
import { compile } from '../../lib/graph/compile.ts';
import { keyGroupOfString } from '../../lib/graph/keygroups.ts';
import { entityId, PartitionRuntime, RecordFailedError } from '../../lib/runtime/partition.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import type { Barrier, Envelope } from '../../lib/transport/envelope.ts';

interface Cmd {
  k: string;
  /** set, clear: a value and a timer, then the value's removal (the timer-hint test). */
  op: 'add' | 'timer' | 'boom' | 'set' | 'clear';
  t?: number;
}

function plan() {
  const job = new Job('keyed', { parallelism: 2 });
  job
    .fromItems<Cmd>('in', [])
    .keyBy((e) => e.k)
    .process({
      state: { n: valueState<{ n: number }>() },
      processElement(e, ctx) {
        if (e.op === 'timer') {
          // Timers only: this key's state is not touched.
          ctx.timers.registerEventTimeTimer(e.t!);
          return;
        }
        const cur = ctx.state.n.get() ?? { n: 0 };
        cur.n += 1;
        if (e.op === 'boom') {
          ctx.state.n.set({ n: 999 });
          ctx.timers.registerEventTimeTimer(50);
          throw new Error('boom');
        }
        ctx.state.n.set(cur);
      },
      onTimer(time, ctx) {
        ctx.emit({ k: ctx.key, fired: time });
      },
    })
    .name('count')
    .parallelism(1)
    .sinkTo(Sinks.collect(), 'out');
  return compile(job.graph);
}

const scope = { job: 'keyed', stage: 1, partition: 0 };
const entity = (k: string) => entityId('count', keyToString(k));
const kg = (k: string) => keyGroupOfString(keyToString(k), 128);

const env = (ch: string, seq: number, cmds: Cmd[], watermark = 0): Envelope => ({
  channel: ch,
  edge: 1,
  toPartition: 0,
  seq,
  records: cmds.map((c) => ({ value: c, timestamp: 0, key: c.k })),
  watermark,
});
const barrier = (ch: string, seq: number, b: Barrier): Envelope => ({ channel: ch, edge: 1, toPartition: 0, seq, records: [], watermark: 0, barrier: b });

function world(checkpoints: boolean) {
  const p = plan();
  const backend = new InMemoryStateBackend();
  const open = () => PartitionRuntime.open({ plan: p, stage: 1, partition: 0, backend, clock: new ManualClock(0), ...(checkpoints ? { checkpointStore: new MemoryBlobStore() } : {}) });
  const count = (k: string) => (backend.peek(scope, kg(k), entity(k))?.get('n') as { n: number } | undefined)?.n;
  return { backend, open, count };
}

describe('keyed state and timers in a partition', () => {
  it('a failed batch leaves committed state and timers as they were; reopened, the batch applies once', async () => {
    const w = world(false);
    const rt = await w.open();
    await rt.process([env('1:0', 1, [{ k: 'a', op: 'add' }, { k: 'a', op: 'add' }, { k: 'c', op: 'timer', t: 7 }])]);
    expect(w.count('a')).toBe(2);
    const before = await w.backend.recover(scope);

    const failing = env('1:0', 2, [{ k: 'a', op: 'add' }, { k: 'a', op: 'timer', t: 5 }, { k: 'b', op: 'add' }, { k: 'b', op: 'boom' }]);
    await expect(rt.process([failing])).rejects.toBeInstanceOf(RecordFailedError);
    const after = await w.backend.recover(scope);
    expect(after.version).toBe(before.version);
    expect(after.timers).toEqual(before.timers);
    expect(w.count('a')).toBe(2);
    expect(w.count('b')).toBeUndefined();

    // The caller discards the failed runtime and reopens: the batch (without the bad record) applies once.
    const again = await w.open();
    await again.process([env('1:0', 2, [{ k: 'a', op: 'add' }, { k: 'a', op: 'timer', t: 5 }, { k: 'b', op: 'add' }])]);
    expect(w.count('a')).toBe(3);
    expect(w.count('b')).toBe(1);
    const timers = (await w.backend.recover(scope)).timers.map((t) => `${t.key}@${t.time}`).sort();
    expect(timers).toEqual([`${keyToString('a')}@5`, `${keyToString('c')}@7`]);
  });

  it('a value read and changed but not written back is not committed', async () => {
    const job = new Job('copies', { parallelism: 1 });
    job
      .fromItems<Cmd>('in', [])
      .keyBy((e) => e.k)
      .process({
        state: { n: valueState<{ n: number }>() },
        processElement(e, ctx) {
          const cur = ctx.state.n.get();
          if (!cur) ctx.state.n.set({ n: 1 });
          else cur.n = 100; // changed in place, never set: must not count
        },
      })
      .name('count')
      .sinkTo(Sinks.collect(), 'out');
    const p = compile(job.graph);
    const backend = new InMemoryStateBackend();
    const rt = await PartitionRuntime.open({ plan: p, stage: 1, partition: 0, backend, clock: new ManualClock(0) });
    await rt.process([env('1:0', 1, [{ k: 'a', op: 'add' }])]);
    await rt.process([env('1:0', 2, [{ k: 'a', op: 'add' }, { k: 'a', op: 'add' }])]);
    expect(backend.peek({ job: 'copies', stage: 1, partition: 0 }, kg('a'), entity('a'))?.get('n')).toEqual({ n: 1 });
  });

  it("a timer's callback reads its key's state as it is, after the state the timer was registered with went and another key came", async () => {
    const job = new Job('reuse', { parallelism: 1 });
    job
      .fromItems<Cmd>('in', [])
      .keyBy((e) => e.k)
      .process({
        state: { n: valueState<number>() },
        processElement(e, ctx) {
          if (e.op === 'clear') ctx.state.n.clear();
          else {
            ctx.state.n.set((ctx.state.n.get() ?? 0) + 1);
            ctx.timers.registerEventTimeTimer(100);
          }
        },
        onTimer(time, ctx) {
          ctx.emit({ k: ctx.key, n: ctx.state.n.get() ?? null });
        },
      })
      .name('count')
      .sinkTo(Sinks.collect(), 'out');
    const p = compile(job.graph);
    const backend = new InMemoryStateBackend();
    const rt = await PartitionRuntime.open({ plan: p, stage: 1, partition: 0, backend, clock: new ManualClock(0) });
    // a's timer is registered with a's entry (its hint); a's state goes, so the entry is forgotten.
    await rt.process([env('1:0', 1, [{ k: 'a', op: 'set' }])]);
    await rt.process([env('1:0', 2, [{ k: 'a', op: 'clear' }])]);
    await rt.process([env('1:0', 3, [{ k: 'b', op: 'set' }, { k: 'b', op: 'set' }])]);
    // a comes back in the batch that fires its timer: the callback sees the batch's write (one entry per key).
    const r = await rt.process([env('1:0', 4, [{ k: 'a', op: 'set' }, { k: 'b', op: 'set' }], 200)]);
    const rows = r.outbox.flatMap((o) => (o.kind === 'sink' ? o.delivery.records : []));
    expect(rows).toEqual([
      { k: 'a', n: 1 },
      { k: 'b', n: 3 },
    ]);
  });

  it('tracks entities changed by state writes and by timers alone (registered or fired)', async () => {
    const w = world(true);
    const rt = await w.open();
    await rt.process([env('1:0', 1, [{ k: 'a', op: 'add' }, { k: 'b', op: 'timer', t: 5 }])]);
    const newest = () => {
      const t = w.backend.tracked(scope);
      return { after: t[t.length - 1].after, entities: [...t[t.length - 1].entities.keys()].sort() };
    };
    expect(newest()).toEqual({ after: 0, entities: [entity('a'), entity('b')].sort() });

    // A checkpoint starts a new interval; then b's timer fires: b changed only by its timer.
    const b1: Barrier = { epoch: 1, baseEpoch: 0, full: ['1/0'], savepoint: false };
    await rt.process([barrier('1:0', 2, b1), barrier('1:1', 1, b1)]);
    expect(newest()).toEqual({ after: 1, entities: [] });
    const r = await rt.process([env('1:0', 3, [], 10), env('1:1', 2, [{ k: 'c', op: 'timer', t: 20 }], 10)]);
    expect(r.outbox.flatMap((o) => (o.kind === 'sink' ? o.delivery.records : []))).toEqual([{ k: 'b', fired: 5 }]);
    expect(newest()).toEqual({ after: 1, entities: [entity('b'), entity('c')].sort() });
    expect(w.backend.peek(scope, kg('b'), entity('b'))).toBeUndefined();
  });

  it('a key whose timers change in every commit is tracked in every interval, the one a barrier starts included', async () => {
    const w = world(true);
    const rt = await w.open();
    const newest = () => {
      const t = w.backend.tracked(scope);
      return { after: t[t.length - 1].after, entities: [...t[t.length - 1].entities.keys()].sort() };
    };
    await rt.process([env('1:0', 1, [{ k: 'b', op: 'timer', t: 5 }])]);
    await rt.process([env('1:0', 2, [{ k: 'b', op: 'timer', t: 6 }])]);
    expect(newest()).toEqual({ after: 0, entities: [entity('b')] });
    // b's timers change in the barrier's batch too (before the barrier), then after it.
    const b1: Barrier = { epoch: 1, baseEpoch: 0, full: ['1/0'], savepoint: false };
    await rt.process([env('1:0', 3, [{ k: 'b', op: 'timer', t: 7 }]), barrier('1:0', 4, b1), barrier('1:1', 1, b1)]);
    expect(newest()).toEqual({ after: 1, entities: [] });
    await rt.process([env('1:0', 5, [{ k: 'b', op: 'timer', t: 8 }])]);
    expect(newest()).toEqual({ after: 1, entities: [entity('b')] });
    const b2: Barrier = { epoch: 2, baseEpoch: 1, full: [], savepoint: false };
    await rt.process([barrier('1:0', 6, b2), barrier('1:1', 2, b2)]);
    await rt.process([env('1:0', 7, [{ k: 'c', op: 'timer', t: 9 }]), env('1:1', 3, [{ k: 'b', op: 'timer', t: 10 }])]);
    expect(newest()).toEqual({ after: 2, entities: [entity('b'), entity('c')].sort() });
    // A fresh runtime over the same store (a crash) reports its keys again.
    const again = await w.open();
    await again.process([env('1:0', 8, [{ k: 'd', op: 'timer', t: 11 }])]);
    expect(newest()).toEqual({ after: 2, entities: [entity('b'), entity('c'), entity('d')].sort() });
  });
});
