/**
 * State identity (uid) and sink handles: an operator's state is stored under its uid,
 * which defaults to its name (plans without a uid fingerprint and describe their state as
 * before); renaming an operator that has a uid keeps its keyed state and timers across a
 * savepoint restore, renaming one without a uid is refused by the compatibility check; a
 * uid used twice fails the build naming both operators. sinkTo returns a handle that
 * names the sink, sets its uid and parallelism.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { mapState, valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { OutputTag, WatermarkStrategies } from '../../lib/api/types.ts';
import { StateCompatibilityError } from '../../lib/checkpoint/driver-errors.ts';
import { planFingerprint, stateDescriptors } from '../../lib/checkpoint/fingerprint.ts';
import { JobDefinitionError } from '../../lib/errors.ts';
import { compile } from '../../lib/graph/compile.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { payments, tmp } from '../checkpoint/jobs.ts';
import { runWithSavepoint } from '../checkpoint/savepoint-run.ts';

const N = 2000;

/** Running totals per user with a timer per second of event time; `name` and `uid` of the keyed operator vary. */
function totals(sink: Sink<unknown>, o: { name: string; uid?: string; parallelism?: number }): Job {
  const job = new Job('uid-totals', { parallelism: o.parallelism ?? 2 });
  const keyed = job
    .fromItems('payments', payments(N), { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(20), parallelism: 1 })
    .keyBy((e) => e.user)
    .process({
      state: { total: valueState<number>(), perSecond: mapState<number, number>() },
      processElement(e, ctx) {
        const total = (ctx.state.total.get() ?? 0) + e.amount;
        ctx.state.total.set(total);
        ctx.emit({ user: e.user, total });
        const second = Math.floor(e.t / 1000);
        ctx.state.perSecond.set(second, (ctx.state.perSecond.get(second) ?? 0) + e.amount);
        ctx.timers.registerEventTimeTimer(second * 1000 + 999);
      },
      onTimer(t, ctx) {
        const second = Math.floor(t / 1000);
        ctx.emit({ user: ctx.key as string, second, sum: ctx.state.perSecond.get(second) });
        ctx.state.perSecond.delete(second);
      },
    })
    .name(o.name);
  if (o.uid !== undefined) keyed.uid(o.uid);
  keyed.sinkTo(sink, 'out');
  return job;
}

const order = (r: unknown) => (r as { user: string }).user;

