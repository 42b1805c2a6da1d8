/** What the poison tests check of a run's dead letters (poison-jobs.ts). */
import { expect } from 'vitest';
import { canonicalJson } from '../../lib/testing/checker.ts';
import { type Pay, poisonOperator } from './poison-jobs.ts';

/** Each poison event has exactly one letter, from the operator that refuses it, with its record, error and attempts; no other letters. */
export function expectOneLetterPerPoison(events: readonly Pay[], letters: readonly { operator: string; record?: { value: unknown }; error: string; attempts: number }[], label: string, maxAttempts = 3): void {
  const poison = events.filter((e) => poisonOperator(e) !== undefined);
  expect(poison.length, `${label}: the input has poison records`).toBeGreaterThan(10);
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

