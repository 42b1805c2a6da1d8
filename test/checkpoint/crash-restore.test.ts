/**
 * Crash and restore on the embedded runtime, seeded: the process "dies" at a random
 * point (a source read, a snapshot or manifest write, a pointer write, a sink commit),
 * leaving the checkpoint directory as a killed process would (every write is
 * synchronous); a new runtime resumes from the last completed checkpoint and finishes.
 * Partition-level crashes and duplicate deliveries are injected on top. The committed
 * output must equal an uninterrupted run's: no record lost, none twice.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { FaultInjector } from '../../lib/local/faults.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { combinedWindowJob, type Ev, lines, payments, rng, tmp, totalsJob, totalsOrder, userOrder, windowJob } from './jobs.ts';

class Killed extends Error {}

const N = 2000;
const OPTS = { sourceBatchSize: 32, maxEnvelopesPerBatch: 4 };

async function reference(make: typeof totalsJob): Promise<unknown[]> {
  const out = Sinks.collect<unknown>();
  await runJob(make(payments(N), out), OPTS);
  return out.records;
}

/**
 * Runs until done, killing the first `kills` attempts at a seeded random event (source
 * pull or checkpoint-storage write). Returns the committed output and what happened.
 */
async function runWithKills(make: (items: readonly Ev[]) => ReturnType<typeof totalsJob>, seed: number, kills: number, logInput: 'auto' | 'always') {
  const random = rng(seed);
  const dir = tmp('sluice-crash-');
  const file = join(dir, 'out.jsonl');
  const restoredFrom: number[] = [];
  let killed = 0;
  for (let attempt = 0; ; attempt++) {
    const clock = new ManualClock(1_000_000 + attempt * 10_000_000);
    const sink = new CommittedFileSink(file, join(dir, 'sinks', 'out'), false);
    let events = 0;
    // Within an attempt's first 80 events (source pulls and storage writes): a resumed attempt may have few more.
    const killAt = attempt < kills ? 1 + Math.floor(random() * 80) : Number.POSITIVE_INFINITY;
    const tick = (what: string) => {
      if (++events >= killAt) throw new Killed(`killed at ${what}`);
    };
    try {
      const { runtime, checkpoints } = await openCheckpointedRuntime(
      make(payments(N)),
      {
        clock,
        sinks: { out: sink },
        ...OPTS,
        faults: new FaultInjector({ seed: seed * 31 + attempt, crashProbability: 0.03, duplicateProbability: 0.05 }),
        onSourceRecords: () => {
          clock.advance(1);
          tick('source');
        },
      },
      { dir, intervalMs: 3, sinks: [sink], durable: false, logInput, start: attempt === 0 ? 'fresh' : 'resume', beforeWrite: (op) => tick(op) },
    );
      restoredFrom.push(checkpoints.restoredEpoch);
      await runtime.run();
      checkpoints.close();
      return { output: lines(file).map((l) => JSON.parse(l)), killed, restoredFrom, completed: checkpoints.driver.completed.length };
    } catch (e) {
      if (!(e instanceof Killed)) throw e;
      killed++;
    }
  }
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
