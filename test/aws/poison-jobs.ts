/**
 * A job whose user code throws on a seeded subset of its input, and that input: the
 * dead-letter tests of both runtimes (test/local/poison-records.test.ts,
 * test/aws/poison-records.test.ts) and the local-AWS kill test
 * (test/aws/poison-kill.test.ts, whose job module re-exports poisonJob), and what each
 * checks of the dead letters.
 *
 * Poison: amount 42 makes the map on the source stage throw ("check", a source channel,
 * so on AWS the letter carries the SQS offset); amount 13 makes the keyed process behind
 * the shuffle throw ("per-user"). Both throw before touching state or timers, so the
 * output of a run equals that of the same input without its poison records.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Sinks } from '../../lib/api/sinks.ts';
import { mapState, valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { Rng } from '../../lib/nexmark/random.ts';
import { canonicalJson } from '../../lib/testing/checker.ts';
import { expect } from 'vitest';

export interface Pay {
  readonly id: number;
  readonly user: string;
  readonly amount: number;
  readonly t: number;
}

export const MAP_POISON = 42;
export const PROCESS_POISON = 13;

/** The operator a poison event makes throw, or undefined for a good one. */
export function poisonOperator(e: Pay): 'check' | 'per-user' | undefined {
  return e.amount === MAP_POISON ? 'check' : e.amount === PROCESS_POISON ? 'per-user' : undefined;
}

/** `n` events of 40 users with seeded amounts 0..96 (about 1 in 97 poison of each kind), 3 ms apart in event time. */
export function poisonEvents(seed: number, n: number): Pay[] {
  const rng = new Rng(seed);
  return Array.from({ length: n }, (_, id) => ({ id, user: `u${rng.int(40)}`, amount: rng.int(97), t: 1_700_000_000_000 + id * 3 }));
}

export function writeEvents(dir: string, name: string, events: readonly Pay[]): string {
  const path = join(dir, name);
  writeFileSync(path, events.map((e) => JSON.stringify(e)).join('\n') + '\n');
  return path;
}

/**
 * Per good event one row; per user and second of event time a sum (event-time timers);
 * per user a final total. None depends on the order in which a user's events meet (two
 * source partitions interleave differently on each runtime).
 */
export function poisonJob(p: { parallelism?: number } = {}): Job {
  const job = new Job('poison', { parallelism: p.parallelism ?? 2, maxParallelism: 8 });
  job
    .ingest<Pay>('events', { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(100) })
    .map((e) => {
      if (e.amount === MAP_POISON) throw new Error(`check refuses amount ${MAP_POISON} of event ${e.id}`);
      return e;
    })
    .name('check')
    .keyBy((e) => e.user)
    .process({
      state: { total: valueState<number>(), perSecond: mapState<number, number>() },
      processElement(e: Pay, ctx) {
        if (e.amount === PROCESS_POISON) throw new Error(`per-user refuses amount ${PROCESS_POISON} of event ${e.id}`);
        const second = Math.floor(e.t / 1000);
        ctx.state.perSecond.set(second, (ctx.state.perSecond.get(second) ?? 0) + e.amount);
        ctx.state.total.set((ctx.state.total.get() ?? 0) + e.amount);
        ctx.timers.registerEventTimeTimer(second * 1000 + 999);
        ctx.timers.registerEventTimeTimer(Number.MAX_SAFE_INTEGER);
        ctx.emit({ row: e.id, user: e.user, amount: e.amount });
      },
      onTimer(t, ctx) {
        if (t === Number.MAX_SAFE_INTEGER) return ctx.emit({ user: ctx.key, total: ctx.state.total.get() });
        const second = Math.floor(t / 1000);
        ctx.emit({ user: ctx.key, second, sum: ctx.state.perSecond.get(second) });
        ctx.state.perSecond.delete(second);
      },
    })
    .name('per-user')
    .sinkTo(Sinks.stdout(), 'out');
  return job;
}

/** Each poison event has exactly one letter, from the operator that refuses it, with its record, error and attempts; no other letters. */
export function expectOneLetterPerPoison(events: readonly Pay[], letters: readonly { operator: string; record?: { value: unknown }; error: string; attempts: number }[], label: string, maxAttempts = 3): void {
  const poison = events.filter((e) => poisonOperator(e) !== undefined);
  expect(poison.length, `${label}: the input has poison records`).toBeGreaterThan(20);
  const byValue = new Map<string, number>();
  for (const d of letters) {
    expect(d.record, `${label}: a record letter`).toBeDefined();
    const v = d.record!.value as Pay;
    expect(d.operator, `${label}: letter of event ${v.id}`).toBe(poisonOperator(v));
    expect(d.error).toContain(`refuses amount ${v.amount} of event ${v.id}`);
    expect(d.attempts, `${label}: attempts of event ${v.id}`).toBe(maxAttempts);
    const k = canonicalJson(v);
    byValue.set(k, (byValue.get(k) ?? 0) + 1);
  }
  const missing = poison.filter((e) => !byValue.has(canonicalJson(e)));
  expect(missing, `${label}: poison records without a dead letter`).toEqual([]);
  const twice = [...byValue].filter(([, n]) => n > 1).map(([k]) => k);
  expect(twice, `${label}: poison records with more than one dead letter`).toEqual([]);
  expect(letters.length, `${label}: letters of records that are not poison`).toBe(poison.length);
}

