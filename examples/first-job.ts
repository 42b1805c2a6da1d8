// examples/first-job.ts: page views per page in one-minute windows of event time
import { Job, Sinks, WatermarkStrategies, Windows } from 'sluice';

interface PageView { page: string; user: string; time: number }

const job = new Job('page-views');
job
  .ingest<PageView>('views', { timestamp: (v) => v.time, watermark: WatermarkStrategies.boundedOutOfOrderness(5_000) })
  .keyBy((v) => v.page)
  .window(Windows.tumbling(60_000))
  .aggregate({ createAccumulator: () => 0, add: (_v, n: number) => n + 1, getResult: (n) => n },
    (views, { key, window }) => ({ page: key, windowStart: window.start, views }))
  .sinkTo(Sinks.stdout(), 'counts');

export default job;
