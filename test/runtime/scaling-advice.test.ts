/**
 * DS2-style scaling advice: the pure decision (true rates, selectivities, partitions) and
 * the embedded runtime's measurement of each stage's useful time. A stage whose user code
 * spins 1 ms per record has a true rate of at most 1,000 records per second per partition
 * (its busy time includes the spin), so at 8,000 source records per second it needs at
 * least 8 partitions, whatever the machine; a light stage needs fewer.
 */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { compile } from '../../lib/graph/compile.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { scalingAdvice } from '../../lib/runtime/scaling-advice.ts';

describe('scaling advice (pure)', () => {
  it('gives each stage the partitions its share of the target rate needs at its true rate, within 1..maxParallelism', () => {
    const a = scalingAdvice(
      [
        { name: 'parse', partitions: 2, recordsIn: 10_000, busyMs: 1_000 }, // 10,000/s per partition
        { name: 'enrich', partitions: 2, recordsIn: 5_000, busyMs: 5_000 }, // half the records, 1,000/s per partition
        { name: 'idle', partitions: 3, recordsIn: 0, busyMs: 0 },
      ],
      10_000,
      40_000,
      16,
    );
    expect(a.targetRate).toBe(40_000);
    expect(a.stages.map((s) => [s.name, s.truePerPartition, s.requiredRate, s.advisedPartitions])).toEqual([
      ['parse', 10_000, 40_000, 4],
      ['enrich', 1_000, 20_000, 16], // 20 wanted, capped at maxParallelism
      ['idle', null, 0, null],
    ]);
    expect(scalingAdvice([{ name: 's', partitions: 4, recordsIn: 100, busyMs: 1 }], 100, 10, 8).stages[0].advisedPartitions).toBe(1);
  });
});

describe('scaling advice from the embedded runtime', () => {
  it('measures busy time per stage, so a slow stage gets more partitions than a fast one', async () => {
    const spin = (ms: number) => {
      const end = performance.now() + ms;
      while (performance.now() < end);
    };
    const job = new Job('advice', { parallelism: 1, maxParallelism: 64 });
    job
      .fromItems('n', Array.from({ length: 300 }, (_, i) => i))
      .map((x: number) => x + 1)
      .keyBy((x) => x % 7)
      .process({
        processElement(x: number, ctx) {
          spin(1);
          ctx.emit(x);
        },
      })
      .name('slow')
      .sinkTo(Sinks.collect(), 'out');
    const { stats } = await runJob(job);
    const plan = compile(job.graph);
    const loads = plan.stages.map((s) => ({ name: s.name, partitions: s.parallelism, ...stats.load[s.name] }));
    expect(loads.map((l) => l.recordsIn)).toEqual([300, 300]);
    expect(loads[1].busyMs).toBeGreaterThanOrEqual(300); // 300 records, 1 ms of spin each
    const advice = scalingAdvice(loads, 300, 8_000, 64);
    const [fast, slow] = advice.stages;
    expect(slow.truePerPartition!).toBeLessThanOrEqual(1_000);
    expect(slow.advisedPartitions!).toBeGreaterThanOrEqual(8);
    expect(fast.advisedPartitions!).toBeLessThan(slow.advisedPartitions!);
  });
});
