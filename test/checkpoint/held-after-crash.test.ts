/**
 * Envelopes held behind a barrier, when the partition crashes after the barrier's commit
 * and before the next one (a simulated crash before a commit, the embedded runtime's
 * in-process recovery; a Lambda retry on AWS). The barrier's commit consumes the held
 * envelopes' positions, so their redelivered copies are dropped as duplicates: the
 * committed progress must still carry them, and the recovered partition applies them
 * first. Checked by exactly-once against an uninterrupted run without checkpoints.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { FaultInjector } from '../../lib/local/faults.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { lines, payments, tmp, totalsJob, totalsOrder } from './jobs.ts';

const OPTS = { sourceBatchSize: 32, maxEnvelopesPerBatch: 4 };

describe('held envelopes and a crash after the barrier commit', () => {
  it('are applied once: the output equals the uninterrupted run\'s (seeded crashes before commits, checkpoints every 3 ms)', async () => {
    const ref = Sinks.collect<unknown>();
    await runJob(totalsJob(payments(2000), ref), OPTS);
    let crashesAfterAlignment = 0;
    for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
      const clock = new ManualClock(1_000_000);
      const faults = new FaultInjector({ seed: seed * 31, crashProbability: 0.15, points: ['before-commit'] });
      const dir = tmp('sluice-held-');
      const file = join(dir, 'out.jsonl');
      const sink = new CommittedFileSink(file, join(dir, 'sinks', 'out'), false);
      const { runtime, checkpoints } = await openCheckpointedRuntime(
        totalsJob(payments(2000)),
        { clock, sinks: { out: sink }, ...OPTS, faults, onSourceRecords: () => clock.advance(1) },
        { dir, intervalMs: 3, sinks: [sink], durable: false, start: 'fresh' },
      );
      await runtime.run();
      checkpoints.close();
      expect(checkpoints.driver.completed.length).toBeGreaterThan(1);
      assertExactlyOnce(ref.records, lines(file).map((l) => JSON.parse(l)), { orderKey: totalsOrder, label: `seed ${seed}` });
      crashesAfterAlignment += faults.injected['before-commit'];
    }
    expect(crashesAfterAlignment).toBeGreaterThan(0);
  });
});
