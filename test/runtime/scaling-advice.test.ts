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
import { scalingAdvice, stageInputs } from '../../lib/runtime/scaling-advice.ts';

describe('scaling advice (pure)', () => {
  const chain = { upstream: [], fedBySources: true } as const;
  it('gives each stage the partitions its share of the target rate needs at its true rate, within 1..maxParallelism', () => {
    const a = scalingAdvice(
      [
        { name: 'parse', partitions: 2, recordsIn: 10_000, recordsOut: 5_000, busyMs: 1_000, ...chain }, // 10,000/s per partition, sends half on
        { name: 'enrich', partitions: 2, recordsIn: 5_000, busyMs: 5_000, upstream: [0], fedBySources: false }, // 1,000/s per partition
        { name: 'idle', partitions: 3, recordsIn: 0, busyMs: 0, upstream: [1], fedBySources: false },
      ],
      40_000,
      16,
    );
    expect(a.targetRate).toBe(40_000);
    expect(a.utilization).toBe(0.8);
    expect(a.stages.map((s) => [s.name, s.truePerPartition, s.requiredRate, s.advisedPartitions])).toEqual([
      ['parse', 10_000, 40_000, 5], // planned at 80 % of 10,000/s per partition
      ['enrich', 1_000, 20_000, 16], // 25 wanted, capped at maxParallelism
      ['idle', null, 0, null],
    ]);
    expect(scalingAdvice([{ name: 's', partitions: 4, recordsIn: 100, busyMs: 1, ...chain }], 10, 8).stages[0].advisedPartitions).toBe(1);
    expect(() => scalingAdvice([], 10, 8, 0)).toThrow(/utilization: expected a share in \(0, 1\], received 0/);
  });

  it('propagates the rate by selectivity, so a backlog before a slow stage does not shrink its advice', () => {
    // The map sent 12,000 records on; the slow stage took in only 4,000 of them so far (the rest wait in its queue).
    const stages = [
      { name: 'map', partitions: 1, recordsIn: 12_000, recordsOut: 12_000, busyMs: 1_000, ...chain },
      { name: 'slow', partitions: 1, recordsIn: 4_000, busyMs: 10_000, upstream: [0], fedBySources: false }, // 400/s per partition
    ];
    const [, slow] = scalingAdvice(stages, 1_200, 64, 1).stages;
    expect(slow.requiredRate).toBe(1_200);
    expect(slow.advisedPartitions).toBe(3);
    expect(scalingAdvice(stages, 1_200, 64).stages[1].advisedPartitions).toBe(4); // 1,200 at 320/s per partition
    // Without the upstream's records out, the share falls back to what the stage took in (and the backlog shrinks it).
    const unmeasured = { ...stages[0], recordsOut: undefined };
    expect(scalingAdvice([unmeasured, stages[1]], 1_200, 64).stages[1].requiredRate).toBe(400);
  });

  it('splits the target among source-fed stages and an upstream among its consumers by what they took in', () => {
    const a = scalingAdvice(
      [
        { name: 'a', partitions: 1, recordsIn: 3_000, recordsOut: 6_000, busyMs: 1_000, ...chain },
        { name: 'b', partitions: 1, recordsIn: 1_000, busyMs: 1_000, ...chain },
        { name: 'left', partitions: 1, recordsIn: 1_000, busyMs: 1_000, upstream: [0], fedBySources: false },
        { name: 'right', partitions: 1, recordsIn: 3_000, busyMs: 1_000, upstream: [0], fedBySources: false },
      ],
      4_000,
      64,
    );
    expect(a.stages.map((s) => s.requiredRate)).toEqual([3_000, 1_000, 1_500, 4_500]);
  });

  it('reads the stage graph off a plan', () => {
    const job = new Job('graph', { parallelism: 2 });
    job
      .fromItems('n', [1, 2, 3])
      .keyBy((x: number) => x % 2)
      .process<number>({ processElement: (x: number, ctx) => ctx.emit(x) })
      .keyBy((x: number) => x)
      .process<number>({ processElement: (x: number, ctx) => ctx.emit(x) })
      .sinkTo(Sinks.collect(), 'out');
    const plan = compile(job.graph);
    expect(stageInputs(plan)).toEqual([
      { upstream: [], fedBySources: true },
      { upstream: [0], fedBySources: false },
      { upstream: [1], fedBySources: false },
    ]);
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
    const inputs = stageInputs(plan);
    const loads = plan.stages.map((s) => ({ name: s.name, partitions: s.parallelism, ...stats.load[s.name], ...inputs[s.id] }));
    expect(loads.map((l) => [l.recordsIn, l.recordsOut])).toEqual([
      [300, 300],
      [300, 0],
    ]);
    expect(loads[1].busyMs).toBeGreaterThanOrEqual(300); // 300 records, 1 ms of spin each
    const advice = scalingAdvice(loads, 8_000, 64);
    const [fast, slow] = advice.stages;
    expect(slow.truePerPartition!).toBeLessThanOrEqual(1_000);
    expect(slow.advisedPartitions!).toBeGreaterThanOrEqual(8);
    expect(fast.advisedPartitions!).toBeLessThan(slow.advisedPartitions!);
  });
});
