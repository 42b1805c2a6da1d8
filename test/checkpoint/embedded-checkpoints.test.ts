/**
 * Checkpoints on the embedded runtime, end to end: periodic epochs complete, the
 * transactional file sink's output equals an unchecked run's, the coordinator record
 * and pointer are on disk, and `sluice checkpoints`-style stats exist.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { lines, payments, tmp, totalsJob, totalsOrder, userOrder, windowJob } from './jobs.ts';

async function reference(make: typeof totalsJob, n: number): Promise<unknown[]> {
  const out = Sinks.collect<unknown>();
  await runJob(make(payments(n), out), { sourceBatchSize: 64, maxEnvelopesPerBatch: 4 });
  return out.records;
}

describe('checkpointed embedded runs', () => {
  for (const [name, make, durable] of [['totals', totalsJob, true], ['windows', windowJob, false]] as const) {
    it(`${name}${durable ? ' (fsynced)' : ''}: periodic epochs complete and the committed output equals an unchecked run's`, async () => {
      const dir = tmp('sluice-ck-');
      const file = join(dir, 'out.jsonl');
      const sink = new CommittedFileSink(file, join(dir, 'sinks', 'out'), durable);
      const clock = new ManualClock(1_000_000);
      const { runtime, checkpoints } = await openCheckpointedRuntime(
        make(payments(3000)),
        // Small batches and no lingering (the clock moves per source chunk): many rounds, so many epochs.
        { clock, sinks: { out: sink }, sourceBatchSize: 64, maxEnvelopesPerBatch: 4, lingerRounds: 0, onSourceRecords: () => clock.advance(1) },
        { dir, intervalMs: 4, sinks: [sink], durable },
      );
      await runtime.run();
      const done = checkpoints.driver.completed;
      expect(done.length).toBeGreaterThan(5);
      expect(done.some((c) => c.fullSnapshots === 0)).toBe(true);
      expect(existsSync(join(dir, 'pointers', 'pointer.json'))).toBe(true);
      const got = lines(file).map((l) => JSON.parse(l));
      assertExactlyOnce(await reference(make, 3000), got, { orderKey: name === 'totals' ? totalsOrder : userOrder });
      expect(sink.committed().epoch).toBe(checkpoints.driver.state.lastCompleted!.epoch);
    });
  }
});
