/**
 * A refused resume or restore leaves the checkpoint directory as it was: the output check
 * (the file the directory's checkpoints committed to) runs before anything is deleted,
 * so the retained checkpoints can still be restored with the right output.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RestoreError } from '../../lib/checkpoint/driver-errors.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import { runWithKills } from '../support/kill-harness.ts';
import { payments, tmp, windowJob } from './jobs.ts';

describe('a refused restore', () => {
  it('deletes nothing: another --output is refused, then the same checkpoint restores with the right one', async () => {
    const first = await runWithKills(() => windowJob(payments(2000)), { seed: 3, kills: 1, embedded: { sourceBatchSize: 32 } });
    const dir = first.dir;
    const epochs = first.checkpoints.driver.completed.map((c) => c.epoch);
    expect(epochs.length).toBeGreaterThan(0);
    const pointer = join(dir, 'pointers', 'pointer.json');
    const before = readFileSync(pointer, 'utf8');

    for (const start of [{ from: String(epochs.at(-1)!) }, 'resume'] as const) {
      const wrong = new CommittedFileSink(join(tmp('sluice-wrong-'), 'other.jsonl'), join(dir, 'sinks', 'out'), false);
      await expect(openCheckpointedRuntime(windowJob(payments(2000)), { sinks: { out: wrong } }, { dir, intervalMs: 0, sinks: [wrong], durable: false, start })).rejects.toThrow(RestoreError);
      expect(existsSync(pointer), `${JSON.stringify(start)}: the commit pointer is still there`).toBe(true);
      expect(readFileSync(pointer, 'utf8')).toBe(before);
    }
    const right = new CommittedFileSink(first.file, join(dir, 'sinks', 'out'), false);
    const again = await openCheckpointedRuntime(windowJob(payments(2000)), { sinks: { out: right } }, { dir, intervalMs: 0, sinks: [right], durable: false, start: { from: String(epochs.at(-1)!) } });
    expect(again.checkpoints.restoredEpoch).toBe(epochs.at(-1)!);
    await again.runtime.run();
    again.checkpoints.close();
  });
});
