/**
 * Dead letters survive crashes, each once: a job whose user code throws on some records
 * (in a map on the source channel, in a keyed process behind a shuffle) and in a timer,
 * killed at seeded points (source reads, checkpoint-storage writes) with partition
 * crashes and duplicate deliveries on top, resumed each time. After the last resume the
 * dead letters equal an uninterrupted run's, each once, with record (or timer) and error,
 * and the checkpoint directory's dead-letters.jsonl holds exactly them.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock, WatermarkStrategies } from '../../lib/api/types.ts';
import { DEAD_LETTERS_FILE, openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import type { StoredDeadLetter } from '../../lib/checkpoint/dead-letter-store.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { FaultInjector } from '../../lib/local/faults.ts';
import { canonicalJson, compareOutputs } from '../../lib/testing/checker.ts';
import { type Ev, lines, payments, rng, tmp } from './jobs.ts';

class Killed extends Error {}

const N = 2000;
const OPTS = { sourceBatchSize: 32, maxEnvelopesPerBatch: 4 };

/** Poison: amount 13 in the map (source channel), amount 42 in the keyed process (after a shuffle), u5's timer of second 3. */
function poisonJob(items: readonly Ev[], sink: Sink<unknown> = Sinks.collect()): Job {
  const job = new Job('dl-crash', { parallelism: 2 });
  job
    .fromItems('payments', items, { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(20), parallelism: 1 })
    .map((e) => {
      if (e.amount === 13) throw new Error(`map refuses amount 13 of ${e.user}`);
      return e;
    })
    .name('check')
    .keyBy((e) => e.user)
    .process({
      state: { total: valueState<number>() },
      processElement(e: Ev, ctx) {
        if (e.amount === 42) throw new Error(`process refuses amount 42 at ${e.t}`);
        const total = (ctx.state.total.get() ?? 0) + e.amount;
        ctx.state.total.set(total);
        ctx.emit({ user: e.user, total });
        ctx.timers.registerEventTimeTimer(Math.floor(e.t / 1000) * 1000 + 999);
      },
      onTimer(t, ctx) {
        if (ctx.key === 'u5' && t === 3999) throw new Error('timer refuses u5 at 3999');
        ctx.emit({ user: ctx.key as string, total: ctx.state.total.get(), at: t });
      },
    })
    .name('totals')
    .sinkTo(sink, 'out');
  return job;
}

/** What a dead letter is about, independent of batching (channel sequence numbers may differ after a restore). */
function about(d: StoredDeadLetter | { operator: string; record?: { value: unknown }; timer?: unknown; error: string }): string {
  return canonicalJson({ operator: d.operator, value: d.record?.value, timer: d.timer, error: d.error });
}

async function reference() {
  const out = Sinks.collect<unknown>();
  const { runtime } = await runJob(poisonJob(payments(N), out), OPTS);
  return { output: out.records, letters: runtime.deadLetters };
}

async function runWithKills(seed: number, kills: number) {
  const random = rng(seed);
  const dir = tmp('sluice-dl-crash-');
  const file = join(dir, 'out.jsonl');
  const restoredFrom: number[] = [];
  /** Letters each resume found in the directory's file (parked before the checkpoint it restored). */
  const reloaded: number[] = [];
  let killed = 0;
  for (let attempt = 0; ; attempt++) {
    const clock = new ManualClock(1_000_000 + attempt * 10_000_000);
    const sink = new CommittedFileSink(file, join(dir, 'sinks', 'out'), false);
    let events = 0;
    const killAt = attempt < kills ? 1 + Math.floor(random() * 80) : Number.POSITIVE_INFINITY;
    const tick = (what: string) => {
      if (++events >= killAt) throw new Killed(`killed at ${what}`);
    };
    try {
      const { runtime, checkpoints } = await openCheckpointedRuntime(
        poisonJob(payments(N)),
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
        { dir, intervalMs: 3, sinks: [sink], durable: false, start: attempt === 0 ? 'fresh' : 'resume', beforeWrite: (op) => tick(op) },
      );
      restoredFrom.push(checkpoints.restoredEpoch);
      if (attempt > 0) reloaded.push(checkpoints.deadLetters.count);
      const stats = await runtime.run();
      checkpoints.close();
      const stored = lines(join(dir, DEAD_LETTERS_FILE)).map((l) => JSON.parse(l) as StoredDeadLetter);
      return { output: lines(file).map((l) => JSON.parse(l)), letters: runtime.deadLetters, stored, stats, dir, killed, restoredFrom, reloaded };
    } catch (e) {
      if (!(e instanceof Killed)) throw e;
      killed++;
    }
  }
}

describe('dead letters across crashes (seeded)', () => {
  it('the reference run parks records of both stages and the timer, each with its record and error', async () => {
    const ref = await reference();
    const ops = ref.letters.map((d) => d.operator);
    expect(ops.filter((o) => o === 'check').length).toBeGreaterThan(10);
    expect(ops.filter((o) => o === 'totals').length).toBeGreaterThan(10);
    expect(ref.letters.filter((d) => d.timer).length).toBe(1);
    for (const d of ref.letters) {
      expect(d.error).toMatch(/refuses/);
      expect(d.stack).toMatch(/refuses/);
      expect(d.attempts).toBe(3);
      if (!d.timer) expect(d.record).toBeDefined();
    }
    // No checkpoint directory: in memory (the stats name no file).
    expect(ref.letters.length).toBeGreaterThan(0);
  });

  for (const seed of [1, 2, 3, 4, 5, 6]) {
    it(`seed ${seed}: killed three times and resumed, the dead letters equal the uninterrupted run's, each once, all in the directory's file`, async () => {
      const ref = await reference();
      const r = await runWithKills(seed, 3);
      expect(r.killed).toBe(3);
      const cmp = compareOutputs(ref.output, r.output);
      expect(cmp.ok, `output: ${cmp.summary()} (restored from epochs ${r.restoredFrom.join(', ')})`).toBe(true);
      const want = ref.letters.map(about).sort();
      expect(r.letters.map(about).sort(), `restored from epochs ${r.restoredFrom.join(', ')}`).toEqual(want);
      expect(new Set(r.letters.map((d) => d.id)).size).toBe(r.letters.length);
      // The file holds exactly the letters (each once), with where they were parked.
      expect(r.stored.map(about).sort()).toEqual(want);
      expect(r.stored.map((d) => d.id).sort()).toEqual(r.letters.map((d) => d.id).sort());
      for (const d of r.stored) {
        expect(d.error).toMatch(/refuses/);
        expect(d.stack).toMatch(/refuses/);
        expect(d.attempts).toBe(3);
        expect(d.epoch).toBeGreaterThan(0);
        expect(d.stage).toBe(d.operator === 'check' ? 0 : 1);
        if (d.operator === 'totals') expect(d.key).toMatch(/^u\d+$/);
        if (!d.timer) expect((d.record as { value: Ev }).value.amount).toBe(d.operator === 'check' ? 13 : 42);
      }
      expect(r.stats.deadLetters).toBe(ref.letters.length);
      expect(r.stats.deadLetterFile).toBe(join(r.dir, DEAD_LETTERS_FILE));
      expect(existsSync(r.stats.deadLetterFile!)).toBe(true);
    });
  }

  it('some resumes restore a checkpoint with dead letters before it (reloaded from the file, not parked again)', async () => {
    const reloaded: number[] = [];
    for (const seed of [1, 2, 3]) reloaded.push(...(await runWithKills(seed, 3)).reloaded);
    expect(Math.max(...reloaded)).toBeGreaterThan(0);
  });
});
