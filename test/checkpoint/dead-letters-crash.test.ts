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
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { DEAD_LETTERS_FILE } from '../../lib/local/checkpointing.ts';
import type { StoredDeadLetter } from '../../lib/checkpoint/dead-letter-store.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { canonicalJson, compareOutputs } from '../../lib/testing/checker.ts';
import { runWithKills as killHarness } from '../support/kill-harness.ts';
import { type Ev, lines, payments } from './jobs.ts';

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

/** Killed `kills` times at seeded source reads and storage writes (test/support/kill-harness.ts), resumed until done. */
async function runWithKills(seed: number, kills: number) {
  const r = await killHarness(() => poisonJob(payments(N)), { seed, kills, embedded: OPTS });
  const stored = lines(join(r.dir, DEAD_LETTERS_FILE)).map((l) => JSON.parse(l) as StoredDeadLetter);
  return { ...r, letters: r.runtime.deadLetters, stored };
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
