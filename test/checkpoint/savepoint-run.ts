/**
 * A checkpointed run (a checkpoint every 5 ms of a manual clock that moves 1 ms per source
 * record, 32-record chunks) that takes savepoint "mid" once 900 source records are in, and
 * what its committed file sink held at the savepoint's epoch: the first half of a
 * "restore from a savepoint, then continue" test.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Sink } from '../../lib/api/sinks.ts';
import type { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink, type CommittedState } from '../../lib/local/committed-sink.ts';
import { tmp } from './jobs.ts';

export interface SavepointRun {
  /** The run's checkpoint directory; the savepoint is `savepoints/mid` in it. */
  readonly dir: string;
  /** The savepoint's epoch, and the last checkpoint the run completed. */
  readonly epoch: number;
  readonly lastEpoch: number;
  /** The output rows committed at the savepoint's epoch (what readers saw then). */
  readonly before: unknown[];
}

export async function runWithSavepoint(prefix: string, job: (sink: Sink<unknown>) => Job): Promise<SavepointRun> {
  const dir = tmp(prefix);
  const out = join(dir, 'out.jsonl');
  const sink = new CommittedFileSink<unknown>(out, join(dir, 'sinks', 'out'), false);
  const clock = new ManualClock(1_000_000);
  let taken: Promise<{ stats: { epoch: number } }> | undefined;
  const first = await openCheckpointedRuntime(
    job(sink),
    {
      clock,
      sinks: { out: sink },
      sourceBatchSize: 32,
      onSourceRecords: (n) => {
        clock.advance(1);
        if (n >= 900 && !taken) taken = first.checkpoints.savepoint('mid');
      },
    },
    { dir, intervalMs: 5, sinks: [sink], durable: false },
  );
  await first.runtime.run();
  first.checkpoints.close();
  const { stats } = await taken!;
  const state = JSON.parse(readFileSync(join(dir, 'sinks', 'out', 'committed.json'), 'utf8')) as CommittedState;
  const at = state.history.find((h) => h.epoch === stats.epoch)!;
  const before = readFileSync(out, 'utf8').slice(0, at.length).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  return { dir, epoch: stats.epoch, lastEpoch: first.checkpoints.driver.completed.at(-1)!.epoch, before };
}
