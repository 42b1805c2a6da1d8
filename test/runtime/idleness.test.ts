/**
 * Idle source partitions decided by probe (the AWS path): the pure decision, and the
 * runtime core fed source envelopes as the operator handler decodes them, with the
 * outputs routed by hand into the keyed stage: a window fires although two of four
 * source partitions never get data, data re-activates a partition, and a redelivered
 * probe decides the same after a crash.
 */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock, WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';
import { compile } from '../../lib/graph/compile.ts';
import { channelWatermark, extrapolatedWatermark, processingTimeUntil, sourceIdlenessAfter } from '../../lib/runtime/idleness.ts';
import { inputWatermark } from '../../lib/runtime/inputs.ts';
import { PartitionRuntime } from '../../lib/runtime/partition.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import type { Envelope, OutboxEntry } from '../../lib/transport/envelope.ts';

describe('sourceIdlenessAfter (pure)', () => {
  const data = (arrivedAt: number) => ({ records: [{ value: 1, timestamp: 0 }], arrivedAt });
  const probe = (arrivedAt: number) => ({ records: [], probe: true as const, arrivedAt });
  const active = { idle: false, lastDataAt: 1000 };

  it('finds a partition idle once the timeout separates its last data from a probe', () => {
    expect(sourceIdlenessAfter(active, probe(1999), 1000)).toEqual({ idle: false, lastDataAt: 1000 });
    expect(sourceIdlenessAfter(active, probe(2000), 1000)).toEqual({ idle: true, lastDataAt: 1000 });
  });

  it('starts counting at the first probe on a partition that never had data', () => {
    const first = sourceIdlenessAfter({ idle: false, lastDataAt: undefined }, probe(500), 1000);
    expect(first).toEqual({ idle: false, lastDataAt: 500 });
    expect(sourceIdlenessAfter(first, probe(1500), 1000).idle).toBe(true);
  });

  it('re-activates on data and keeps the latest arrival', () => {
    expect(sourceIdlenessAfter({ idle: true, lastDataAt: 1000 }, data(5000), 1000)).toEqual({ idle: false, lastDataAt: 5000 });
    // Arrival times of different ingest containers may interleave slightly out of order.
    expect(sourceIdlenessAfter({ idle: false, lastDataAt: 5000 }, data(4990), 1000)).toEqual({ idle: false, lastDataAt: 5000 });
  });

  it('never idles by probe without an idle timeout, and stays idle on later probes', () => {
    expect(sourceIdlenessAfter(active, probe(1e9), undefined).idle).toBe(false);
    expect(sourceIdlenessAfter({ idle: true, lastDataAt: 1000 }, probe(1001), 1000).idle).toBe(true);
  });

  it('keeps the producer\'s own word on envelopes that are not probes (embedded partitioner, end marker)', () => {
    expect(sourceIdlenessAfter(active, { records: [], idle: true }, 1000).idle).toBe(true);
    expect(sourceIdlenessAfter({ idle: true, lastDataAt: 1000 }, { records: [] }, 1000).idle).toBe(false);
  });
});

