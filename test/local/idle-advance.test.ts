/**
 * The last windows of a live job fire at zero traffic in the embedded runtime: once every
 * source partition is idle, the partitioner sends idle envelopes again every idle
 * timeout, each with the watermark extrapolated from where the partition's data left it
 * (idleAdvance 'processing-time', the default for ingestion streams). Driven by a
 * ManualClock; a record that then arrives behind the extrapolated watermark is late and
 * goes to the late side output (counted, not lost). With 'hold' nothing fires.
 */
import { describe, expect, it } from 'vitest';
import { CollectSink, type Sink } from '../../lib/api/sinks.ts';
import type { IdleAdvance } from '../../lib/api/sources.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { type Click, type Count, clickCountsJob } from '../support/click-counts.ts';

function clicksJob(idleAdvance?: IdleAdvance) {
  return clickCountsJob('idle-advance', { idleTimeoutMs: 1000, idleAdvance, lateOutput: true });
}

async function start(idleAdvance?: IdleAdvance) {
  const clock = new ManualClock(0);
  const out = new CollectSink<Count>();
  const late = new CollectSink<Click>();
  const runtime = new EmbeddedRuntime(clicksJob(idleAdvance), { clock, sinks: { out: out as Sink<any>, late: late as Sink<any> }, sourceBatchSize: 100 });
  await runtime.start();
  const at = async (ms: number, clicks: Click[] = []) => {
    clock.set(ms);
    if (clicks.length > 0) expect(runtime.offer('clicks', clicks)).toEqual({ ok: true });
    while (await runtime.step()) {}
  };
  const starts = () => out.records.map((r) => r.start).sort((a, b) => a - b);
  return { runtime, out, late, at, starts };
}

describe('idle watermark extrapolation in the embedded runtime', () => {
  it('fires the last window at zero traffic once the extrapolated watermark passes it; a record behind it is late', async () => {
    const h = await start();
    try {
      // One request per partition (round-robin): both partitions have data at 0.
      await h.at(0, [{ user: 'a', ts: 100 }, { user: 'b', ts: 400 }]);
      await h.at(0, [{ user: 'a', ts: 1300 }]);
      expect(h.starts()).toEqual([]); // partition 0 at 399, partition 1 at 1299: [0, 1000) waits for partition 0
      await h.at(999);
      expect(h.starts()).toEqual([]);
      // Both idle after 1000 ms: partition 0 extrapolates to 399 + 1000, partition 1 to 1299 + 1000; min 1399.
      await h.at(1000);
      expect(h.starts()).toEqual([0, 0]);
      expect(h.runtime.stats().watermarks.counts).toBe(1399);
      // Still nothing arrives: the idle envelopes come again every timeout, each moving time on.
      await h.at(1500);
      expect(h.runtime.stats().watermarks.counts).toBe(1399); // not a timeout since the last one
      await h.at(2000);
      expect(h.runtime.stats().watermarks.counts).toBe(2399);
      expect(h.starts()).toEqual([0, 0, 1000]); // the last window, [1000, 2000), fired without traffic
      expect(h.out.records.find((r) => r.start === 1000)).toEqual({ user: 'a', start: 1000, n: 1 });

      // A record dated behind the extrapolated watermark arrives: late, on the side output.
      await h.at(2100, [{ user: 'c', ts: 1900 }]);
      expect(h.late.records).toEqual([{ user: 'c', ts: 1900 }]);
      expect(h.starts()).toEqual([0, 0, 1000]);
      // One ahead of it is not late and fires once time passes it again.
      await h.at(2200, [{ user: 'd', ts: 2500 }]);
      await h.at(5000);
      expect(h.late.records).toHaveLength(1);
      expect(h.out.records.filter((r) => r.start === 2000)).toEqual([{ user: 'd', start: 2000, n: 1 }]);
    } finally {
      await h.runtime.close();
    }
  });

  it("holds the watermark where the data left it with idleAdvance 'hold'", async () => {
    const h = await start('hold');
    try {
      await h.at(0, [{ user: 'a', ts: 100 }, { user: 'b', ts: 400 }]);
      await h.at(0, [{ user: 'a', ts: 1300 }]);
      await h.at(1000);
      // Partition 0 goes idle first and stops holding time back: [0, 1000) fires at 1299, as ever.
      expect(h.starts()).toEqual([0, 0]);
      await h.at(60_000);
      expect(h.starts()).toEqual([0, 0]); // [1000, 2000) waits for data
      expect(h.runtime.stats().watermarks.counts).toBe(1299);
    } finally {
      await h.runtime.close();
    }
  });

  it("a stage's watermark in the stats leaves out its idle partitions, as the next stage does", async () => {
    const h = await start('hold');
    try {
      const source = h.runtime.plan.stages[0].name;
      await h.at(0, [{ user: 'a', ts: 400 }]); // one request: one partition has data
      expect(h.runtime.stats().watermarks[source], 'the empty partition holds event time back').toBe(Number.NEGATIVE_INFINITY);
      await h.at(1000); // both idle: the empty one no longer counts
      expect(h.runtime.stats().watermarks[source]).toBe(399);
    } finally {
      h.runtime.stop();
      await h.runtime.close();
    }
  });
});
