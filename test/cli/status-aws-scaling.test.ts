/**
 * Scaling advice for a deployed job (lib/cli/status-aws-scaling.ts), from measured loads:
 * the partitions a stage needs at the arrival rate or --target-rate, the maximum
 * concurrency that goes with them, and the steps --apply takes (a rescale for a stage
 * after the sources, a concurrency where only that falls short; a source stage keeps its
 * partitions).
 */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import type { MeasuredLoads } from '../../lib/aws/stage-loads.ts';
import { awsScaling, printAwsScaling, scalingSteps } from '../../lib/cli/status-aws-scaling.ts';
import { compile } from '../../lib/graph/compile.ts';
import { stageInputs } from '../../lib/runtime/scaling-advice.ts';

function plan() {
  const job = new Job('orders', { parallelism: 1, maxParallelism: 32 });
  job
    .fromItems('n', [1, 2, 3])
    .keyBy((x: number) => x % 2)
    .process<number>({ processElement: (x: number, ctx) => ctx.emit(x) })
    .name('parse')
    .keyBy((x: number) => x)
    .process<number>({ processElement: (x: number, ctx) => ctx.emit(x) })
    .name('totals')
    .sinkTo(Sinks.collect(), 'out');
  return compile(job.graph);
}

/** Ten minutes at 100 events/s arriving: the source stage took all, 1,000/s per second of Duration; totals 40/s per second of Duration. */
function measured(p = plan()): MeasuredLoads {
  const inputs = stageInputs(p);
  return {
    spanMs: 600_000,
    sourceRate: 100,
    loads: [
      { name: p.stages[0].name, partitions: 1, recordsIn: 60_000, recordsOut: 60_000, busyMs: 60_000, ...inputs[0] },
      { name: p.stages[1].name, partitions: 1, recordsIn: 24_000, recordsOut: 24_000, busyMs: 600_000, ...inputs[1] },
    ],
  };
}

describe('scaling advice for a deployed job', () => {
  it('advises each stage for what arrives, with the maximum concurrency its partitions need', () => {
    const p = plan();
    const s = awsScaling(p, measured(p), [[{ functionName: 'f0', maxConcurrency: 2 }], [{ functionName: 'f1' }]]);
    expect(s.targetRate).toBe(100);
    expect(s.stages.map((a) => [a.stage, a.truePerPartition, a.requiredRate, a.advisedPartitions, a.advisedMaxConcurrency, a.maxConcurrency, a.rescalable])).toEqual([
      [0, 1_000, 100, 1, 2, 2, false],
      [1, 40, 100, 4, 4, null, true], // 100/s at 80 % of 40/s per partition
    ]);
    expect(scalingSteps(s)).toEqual([{ kind: 'rescale', stage: 1, name: p.stages[1].name, partitions: 4, maxConcurrency: 4 }]);
    const lines: string[] = [];
    printAwsScaling(s, 'jobs/orders.ts', (l) => lines.push(l));
    expect(lines[0]).toMatch(/scaling at 100 source records\/s \(what arrived over the last 10 min/);
    expect(lines[2]).toContain('40 records/s per partition (now 1 partition, maximum concurrency not set); needs 100/s: 4 partitions, maximum concurrency 4 (sluice rescale jobs/orders.ts --stage 1 --partitions 4 --max-concurrency 4 --target aws)');
  });

  it('at --target-rate; a source stage keeps its partitions and gets only the concurrency they can use', () => {
    const p = plan();
    const m = measured(p);
    const wide: MeasuredLoads = { ...m, loads: [{ ...m.loads[0], partitions: 3 }, { ...m.loads[1], partitions: 30 }] };
    const s = awsScaling(p, wide, [[{ functionName: 'f0', maxConcurrency: 2 }, { functionName: 'f0b', maxConcurrency: 5 }], [{ functionName: 'f1', maxConcurrency: 30 }]], 3_000);
    expect(s.stages.map((a) => [a.advisedPartitions, a.maxConcurrency])).toEqual([
      [4, 2], // the lowest mapping's
      [32, 30], // 94 wanted, capped at maxParallelism
    ]);
    expect(scalingSteps(s)).toEqual([
      { kind: 'concurrency', stage: 0, name: p.stages[0].name, maxConcurrency: 3 }, // no more than its 3 partitions can use
      { kind: 'rescale', stage: 1, name: p.stages[1].name, partitions: 32, maxConcurrency: 32 },
    ]);
    const lines: string[] = [];
    printAwsScaling(s, 'j.ts', (l) => lines.push(l));
    expect(lines[0]).toContain('--target-rate; 100/s arrived');
    expect(lines[1]).toContain('(a source stage keeps its partitions)');
  });

  it('changes nothing without traffic or where the stages keep up', () => {
    const p = plan();
    const idle: MeasuredLoads = { spanMs: 600_000, sourceRate: 0, loads: measured(p).loads.map((l) => ({ ...l, recordsIn: 0, recordsOut: 0, busyMs: 0 })) };
    const s = awsScaling(p, idle, [[], []]);
    expect(s.stages.map((a) => a.advisedPartitions)).toEqual([null, null]);
    expect(scalingSteps(s)).toEqual([]);
    const lines: string[] = [];
    printAwsScaling(s, 'j.ts', (l) => lines.push(l));
    expect(lines[1]).toContain('no batches in the last 10 min');
    const keepsUp = awsScaling(p, measured(p), [[{ functionName: 'f0', maxConcurrency: 2 }], [{ functionName: 'f1', maxConcurrency: 3 }]], 30);
    expect(keepsUp.stages.map((a) => a.advisedPartitions)).toEqual([1, 1]);
    expect(scalingSteps(keepsUp)).toEqual([]);
  });
});
