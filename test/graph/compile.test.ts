import { describe, expect, it } from 'vitest';
import { Job } from '../../lib/api/stream.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { Windows } from '../../lib/api/windows.ts';
import { JobDefinitionError } from '../../lib/errors.ts';
import { channelsInto, compile } from '../../lib/graph/compile.ts';

const items = [{ k: 'a', v: 1 }];

describe('compile', () => {
  it('chains stateless operators into the source stage and starts a stage at each keyBy', () => {
    const job = new Job('stages', { parallelism: 3 });
    job
      .fromItems('in', items)
      .map((x) => x)
      .filter(() => true)
      .keyBy((x) => x.k)
      .process({ processElement: (v, ctx) => ctx.emit(v) })
      .map((x) => x)
      .sinkTo(Sinks.collect());
    const plan = compile(job.graph);
    expect(plan.stages.map((s) => s.nodes)).toEqual([[0, 1, 2], [3, 4, 5]]);
    expect(plan.edges.map((e) => e.partitioning)).toEqual(['source', 'hash']);
    expect(channelsInto(plan, plan.edges[1], 0)).toEqual(['1:0', '1:1', '1:2']);
    expect(channelsInto(plan, plan.edges[0], 2)).toEqual(['0:2']);
  });

  it('gives a two-input operator both keyed edges, and rebalances a union of stages', () => {
    const job = new Job('two');
    const a = job.fromItems('a', items);
    const b = job.fromItems('b', items);
    const joined = a
      .keyBy((x) => x.k)
      .connect(b.keyBy((x) => x.k))
      .process<{ k: string; v: number }>({ processElement1: (v, c) => c.emit(v), processElement2: (v, c) => c.emit(v) });
    joined.union(a).sinkTo(Sinks.collect());
    const plan = compile(job.graph);
    const join = plan.stages[plan.stageOfNode[2]];
    expect(join.inputs.map((e) => plan.edges[e].toInput)).toEqual([0, 1]);
    const union = plan.stages[plan.stageOfNode[3]];
    expect(union.inputs.map((e) => plan.edges[e].partitioning)).toEqual(['rebalance', 'rebalance']);
  });

  it('rejects a window on an unkeyed stream, naming the operator and the fix', () => {
    const job = new Job('w');
    const s = job.fromItems('in', items).name('numbers');
    expect(() => s.window(Windows.tumbling(10))).toThrow(JobDefinitionError);
    expect(() => s.window(Windows.tumbling(10))).toThrow(/window after "numbers".*keyBy/);
  });

  it('rejects duplicate names', () => {
    const job = new Job('dup');
    job.fromItems('in', items).map((x) => x).name('double').map((x) => x).name('double').sinkTo(Sinks.collect());
    expect(() => compile(job.graph)).toThrow(/operator "double": expected a name no other operator or source of the job uses, received a duplicate of map #1/);
  });

  it('rejects parallelism above maxParallelism', () => {
    const job = new Job('par', { maxParallelism: 8 });
    job.fromItems('in', items).keyBy((x) => x.k).process({ processElement: () => {} }).parallelism(9).sinkTo(Sinks.collect());
    expect(() => compile(job.graph)).toThrow(/parallelism an integer from 1 to maxParallelism \(8\), received 9/);
  });

  it('rejects a job parallelism above maxParallelism, and jobs without sources or sinks', () => {
    const tooWide = new Job('wide', { parallelism: 200 });
    tooWide.fromItems('in', items).print();
    expect(() => compile(tooWide.graph)).toThrow(/received 200/);
    const noSink = new Job('nosink');
    noSink.fromItems('in', items);
    expect(() => compile(noSink.graph)).toThrow(/at least one sink/);
    expect(() => compile(new Job('empty').graph)).toThrow(/at least one source/);
  });

  it('rejects a keyed operator fed by an unkeyed edge built by hand', () => {
    const job = new Job('raw');
    job.fromItems('in', items);
    job.graph.addNode({ kind: 'keyedProcess', fn: { processElement: () => {} } }, [{ node: 0, port: 'main', partitioning: { kind: 'forward' } }], 'counter');
    job.graph.addNode({ kind: 'sink', sink: Sinks.collect() }, [{ node: 1, port: 'main', partitioning: { kind: 'forward' } }]);
    expect(() => compile(job.graph)).toThrow(/operator "counter": expected a keyed input for keyedProcess \(call keyBy\(\.\.\.\) first\), received an unkeyed stream/);
  });

  it('rejects bad job names', () => {
    expect(() => new Job('has space')).toThrow(/job.*received "has space"/);
  });
});
