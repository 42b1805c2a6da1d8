/**
 * The windowed job several event-time tests share: clicks per user counted in tumbling
 * windows, from one ingestion stream, into the sink `out` (and the late clicks into `late`
 * when asked). The tests differ only in the options below.
 */
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import type { IdleAdvance } from '../../lib/api/sources.ts';
import { Job } from '../../lib/api/stream.ts';
import { OutputTag, WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';

export interface Click {
  user: string;
  ts: number;
}

export interface Count {
  user: string;
  start: number;
  n: number;
}

export interface ClickCountsOptions {
  /** Default 2; also the keyed stage's parallelism. */
  readonly sourcePartitions?: number;
  readonly maxParallelism?: number;
  /** Idle timeout of the stream's watermark; none: partitions never go idle. */
  readonly idleTimeoutMs?: number;
  readonly idleAdvance?: IdleAdvance;
  /** Default 1000. */
  readonly windowMs?: number;
  /** Late clicks to the sink `late` instead of being dropped. */
  readonly lateOutput?: boolean;
  /** The keyed stage's parallelism when it differs from the stream's. */
  readonly parallelism?: number;
}

export function clickCountsJob(name: string, o: ClickCountsOptions = {}): Job {
  const partitions = o.sourcePartitions ?? 2;
  const job = new Job(name, { parallelism: o.parallelism ?? partitions, maxParallelism: o.maxParallelism ?? 16 });
  const late = new OutputTag<Click>('late');
  const windowed = job
    .ingest<Click>('clicks', {
      timestamp: (c) => c.ts,
      watermark: WatermarkStrategies.boundedOutOfOrderness(0, o.idleTimeoutMs === undefined ? undefined : { idleTimeoutMs: o.idleTimeoutMs }),
      parallelism: partitions,
      ...(o.idleAdvance ? { idleAdvance: o.idleAdvance } : {}),
    })
    .keyBy((c) => c.user)
    .window(Windows.tumbling(o.windowMs ?? 1000));
  const counts = (o.lateOutput ? windowed.sideOutputLateData(late) : windowed)
    .process<Count>((els, { key, window }, out) => out.emit({ user: key as string, start: window.start, n: els.length }))
    .name('counts');
  counts.sinkTo(Sinks.collect<Count>() as Sink<any>, 'out');
  if (o.lateOutput) counts.getSideOutput(late).sinkTo(Sinks.collect<Click>() as Sink<any>, 'late');
  return job;
}
