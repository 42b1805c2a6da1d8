/**
 * Clicks per user counted in two tumbling windows of event time (1 s and 10 s) at
 * parallelism 1 with a watermark that trails the newest click by nothing: which clicks
 * each window drops as late follows from the clicks alone (test/cli/late-counts.test.ts).
 */
import { Job, Sinks, WatermarkStrategies, Windows } from '../../lib/index.ts';

interface Click {
  user: string;
  ts: number;
}

const job = new Job('late-windows', { parallelism: 1 });
const clicks = job.ingest<Click>('clicks', { timestamp: (c) => c.ts, watermark: WatermarkStrategies.boundedOutOfOrderness(0) }).keyBy((c) => c.user);
const count = { createAccumulator: () => 0, add: (_c: Click, n: number) => n + 1, getResult: (n: number) => n };
clicks
  .window(Windows.tumbling(1_000))
  .aggregate(count, (n, { key, window }) => ({ user: key, second: window.start, n }))
  .name('per-second')
  .sinkTo(Sinks.stdout(), 'seconds');
clicks
  .window(Windows.tumbling(10_000))
  .aggregate(count, (n, { key, window }) => ({ user: key, tenSeconds: window.start, n }))
  .name('per-ten-seconds')
  .sinkTo(Sinks.stdout(), 'tens');

export default job;
