/** Job.withParallelism: the default for operators without their own, per operator by name; the original job untouched. */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { compile } from '../../lib/graph/compile.ts';

function job(): Job {
  const j = new Job('p', { parallelism: 2, maxParallelism: 16 });
  j.fromItems('src', [1, 2, 3], { parallelism: 1 })
    .map((x: number) => x + 1)
    .name('inc')
    .keyBy((x) => x % 3)
    .process({ processElement: (x: number, ctx) => ctx.emit(x) })
    .name('keyed')
    .sinkTo(Sinks.collect(), 'out');
  return j;
}

const stages = (j: Job) => compile(j.graph).stages.map((s) => s.parallelism);

describe('Job.withParallelism', () => {
  it('sets the default of operators without their own, and any operator by name; the job itself is unchanged', () => {
    const j = job();
    expect(stages(j)).toEqual([1, 2]);
    expect(stages(j.withParallelism({ default: 5 }))).toEqual([1, 5]);
    expect(stages(j.withParallelism({ operators: { src: 3, keyed: 7 } }))).toEqual([3, 7]);
    expect(stages(j)).toEqual([1, 2]);
    expect(j.withParallelism({ default: 4 }).graph.maxParallelism).toBe(16);
    expect(j.withParallelism({ default: 4 }).name).toBe('p');
  });

  it('names the operators it has when asked for one it has not; the compiler bounds the value by maxParallelism', () => {
    expect(() => job().withParallelism({ operators: { nope: 2 } })).toThrow('operator "nope": expected a parallelism for an operator of job "p" (src, inc, keyed, out), received no such operator');
    expect(() => compile(job().withParallelism({ default: 17 }).graph)).toThrow(/parallelism an integer from 1 to maxParallelism \(16\)/);
  });
});
