/**
 * The keyed job the operator-handler tests share: clicks keyed by user, a running count
 * per user (keyed process state) and, unless left out, tumbling 100 ms window counts per
 * user, so a run has three stages: source, keyed process and window.
 */
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';

export interface Click {
  id?: number;
  user: string;
  ts: number;
}
export type Running = { user: string; n: number };
export type Count = { user: string; start: number; n: number };

export const USERS = ['ann', 'bob', 'cy', 'dee', 'eve'];
/** 60 clicks 13 ms apart over five users: several 100 ms windows per user. */
export const CLICKS: readonly Click[] = Array.from({ length: 60 }, (_, i) => ({ id: i, user: USERS[(i * 7) % 5], ts: 1000 + i * 13 }));

export interface ClickJobOptions {
  /** Default 16. */
  readonly maxParallelism?: number;
  /** Where the running counts go; default a new collect sink. */
  readonly running?: Sink<Running>;
  /** The running counts' sink name; default 'running-out'. */
  readonly runningSinkName?: string;
  /** Where the window counts go (sink 'window-out'); null leaves the window out. Default a new collect sink. */
  readonly windows?: Sink<Count> | null;
  /**
   * The window count's aggregate has merge(), so clicks cross the shuffle as partial counts
   * per (user, window) (lib/operators/window-combiner.ts). Default false: one by one.
   */
  readonly combineWindows?: boolean;
}

export function clickJob(name: string, o: ClickJobOptions = {}): Job {
  const job = new Job(name, { parallelism: 2, maxParallelism: o.maxParallelism ?? 16 });
  // Idleness is decided in processing time: a loaded machine must not make a source
  // partition idle mid-test and its records late, so the output equals the reference.
  const watermark = WatermarkStrategies.boundedOutOfOrderness(0, { idleTimeoutMs: 600_000 });
  const users = job.ingest<Click>('clicks', { timestamp: (c) => c.ts, watermark }).keyBy((c) => c.user);
  users
    .process<Running, { n: ReturnType<typeof valueState<number>> }>({
      state: { n: valueState<number>() },
      processElement(c, ctx) {
        const n = (ctx.state.n.get() ?? 0) + 1;
        ctx.state.n.set(n);
        ctx.emit({ user: c.user, n });
      },
    })
    .name('running')
    .sinkTo(o.running ?? Sinks.collect<Running>(), o.runningSinkName ?? 'running-out');
  if (o.windows === null) return job;
  users
    .window(Windows.tumbling(100))
    .aggregate(
      { createAccumulator: () => 0, add: (_c: Click, n: number) => n + 1, getResult: (n: number) => n, ...(o.combineWindows ? { merge: (a: number, b: number) => a + b } : {}) },
      (n, { key, window }): Count => ({ user: key, start: window.start, n }),
    )
    .name('windows')
    .sinkTo(o.windows ?? Sinks.collect<Count>(), 'window-out');
  return job;
}
