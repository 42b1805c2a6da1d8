/**
 * An onWatermark callback that throws (no built-in operator has one; the operator
 * contract allows it): retried, then parked as a dead letter naming the operator and the
 * watermark, while the partition goes on. The registry is wrapped to give one map
 * operator such a callback.
 */
import { describe, expect, it, vi } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { runJob } from '../../lib/local/embedded.ts';

const seen: number[] = [];

vi.mock('../../lib/operators/registry.ts', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../lib/operators/registry.ts')>();
  return {
    createOperator: (ctx: Parameters<typeof real.createOperator>[0]) => {
      const op = real.createOperator(ctx);
      if (ctx.node.name !== 'wm-watcher') return op;
      return Object.assign(op, {
        onWatermark(wm: number) {
          seen.push(wm);
          if (wm === 199) throw new Error(`watermark ${wm} is unwelcome`);
        },
      });
    },
  };
});

describe('onWatermark failures', () => {
  it('retries, then parks the callback with its watermark; later watermarks go on', async () => {
    const job = new Job('wm-throws', { parallelism: 1 });
    const out = Sinks.collect<number>();
    job
      .fromItems('in', [100, 200, 300], { timestamp: (t) => t, watermark: WatermarkStrategies.boundedOutOfOrderness(0) })
      .map((t) => t)
      .name('wm-watcher')
      .sinkTo(out);
    const { runtime } = await runJob(job, { sourceBatchSize: 1, maxAttempts: 2 });
    expect(out.records).toEqual([100, 200, 300]);
    expect(runtime.deadLetters).toMatchObject([{ operator: 'wm-watcher', watermark: 199, error: 'operator "wm-watcher" threw: watermark 199 is unwelcome', attempts: 2, stage: 0, partition: 0, epoch: 1 }]);
    expect(seen.filter((w) => w === 199)).toHaveLength(2); // two attempts, then not called again
    expect(seen).toContain(299);
  });
});
