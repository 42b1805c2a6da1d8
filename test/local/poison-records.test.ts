/**
 * Contract 6 on the embedded runtime: a record whose user code throws is retried, then
 * parked with its error, never dropped silently. A seeded input with poison records in
 * two stages (test/aws/poison-jobs.ts): every poison record has exactly one dead letter
 * with its record and error, and every other record's output comes out exactly once
 * (against a run of the input without the poison records). The seeds are ones where two
 * partitions of the keyed stage park records at the same channel position (channel, seq
 * and index count per consumer partition), which once made the store keep only one.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { DeadLetterStore, type StoredDeadLetter } from '../../lib/checkpoint/dead-letter-store.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { type Pay, poisonEvents, poisonJob, poisonOperator } from '../aws/poison-jobs.ts';
import { expectOneLetterPerPoison } from '../aws/poison-letters.ts';

const N = 4000;

async function runEmbedded(events: readonly Pay[]): Promise<{ output: unknown[]; letters: readonly StoredDeadLetter[] }> {
  const out = Sinks.collect<unknown>();
  const runtime = new EmbeddedRuntime(poisonJob(), { sources: { events: { kind: 'items', items: events } }, sinks: { out: out as Sink<any> } });
  await runtime.run();
  return { output: out.records, letters: runtime.deadLetters };
}

/** Letters of the keyed stage whose channel position another partition's letter shares. */
function sharedPositions(letters: readonly StoredDeadLetter[]): number {
  const seen = new Map<string, Set<number>>();
  for (const d of letters) {
    if (d.stage !== 1) continue;
    const at = `${d.channel}#${d.seq}#${d.index}`;
    seen.set(at, (seen.get(at) ?? new Set()).add(d.partition));
  }
  return [...seen.values()].filter((p) => p.size > 1).length;
}

describe('poison records on the embedded runtime (seeded)', () => {
  for (const seed of [5, 19]) {
    it(`seed ${seed}: each poison record one dead letter, every other record's output exactly once`, async () => {
      const events = poisonEvents(seed, N);
      const ref = await runEmbedded(events.filter((e) => poisonOperator(e) === undefined));
      const run = await runEmbedded(events);
      assertExactlyOnce(ref.output, run.output, { input: events, label: `seed ${seed}` });
      expectOneLetterPerPoison(events, run.letters, `seed ${seed}`);
      expect(sharedPositions(run.letters), `seed ${seed}: two partitions parked at one channel position`).toBeGreaterThan(0);
    });
  }

  it('with checkpoints: the same, and the directory\'s file holds each letter once', async () => {
    const events = poisonEvents(2, N);
    const ref = await runEmbedded(events.filter((e) => poisonOperator(e) === undefined));
    const out = Sinks.collect<unknown>();
    const dir = mkdtempSync(join(tmpdir(), 'sluice-poison-'));
    const { runtime, checkpoints } = await openCheckpointedRuntime(poisonJob(), { sources: { events: { kind: 'items', items: events } }, sinks: { out: out as Sink<any> } }, { dir, intervalMs: 5, durable: false, start: 'fresh' });
    await runtime.run();
    checkpoints.close();
    assertExactlyOnce(ref.output, out.records, { input: events, label: 'checkpointed' });
    expectOneLetterPerPoison(events, runtime.deadLetters, 'checkpointed');
    const reread = DeadLetterStore.open(join(dir, 'dead-letters.jsonl'), { keepThroughEpoch: Number.MAX_SAFE_INTEGER });
    expectOneLetterPerPoison(events, reread.list(), 'the file');
  });

  it('the store keeps two partitions\' letters at the same channel position, and a redelivered one once', () => {
    const store = DeadLetterStore.memory();
    const letter = (value: number) => ({ operator: 'per-user', channel: '1:0', seq: 1, index: 7, record: { value, timestamp: 0 }, error: 'refused', attempts: 3 });
    expect(store.add(letter(1), { stage: 1, partition: 0, runtime: { lastBarrier: 0 } }, 1)).toBe(true);
    expect(store.add(letter(2), { stage: 1, partition: 1, runtime: { lastBarrier: 0 } }, 1)).toBe(true);
    expect(store.add(letter(1), { stage: 1, partition: 0, runtime: { lastBarrier: 0 } }, 1)).toBe(false);
    expect(store.list().map((d) => d.record?.value)).toEqual([1, 2]);
  });
});
