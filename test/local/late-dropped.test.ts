/**
 * Late records a window drops (no late-data side output) are counted per operator in the
 * batch result, the embedded runtime's stats and the CLI's summary line, never dropped
 * without a trace; with a side output they go there and nothing counts as dropped. One
 * record per chunk judges each record against all before it (the README's recipe).
 */
import { describe, expect, it } from 'vitest';
import { CollectSink, type Sink, Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock, WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';
import { lateDroppedCount } from '../../lib/cli/dead-letter-report.ts';
import { EmbeddedRuntime, runJob } from '../../lib/local/embedded.ts';
import { type Click, type Count, clickCountsJob } from '../support/click-counts.ts';

function clicksJob(lateOutput: boolean) {
  return clickCountsJob('late-dropped', { sourcePartitions: 1, maxParallelism: 8, lateOutput });
}

async function run(sideOutput: boolean) {
  const clock = new ManualClock(0);
  const out = new CollectSink<{ user: string; start: number; n: number }>();
  const late = new CollectSink<Click>();
  const runtime = new EmbeddedRuntime(clicksJob(sideOutput), { clock, sinks: { out: out as Sink<any>, ...(sideOutput ? { late: late as Sink<any> } : {}) }, sourceBatchSize: 100 });
  await runtime.start();
  const offer = async (clicks: Click[]) => {
    expect(runtime.offer('clicks', clicks)).toEqual({ ok: true });
    while (await runtime.step()) {}
  };
  try {
    await offer([{ user: 'a', ts: 100 }, { user: 'b', ts: 200 }]);
    await offer([{ user: 'a', ts: 1500 }]); // the watermark passes 999: [0, 1000) fires
    await offer([{ user: 'a', ts: 300 }, { user: 'b', ts: 400 }, { user: 'a', ts: 1600 }]); // two late, one on time
    return { stats: runtime.stats(), out: out.records, late: late.records };
  } finally {
    runtime.stop();
    await runtime.close();
  }
}

describe('late records dropped', () => {
  it('are counted per operator in the stats and the summary line', async () => {
    const { stats, out } = await run(false);
    expect(out.filter((r) => r.start === 0).map((r) => [r.user, r.n]).sort()).toEqual([['a', 1], ['b', 1]]);
    expect(stats.lateDropped).toEqual({ counts: 2 });
    expect(lateDroppedCount(stats.lateDropped)).toBe('2 late dropped (counts 2)');
  });

  it('go to the late-data side output when there is one, and none counts as dropped', async () => {
    const { stats, late } = await run(true);
    expect(late.map((c) => c.ts).sort()).toEqual([300, 400]);
    expect(stats.lateDropped).toEqual({});
    expect(lateDroppedCount(stats.lateDropped)).toBe('0 late dropped');
  });

  it('are judged record by record with one record per chunk (the README recipe for tests), per chunk otherwise', async () => {
    // 3,500 is far behind 9,000 but in its chunk under the default batch size: on time there.
    const clicks: Click[] = [500, 9_000, 3_500, 9_100].map((ts) => ({ user: 'a', ts }));
    const job = () => {
      const j = new Job('record-exact', { parallelism: 1 });
      j.fromItems('clicks', clicks, { timestamp: (c) => c.ts, watermark: WatermarkStrategies.boundedOutOfOrderness(0), parallelism: 1 })
        .keyBy((c) => c.user)
        .window(Windows.tumbling(1000))
        .process<Count>((els, { key, window }, out) => out.emit({ user: key as string, start: window.start, n: els.length }))
        .name('counts')
        .sinkTo(Sinks.collect<Count>(), 'out');
      return j;
    };
    const exact = await runJob(job(), { sourceBatchSize: 1 });
    expect(exact.stats.lateDropped).toEqual({ counts: 1 });
    const chunked = await runJob(job());
    expect(chunked.stats.lateDropped).toEqual({});
  });
});