async function restoreInto(from: string, job: (sink: Sink<unknown>) => Job): Promise<unknown[]> {
  const b = tmp('sluice-uid-b-');
  const out = join(b, 'out.jsonl');
  const sink = new CommittedFileSink(out, join(b, 'sinks', 'out'), false);
  const run = await openCheckpointedRuntime(job(sink), { sinks: { out: sink }, sourceBatchSize: 32 }, { dir: b, intervalMs: 0, sinks: [sink], durable: false, start: { from } });
  await run.runtime.run();
  run.checkpoints.close();
  return readFileSync(out, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

describe('uid(): state identity', () => {
  it('defaults to the name: the same state descriptors and plan fingerprint as without one', () => {
    const plain = compile(totals(Sinks.collect(), { name: 'totals' }).graph);
    const same = compile(totals(Sinks.collect(), { name: 'totals', uid: 'totals' }).graph);
    const other = compile(totals(Sinks.collect(), { name: 'totals', uid: 'totals-v1' }).graph);
    expect(stateDescriptors(plain)).toEqual([{ operator: 'totals', kind: 'keyedProcess', states: [['perSecond', 'map'], ['total', 'value']] }]);
    expect(planFingerprint(same)).toBe(planFingerprint(plain));
    // The compatibility check reports state by uid.
    expect(stateDescriptors(other).map((d) => d.operator)).toEqual(['totals-v1']);
    expect(planFingerprint(other)).not.toBe(planFingerprint(plain));
  });

  it('a renamed operator with a uid keeps its state and timers across a savepoint restore', async () => {
    const ref = Sinks.collect<unknown>();
    await runJob(totals(ref, { name: 'totals', uid: 'totals-v1' }), { sourceBatchSize: 32 });
    const { dir, before } = await runWithSavepoint('sluice-uid-a-', (sink) => totals(sink, { name: 'totals', uid: 'totals-v1' }));
    expect(before.length).toBeGreaterThan(0);
    const after = await restoreInto(join(dir, 'savepoints', 'mid'), (sink) => totals(sink, { name: 'running-totals', uid: 'totals-v1', parallelism: 3 }));
    assertExactlyOnce(ref.records, [...before, ...after], { orderKey: order });
  }, 120_000);

  it('a renamed operator without a uid has no state to restore: the check names it', async () => {
    const { dir } = await runWithSavepoint('sluice-uid-c-', (sink) => totals(sink, { name: 'totals' }));
    const from = join(dir, 'savepoints', 'mid');
    const err = await restoreInto(from, (sink) => totals(sink, { name: 'running-totals' })).catch((e) => e);
    expect(err).toBeInstanceOf(StateCompatibilityError);
    expect((err as StateCompatibilityError).problems).toEqual(['stateful operator "totals" (keyedProcess) has no operator of that name in this job']);
    // Giving the operator a uid of its own name later keeps it; another uid is named as the cause.
    const uid = await restoreInto(from, (sink) => totals(sink, { name: 'totals', uid: 'totals-v2' })).catch((e) => e);
    expect((uid as StateCompatibilityError).problems).toEqual(['stateful operator "totals" (keyedProcess) has no operator of that name in this job; operator "totals" has uid "totals-v2" now (uid("totals") keeps its state)']);
  }, 120_000);

  it('a uid used twice fails the build, naming both operators', () => {
    const job = new Job('dup-uid');
    const keyed = job.fromItems('in', [{ k: 'a' }]).keyBy((x) => x.k);
    keyed.process({ processElement: (v, ctx) => ctx.emit(v) }).name('first').uid('shared').sinkTo(Sinks.collect(), 'a');
    keyed.process({ processElement: (v, ctx) => ctx.emit(v) }).name('second').uid('shared').sinkTo(Sinks.collect(), 'b');
    expect(() => compile(job.graph)).toThrow(JobDefinitionError);
    expect(() => compile(job.graph)).toThrow('operator "second": expected a uid no other operator of the job has (state is stored under it), received uid "shared" of both keyedProcess "first" (uid "shared") and keyedProcess "second" (uid "shared")');
    // An operator's uid may not be another operator's name either: that name is its state identity.
    const clash = new Job('clash');
    const k2 = clash.fromItems('in', [{ k: 'a' }]).keyBy((x) => x.k);
    k2.process({ processElement: (v, ctx) => ctx.emit(v) }).name('counts').sinkTo(Sinks.collect(), 'a');
    k2.process({ processElement: (v, ctx) => ctx.emit(v) }).name('other').uid('counts').sinkTo(Sinks.collect(), 'b');
    expect(() => compile(clash.graph)).toThrow(/uid "counts" of both keyedProcess "counts" \(its name\) and keyedProcess "other" \(uid "counts"\)/);
  });

  it('rejects an empty uid, one with control characters, and one on a side output', () => {
    const s = new Job('bad-uid').fromItems('in', [1]);
    expect(() => s.map((x) => x).uid('')).toThrow(/uid\(\) as 1 to 200 characters without control characters, received ""/);
    expect(() => s.map((x) => x).uid('a\u0001b')).toThrow(JobDefinitionError);
    expect(() => s.getSideOutput(new OutputTag<number>('late')).uid('x')).toThrow(/uid\(\) on an operator, not on a side output/);
  });
});

describe('sinkTo(): a handle on the sink', () => {
  it('names the sink, sets its uid and parallelism, chainably; the runtime binds and runs it by that name', async () => {
    const job = new Job('sink-handle', { parallelism: 2 });
    const sink = Sinks.collect<number>();
    const handle = job
      .fromItems('in', [1, 2, 3, 4, 5, 6], { parallelism: 2 })
      .map((x) => x * 10)
      .sinkTo(sink)
      .name('tens')
      .uid('tens-v1')
      .parallelism(1);
    expect([handle.getName(), handle.getUid(), handle.getParallelism()]).toEqual(['tens', 'tens-v1', 1]);
    const plan = compile(job.graph);
    // Parallelism 1 after a stage of 2: the sink runs as a stage of its own.
    expect(plan.stages.map((s) => [s.name, s.parallelism])).toEqual([['in', 2], ['tens', 1]]);
    const bound = Sinks.collect<number>();
    await runJob(job, { sinks: { tens: bound } });
    expect(bound.records.sort((a, b) => a - b)).toEqual([10, 20, 30, 40, 50, 60]);
    expect(sink.records).toEqual([]);
    // Unnamed, the handle shows the generated name, which is also its uid.
    const plain = new Job('sink-plain').fromItems('in', [1]).print();
    expect([plain.getName(), plain.getUid(), plain.getParallelism()]).toEqual(['sink-1', 'sink-1', undefined]);
  });
});
