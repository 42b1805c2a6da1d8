/**
 * Rescaling on the embedded runtime: a job runs at one parallelism, takes savepoint "mid"
 * in the middle of its input (windows open, timers pending), and a new run of the same job
 * at another parallelism (Job.withParallelism, what `--parallelism` applies) starts from
 * it: keyed state and timers move by key group to the partitions that now own them. Up
 * (2 -> 4) and down (4 -> 1), through tumbling, sliding and session windows and a keyed
 * process function with event-time timers; and the rescaled run killed twice at seeded
 * points and resumed (or its restore run again, before its first checkpoint). Output
 * before the savepoint plus the rescaled run's equals an uninterrupted run's at either
 * parallelism by the checker: none lost, duplicated or unexpected, per-key order kept.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { assertExactlyOnce, compareOutputs } from '../../lib/testing/checker.ts';
import { runWithKills } from '../support/kill-harness.ts';
import { combinedWindowJob, type Ev, payments, totalsJob, totalsOrder, userOrder, windowJob } from './jobs.ts';
import { runWithSavepoint } from './savepoint-run.ts';

const N = 2000;
const OPTS = { sourceBatchSize: 32 };

/** Per user, sessions of payments at most 40 ms apart: their sums. */
function sessionJob(items: readonly Ev[], sink: Sink<unknown> = Sinks.collect()): Job {
  const job = new Job('ck-sessions', { parallelism: 2 });
  job
    .fromItems('payments', items, { timestamp: (e) => e.t + (e.amount % 3) * 30, watermark: WatermarkStrategies.boundedOutOfOrderness(50) })
    .keyBy((e) => e.user)
    .window(Windows.session(40))
    .aggregate({ createAccumulator: () => 0, add: (e: Ev, n: number) => n + e.amount, getResult: (n) => n, merge: (a: number, b: number) => a + b }, (sum, { key, window }) => ({ user: key, sum, start: window.start, end: window.end }))
    .name('sessions')
    .sinkTo(sink, 'out');
  return job;
}

const JOBS = [
  { name: 'a keyed process function with timers', make: (sink?: Sink<unknown>) => totalsJob(payments(N), sink), order: totalsOrder },
  { name: 'tumbling windows', make: (sink?: Sink<unknown>) => windowJob(payments(N), sink), order: userOrder },
  { name: 'sliding windows (pre-aggregated)', make: (sink?: Sink<unknown>) => combinedWindowJob(payments(N), sink), order: userOrder },
  { name: 'session windows', make: (sink?: Sink<unknown>) => sessionJob(payments(N), sink), order: userOrder },
];

async function uninterrupted(job: Job, sink: Sink<unknown> & { records: unknown[] }): Promise<unknown[]> {
  await runJob(job, OPTS);
  return sink.records;
}

describe('rescaling through a savepoint (embedded)', () => {
  for (const j of JOBS) {
    for (const [from, to] of [
      [2, 4],
      [4, 1],
    ] as const) {
      it(`${j.name}, ${from} -> ${to} partitions, the rescaled run killed twice: output equals an uninterrupted run's at either parallelism`, async () => {
        const at = (p: number, sink?: Sink<unknown>) => j.make(sink).withParallelism({ default: p });
        const refFrom = Sinks.collect<unknown>();
        const expected = await uninterrupted(at(from, refFrom), refFrom);
        const refTo = Sinks.collect<unknown>();
        const atTo = await uninterrupted(at(to, refTo), refTo);
        expect(compareOutputs(expected, atTo).counts).toMatchObject({ lost: 0, duplicated: 0, unexpected: 0 });

        const { dir, before } = await runWithSavepoint(`sluice-rescale-${from}-`, (sink) => at(from, sink));
        expect(before.length).toBeGreaterThan(0);
        const rescaled = await runWithKills(() => at(to), { seed: from * 10 + to, kills: 2, window: 30, embedded: OPTS, firstStart: { from: join(dir, 'savepoints', 'mid') } });
        expect(rescaled.killed).toBe(2);
        expect(rescaled.runtime.plan.stages.at(-1)!.parallelism, 'the keyed stage runs rescaled').toBe(to);
        assertExactlyOnce(expected, [...before, ...rescaled.output], { orderKey: j.order, label: `${j.name} ${from} -> ${to}, restored from epochs ${rescaled.restoredFrom.join(', ')}` });
      }, 60_000);
    }
  }
});