describe('idle watermark extrapolation (pure)', () => {
  const probe = (arrivedAt: number) => ({ records: [], probe: true as const, arrivedAt });

  it('moves an idle watermark on by the processing time since the last data, never back', () => {
    expect(extrapolatedWatermark(1499, 1000, 3000)).toBe(3499);
    expect(extrapolatedWatermark(1499, 1000, 900)).toBe(1499);
    expect(extrapolatedWatermark(Number.NEGATIVE_INFINITY, 0, 5000)).toBe(Number.NEGATIVE_INFINITY);
  });

  it('keeps the latest probe time while idle and advancing, and forgets it on data or when holding', () => {
    const active = { idle: false, lastDataAt: 1000, idleAt: undefined };
    expect(sourceIdlenessAfter(active, probe(1500), 1000, true)).toEqual({ idle: false, lastDataAt: 1000, idleAt: undefined });
    const idle = sourceIdlenessAfter(active, probe(2000), 1000, true);
    expect(idle).toEqual({ idle: true, lastDataAt: 1000, idleAt: 2000 });
    expect(sourceIdlenessAfter(idle, probe(5000), 1000, true).idleAt).toBe(5000);
    expect(sourceIdlenessAfter({ ...idle, idleAt: 5000 }, probe(4000), 1000, true).idleAt).toBe(5000); // out of order: the latest stays
    expect(sourceIdlenessAfter(active, probe(2000), 1000, false)).toEqual({ idle: true, lastDataAt: 1000, idleAt: undefined });
    expect(sourceIdlenessAfter(idle, { records: [{ value: 1, timestamp: 0 }], arrivedAt: 6000 }, 1000, true)).toEqual({ idle: false, lastDataAt: 6000, idleAt: undefined });
  });

  it('counts an idle channel at its extrapolated watermark, an active one at its own', () => {
    expect(channelWatermark({ watermark: 1499, idle: true, lastDataAt: 1000, idleAt: 4000 })).toBe(4499);
    expect(channelWatermark({ watermark: 1499, idle: true, lastDataAt: 1000, idleAt: undefined })).toBe(1499);
    expect(channelWatermark({ watermark: 1499, idle: false, lastDataAt: 1000, idleAt: 4000 })).toBe(1499);
  });

  it('downstream: an idle input never holds back active ones; all idle, the minimum over the idle ones, never below the current', () => {
    const ch = (watermark: number, idle: boolean) => ({ seq: 1, watermark, idle });
    expect(inputWatermark(['a', 'b'], { a: ch(5000, true), b: ch(2000, false) }, 0)).toBe(2000);
    expect(inputWatermark(['a', 'b'], { a: ch(5000, true), b: ch(3000, true) }, 2000)).toBe(3000);
    expect(inputWatermark(['a', 'b'], { a: { ...ch(1000, true), lastDataAt: 0, idleAt: 9000 }, b: ch(3000, true) }, 2000)).toBe(3000);
    expect(inputWatermark(['a', 'b'], { a: ch(1000, true), b: ch(1500, true) }, 2000)).toBe(2000);
    // A channel that never had data (idle at -infinity) holds nothing back.
    expect(inputWatermark(['a', 'b'], { a: ch(Number.NEGATIVE_INFINITY, true), b: ch(3000, true) }, 2000)).toBe(3000);
    expect(inputWatermark(['a'], { a: ch(Number.NEGATIVE_INFINITY, true) }, 2000)).toBe(2000);
  });

  it('says how much processing time an idle partition needs to reach a timer', () => {
    expect(processingTimeUntil(1499, 1999)).toBe(500);
    expect(processingTimeUntil(2000, 1999)).toBe(0);
    expect(processingTimeUntil(Number.NEGATIVE_INFINITY, 1999)).toBe(Number.POSITIVE_INFINITY);
  });
});

interface Click {
  user: string;
  ts: number;
}

/** Four source partitions -> keyBy user -> 1 s tumbling counts (two partitions) -> sink. */
function clicksJob() {
  const job = new Job('idle-clicks', { parallelism: 2, maxParallelism: 16 });
  job
    .ingest<Click>('clicks', { timestamp: (c) => c.ts, watermark: WatermarkStrategies.boundedOutOfOrderness(0, { idleTimeoutMs: 1000 }), parallelism: 4 })
    .keyBy((c) => c.user)
    .window(Windows.tumbling(1000))
    .process<{ user: string; start: number; n: number }>((els, { key, window }, out) => out.emit({ user: key as string, start: window.start, n: els.length }))
    .name('counts')
    .sinkTo(Sinks.collect(), 'out');
  return job;
}

/** The source stage and the keyed stage in process, envelopes routed as the queues would. */
async function harness() {
  const plan = compile(clicksJob().graph);
  const backend = new InMemoryStateBackend();
  const clock = new ManualClock(0);
  const open = (stage: number, partition: number) => PartitionRuntime.open({ plan, stage, partition, backend, clock });
  const sources = await Promise.all([0, 1, 2, 3].map((p) => open(0, p)));
  const keyed = await Promise.all([0, 1].map((p) => open(1, p)));
  const results: unknown[] = [];
  let offset = 100;
  const route = async (outbox: readonly OutboxEntry[]) => {
    for (const e of outbox) {
      if (e.kind === 'channel') {
        const r = await keyed[e.envelope.toPartition].process([e.envelope]);
        for (const o of r.outbox) if (o.kind === 'sink') results.push(...o.delivery.records);
      }
    }
  };
  const sourceEnvelope = (p: number, fields: Partial<Envelope>): Envelope => ({ channel: `0:${p}`, edge: 0, toPartition: p, seq: 1, offset: String(offset++), records: [], watermark: Number.NEGATIVE_INFINITY, ...fields });
  const send = async (p: number, fields: Partial<Envelope>) => {
    const env = sourceEnvelope(p, fields);
    const r = await sources[p].process([env]);
    await route(r.outbox);
    return { env, result: r };
  };
  const clicks = (p: number, at: number, ...ts: number[]) => send(p, { arrivedAt: at, records: ts.map((t) => ({ value: { user: `u${t % 3}`, ts: t }, timestamp: t })) });
  const probe = (p: number, at: number) => send(p, { arrivedAt: at, probe: true });
  return { sources, keyed, results, clicks, probe, open, backend };
}

