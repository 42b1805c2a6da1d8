/** Views counted per page in keyed state (operator "per-page"), at parallelism 2: test/cli/restore-crash.test.ts reads the counts back with `sluice state get`. */
import { Job, Sinks, valueState } from '../../lib/index.ts';

interface View {
  page: string;
  time: number;
}

const job = new Job('count-views', { parallelism: 2 });
job
  .ingest<View>('views', { timestamp: (v) => v.time })
  .keyBy((v) => v.page)
  .process({
    state: { n: valueState<number>() },
    processElement(_v: View, ctx) {
      ctx.state.n.set((ctx.state.n.get() ?? 0) + 1);
    },
  })
  .name('per-page')
  .sinkTo(Sinks.stdout(), 'none');

export default job;
