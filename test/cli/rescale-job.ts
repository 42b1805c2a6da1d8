/**
 * Views per page in one-second tumbling windows at parallelism 2, with partitions that do
 * not go idle in the test's lifetime (so no window fires on processing time alone): the
 * job test/cli/rescale.test.ts rescales.
 */
import { Job, Sinks, WatermarkStrategies, Windows } from '../../lib/index.ts';

interface View {
  page: string;
  time: number;
}

const job = new Job('rescale-views', { parallelism: 2 });
job
  .ingest<View>('views', { timestamp: (v) => v.time, watermark: WatermarkStrategies.boundedOutOfOrderness(100, { idleTimeoutMs: 600_000 }) })
  .keyBy((v) => v.page)
  .window(Windows.tumbling(1_000))
  .aggregate({ createAccumulator: () => 0, add: (_v: View, n: number) => n + 1, getResult: (n: number) => n }, (views, { key, window }) => ({ page: key, start: window.start, views }))
  .name('per-page')
  .sinkTo(Sinks.stdout(), 'counts');

export default job;
