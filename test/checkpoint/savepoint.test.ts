/**
 * Savepoints: taken while a job runs, self-contained (their own directory), and a new
 * run started from one in another checkpoint directory continues exactly where the
 * savepoint was: committed output before it plus the new run's output equals an
 * uninterrupted run's. Also after a compatible change (other parallelism: state moves
 * by operator name and key group).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { payments, tmp, totalsJob, totalsOrder } from './jobs.ts';
import { runWithSavepoint } from './savepoint-run.ts';

const N = 2000;

describe('savepoints', () => {
  for (const parallelism of [3, 4]) {
    it(`a run restored from a savepoint (parallelism 3 -> ${parallelism}) continues exactly where it was taken`, async () => {
      const ref = Sinks.collect<unknown>();
      await runJob(totalsJob(payments(N), ref), { sourceBatchSize: 32 });

      const { dir: a, epoch, before } = await runWithSavepoint('sluice-sp-a-', (sink) => totalsJob(payments(N), sink));
      expect(before.length).toBeGreaterThan(0);

      const b = tmp('sluice-sp-b-');
      const outB = join(b, 'out.jsonl');
      const sinkB = new CommittedFileSink(outB, join(b, 'sinks', 'out'), false);
      const second = await openCheckpointedRuntime(
        totalsJob(payments(N), sinkB, parallelism),
        { sinks: { out: sinkB }, sourceBatchSize: 32 },
        { dir: b, intervalMs: 0, sinks: [sinkB], durable: false, start: { from: join(a, 'savepoints', 'mid') } },
      );
      expect(second.checkpoints.restoredEpoch).toBe(epoch);
      await second.runtime.run();
      const after = readFileSync(outB, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
      assertExactlyOnce(ref.records, [...before, ...after], { orderKey: totalsOrder });
    });
  }
});
