/**
 * Switching pre-aggregation (`.preAggregate(false)`) on or off changes the plan
 * fingerprint: a chain of checkpoints, whose outboxes and held envelopes may carry
 * records where the new plan expects partial aggregates (or the reverse), neither resumes
 * nor restores into it; a savepoint does (channels start fresh, and the window's state,
 * pane accumulators, is the same either way) and continues exactly where it was taken.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { RestoreError } from '../../lib/checkpoint/driver-errors.ts';
import { PlanMismatchError } from '../../lib/checkpoint/errors.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { combinedWindowJob, payments, tmp, userOrder } from './jobs.ts';
import { runWithSavepoint } from './savepoint-run.ts';

const N = 2000;

describe('pre-aggregation and restores', () => {
  it('a checkpoint does not continue across the switch; a savepoint does, exactly where it was taken', async () => {
    const ref = Sinks.collect<unknown>();
    await runJob(combinedWindowJob(payments(N), ref, false), { sourceBatchSize: 32 });

    // An uncombined run with checkpoints and a savepoint midway.
    const { dir: a, epoch, lastEpoch, before } = await runWithSavepoint('sluice-preagg-a-', (sink) => combinedWindowJob(payments(N), sink, false));

    // The combined plan refuses the uncombined chain: resumed, or restored from one of its checkpoints.
    const combined = (sink: Sink<unknown> = Sinks.collect()) => combinedWindowJob(payments(N), sink, true);
    await expect(openCheckpointedRuntime(combined(), {}, { dir: a, intervalMs: 5, durable: false, start: 'resume' })).rejects.toThrow(PlanMismatchError);
    await expect(openCheckpointedRuntime(combined(), {}, { dir: a, intervalMs: 5, durable: false, start: { from: String(lastEpoch) } })).rejects.toThrow(RestoreError);

    // The savepoint restores into the combined plan and the output continues exactly.
    expect(before.length).toBeGreaterThan(0);
    const b = tmp('sluice-preagg-b-');
    const outB = join(b, 'out.jsonl');
    const sinkB = new CommittedFileSink(outB, join(b, 'sinks', 'out'), false);
    const second = await openCheckpointedRuntime(combined(sinkB), { sinks: { out: sinkB }, sourceBatchSize: 32 }, { dir: b, intervalMs: 0, sinks: [sinkB], durable: false, start: { from: join(a, 'savepoints', 'mid') } });
    expect(second.checkpoints.restoredEpoch).toBe(epoch);
    expect(second.runtime.plan.edges.some((e) => e.combine)).toBe(true);
    await second.runtime.run();
    second.checkpoints.close();
    const after = readFileSync(outB, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
    assertExactlyOnce(ref.records, [...before, ...after], { orderKey: userOrder });
  });
});
