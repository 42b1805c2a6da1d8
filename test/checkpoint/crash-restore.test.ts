/**
 * Crash and restore on the embedded runtime, seeded: the process "dies" at a random
 * point (a source read, a snapshot or manifest write, a pointer write, a sink commit),
 * leaving the checkpoint directory as a killed process would (every write is
 * synchronous); a new runtime resumes from the last completed checkpoint and finishes.
 * Partition-level crashes and duplicate deliveries are injected on top. The committed
 * output must equal an uninterrupted run's: no record lost, none twice.
 */
import { describe, expect, it } from 'vitest';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { runWithKills as killHarness } from '../support/kill-harness.ts';
import { combinedWindowJob, type Ev, payments, totalsJob, totalsOrder, userOrder, windowJob } from './jobs.ts';

const N = 2000;
const OPTS = { sourceBatchSize: 32, maxEnvelopesPerBatch: 4 };

async function reference(make: typeof totalsJob): Promise<unknown[]> {
  const out = Sinks.collect<unknown>();
  await runJob(make(payments(N), out), OPTS);
  return out.records;
}

/** Killed `kills` times at seeded source reads and storage writes (test/support/kill-harness.ts), resumed until done. */
function runWithKills(make: (items: readonly Ev[]) => ReturnType<typeof totalsJob>, seed: number, kills: number, logInput: 'auto' | 'always') {
  return killHarness(() => make(payments(N)), { seed, kills, logInput, embedded: OPTS });
}

/** Where each job's committed output has a defined order (test/checkpoint/jobs.ts). */
const ORDER: Record<string, (r: unknown) => string | undefined> = { totals: totalsOrder, windows: userOrder, 'combined windows': userOrder };

describe('crash and restore (seeded)', () => {
  for (const [name, make] of [['totals', totalsJob], ['windows', windowJob], ['combined windows', (items: readonly Ev[], sink?: Sink<unknown>) => combinedWindowJob(items, sink)]] as const) {
    for (const seed of [1, 2, 3, 4]) {
      it(`${name}, seed ${seed}: killed three times, resumed, output equals the uninterrupted run's`, async () => {
        const ref = await reference(make);
        const r = await runWithKills(make, seed, 3, seed % 2 ? 'auto' : 'always');
        expect(r.killed).toBe(3);
        assertExactlyOnce(ref, r.output, { input: payments(N), orderKey: ORDER[name], label: `restored from epochs ${r.restoredFrom.join(', ')}` });
      });
    }
  }

  it('at least one seed resumes from a real checkpoint (not from scratch)', async () => {
    const restored: number[] = [];
    for (const seed of [5, 6, 7]) restored.push(...(await runWithKills(totalsJob, seed, 2, 'auto')).restoredFrom);
    expect(restored.filter((e) => e > 0).length).toBeGreaterThan(0);
  });
});