describe('idle probes in the runtime core', () => {
  it('fires windows when some source partitions never get data, and lets data re-activate a partition', async () => {
    const h = await harness();
    await h.clicks(0, 0, 100, 200);
    await h.clicks(1, 0, 300, 1500);
    await h.clicks(0, 10, 1600);
    expect(h.results).toEqual([]); // partitions 2 and 3 hold event time back

    // The first probe starts the count on a partition that never had data; the second, a timeout later, finds it idle.
    for (const p of [2, 3]) await h.probe(p, 20);
    expect(h.results).toEqual([]);
    await h.probe(2, 1020);
    expect(h.results).toEqual([]);
    await h.probe(3, 1020);
    // Min over the active partitions (0: 1599, 1: 1499) passes 999: [0, 1000) fires.
    expect(h.results).toHaveLength(3);
    expect(h.keyed.every((k) => k.watermark === 1499)).toBe(true);

    // Partition 2 gets data: active again, so its watermark counts (records not late: 1800 > 1499).
    await h.clicks(2, 1100, 1800);
    await h.clicks(0, 1110, 2600);
    await h.clicks(1, 1120, 2700);
    expect(h.keyed.every((k) => k.watermark === 1799)).toBe(true);
    await h.clicks(2, 1130, 2900);
    // [1000, 2000) fires with partition 2's record; partition 3 (idle) does not hold it.
    const second = h.results.slice(3) as { user: string; start: number; n: number }[];
    expect(second.map((r) => r.start)).toEqual(second.map(() => 1000));
    expect(second.reduce((n, r) => n + r.n, 0)).toBe(3); // 1500, 1600, 1800
  });

  it('lets time move on when every source partition is idle: the last window fires on probes alone', async () => {
    const h = await harness();
    await h.clicks(0, 0, 100);
    await h.clicks(1, 0, 1200);
    for (const p of [2, 3]) await h.probe(p, 0); // never get data
    for (const p of [0, 1, 2, 3]) await h.probe(p, 1000);
    // All idle: 0 at 99 + 1000, 1 at 1199 + 1000; 2 and 3 had no data and hold nothing back. Min 1099.
    expect(h.keyed.every((k) => k.watermark === 1099)).toBe(true);
    expect(h.results.map((r) => (r as { start: number }).start)).toEqual([0]);
    const again = await h.probe(0, 1500);
    expect(again.result.committed).toBe(true); // the probe moved the extrapolated watermark on
    expect(h.keyed.every((k) => k.watermark === 1599)).toBe(true);
    await h.probe(0, 2000);
    // [1000, 2000) fires once both idle partitions passed 1999 (0 at 2099, 1 at 2199).
    expect(h.results.map((r) => (r as { start: number }).start)).toEqual([0, 1000]);
    // Data behind the extrapolated watermark is late: dropped by the window and counted, the window does not fire again.
    await h.clicks(2, 2100, 1500);
    expect(h.results).toHaveLength(2);
  });

  it('commits the decision: a probe redelivered after a crash decides the same, and a probe that changes nothing commits nothing', async () => {
    const h = await harness();
    await h.clicks(0, 0, 100);
    const start = await h.probe(1, 0);
    expect(start.result.committed).toBe(true); // lastDataAt of a partition without data
    const noop = await h.probe(0, 500);
    expect(noop.result.committed).toBe(false); // 500 < timeout: nothing to commit
    const idle = await h.probe(1, 1000);
    expect(idle.result.committed).toBe(true);
    expect(idle.result.outbox.filter((o) => o.kind === 'channel').every((o) => o.kind === 'channel' && o.envelope.idle === true)).toBe(true);

    // A fresh runtime (crash recovery) gets the same probe again: a duplicate, and the partition stays idle.
    const reopened = await h.open(0, 1);
    const again = await reopened.process([idle.env]);
    expect(again.duplicatesDropped).toBe(1);
    const next = await reopened.process([{ ...idle.env, offset: '999999', arrivedAt: 1001 }]);
    expect(next.committed).toBe(false);
    // The committed progress says idle, with the arrival of the start probe.
    const rec = await h.backend.recover({ job: 'idle-clicks', stage: 0, partition: 1 });
    expect(rec.progress.inputs['0:1']).toMatchObject({ idle: true, lastDataAt: 0 });
  });
});
