/**
 * Incremental snapshots: an epoch's snapshot holds the keys changed since the last
 * completed checkpoint, so its size follows the traffic, not the state. Two runs with
 * the same late traffic (a handful of hot keys) over a small and a ten times larger
 * idle state write deltas of the same size, while a full restore reads ten times more.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import type { CheckpointStats } from '../../lib/checkpoint/driver.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { tmp } from './jobs.ts';

function job(idleKeys: number): Job {
  const items = [
    ...Array.from({ length: idleKeys }, (_, i) => ({ k: `idle-${i}`, phase: 1 })),
    ...Array.from({ length: 4000 }, (_, i) => ({ k: `hot-${i % 5}`, phase: 2 })),
  ];
  const j = new Job('idle-state', { parallelism: 2 });
  j.fromItems('in', items)
    .keyBy((e) => e.k)
    .process({
      state: { n: valueState<number>(), payload: valueState<string>() },
      processElement(e, ctx) {
        ctx.state.n.set((ctx.state.n.get() ?? 0) + 1);
        if (e.phase === 1) ctx.state.payload.set('x'.repeat(40));
      },
    })
    .name('counts')
    .sinkTo(Sinks.collect(), 'out');
  return j;
}

async function run(idleKeys: number): Promise<{ stats: CheckpointStats[]; phase2: CheckpointStats[] }> {
  const dir = tmp('sluice-size-');
  const clock = new ManualClock(1_000_000);
  let read = 0;
  const phase2: number[] = [];
  const { runtime, checkpoints } = await openCheckpointedRuntime(
    job(idleKeys),
    {
      clock,
      sourceBatchSize: 50,
      onSourceRecords: (n) => {
        read = n;
        clock.advance(1);
      },
    },
    { dir: join(dir, 'ck'), intervalMs: 2, maxChainLength: 1000, durable: false },
  );
  // Epochs opened once every idle key was read (and the epoch before them had completed) only carry hot keys.
  const origTick = checkpoints.tick.bind(checkpoints);
  checkpoints.tick = async (drained) => {
    const before = checkpoints.driver.state.highestEpoch;
    const r = await origTick(drained);
    if (checkpoints.driver.state.highestEpoch > before && read >= idleKeys + 200) phase2.push(checkpoints.driver.state.highestEpoch);
    return r;
  };
  await runtime.run();
  const stats = checkpoints.driver.completed;
  return { stats, phase2: stats.filter((s) => phase2.includes(s.epoch)).slice(1) };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

describe('snapshot size', () => {
  it('grows with the keys changed in the epoch, not with the total state', async () => {
    const small = await run(2_000);
    const large = await run(20_000);
    for (const r of [small, large]) {
      expect(r.phase2.length).toBeGreaterThan(3);
      // Only the five hot keys changed: no phase-2 epoch writes more than five entities.
      for (const s of r.phase2) expect(s.entities).toBeLessThanOrEqual(5);
      expect(r.stats[0].fullSnapshots).toBeGreaterThan(0);
    }
    const deltaRatio = median(large.phase2.map((s) => s.bytes)) / median(small.phase2.map((s) => s.bytes));
    const stateRatio = large.stats.at(-1)!.restoreBytes / small.stats.at(-1)!.restoreBytes;
    expect(deltaRatio).toBeLessThan(1.3);
    expect(stateRatio).toBeGreaterThan(5);
  });
});
