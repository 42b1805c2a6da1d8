/**
 * Exactly-once output checker for fault-injection tests: compares the output of a faulty
 * run with a reference run's as multisets (every record exactly as many times as in the
 * reference: none lost, none duplicated, none unexpected) and, for outputs whose order is
 * defined, per key (the records of one key in the reference's relative order).
 */
import { orderViolations, type OrderViolation } from './order.ts';

export type { OrderViolation } from './order.ts';

export interface CompareOptions {
  /** What makes two records the same; default canonicalJson (deep equality, key order ignored). */
  identity?: (record: unknown) => string;
  /**
   * The key whose records must keep the reference's relative order, for outputs where
   * the contract defines one (records of one key over the same channels, e.g. a keyed
   * operator's emits per key); undefined for a record that carries no order. Omitted:
   * order is not checked (outputs merged from several partitions per key, upsert tables).
   */
  orderKey?: (record: unknown) => string | undefined;
  /** The run's input: its size goes into the message. */
  input?: readonly unknown[];
  /** Prefixed to the message ("seed 3: exactly-once violated: ..."). */
  label?: string;
  /** assertExactlyOnce refuses an empty reference (a check that cannot fail) unless set. */
  allowEmpty?: boolean;
}

export interface DuplicatedRecord {
  readonly record: unknown;
  readonly extra: number;
}

export interface Comparison {
  /** Occurrences missing from the output (one entry per missing copy), in reference order. */
  lost: unknown[];
  /** Records that occur more often in the output than in the reference. */
  duplicated: DuplicatedRecord[];
  /** Occurrences in the output of records the reference never produced, in output order. */
  unexpected: unknown[];
  /** Records of one key out of the reference's order (empty without `orderKey`), in output order. */
  reordered: OrderViolation[];
  counts: {
    input?: number;
    reference: number;
    actual: number;
    lost: number;
    duplicated: number;
    extraCopies: number;
    unexpected: number;
    reordered: number;
    /** Order keys in the reference; undefined when order was not checked. */
    orderKeys?: number;
  };
  /** All four counts are zero. */
  ok: boolean;
  summary(): string;
}

/**
 * JSON with object keys sorted recursively, so `{a,b}` and `{b,a}` encode the
 * same. Follows JSON.stringify otherwise (toJSON, undefined members dropped);
 * bigints are encoded as `{"$bigint":"<digits>"}` instead of throwing.
 */
export function canonicalJson(value: unknown): string {
  const encoded = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v === 'bigint') return { $bigint: v.toString() };
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return v;
    // Null prototype: a "__proto__" key stays an ordinary key.
    const sorted: Record<string, unknown> = Object.create(null);
    for (const k of Object.keys(v).sort()) sorted[k] = (v as Record<string, unknown>)[k];
    return sorted;
  });
  // JSON.stringify gives undefined for undefined/functions; keep the result a string.
  return encoded ?? String(value);
}

interface Tally {
  record: unknown;
  count: number;
}

function tally(records: readonly unknown[], identity: (r: unknown) => string): Map<string, Tally> {
  const counts = new Map<string, Tally>();
  for (const record of records) {
    const k = identity(record);
    const t = counts.get(k);
    if (t) t.count++;
    else counts.set(k, { record, count: 1 });
  }
  return counts;
}

export function compareOutputs(reference: readonly unknown[], actual: readonly unknown[], options: CompareOptions = {}): Comparison {
  const identity = options.identity ?? canonicalJson;
  const expected = tally(reference, identity);
  const got = tally(actual, identity);
  const lost: unknown[] = [];
  const duplicated: DuplicatedRecord[] = [];
  const unexpected: unknown[] = [];

  for (const [k, ref] of expected) {
    const have = got.get(k)?.count ?? 0;
    for (let i = have; i < ref.count; i++) lost.push(ref.record);
    if (have > ref.count) duplicated.push({ record: ref.record, extra: have - ref.count });
  }
  for (const record of actual) {
    if (!expected.has(identity(record))) unexpected.push(record);
  }
  const order = options.orderKey ? orderViolations(reference, actual, identity, options.orderKey) : undefined;
  const reordered = order?.violations ?? [];

  const counts: Comparison['counts'] = {
    ...(options.input ? { input: options.input.length } : {}),
    reference: reference.length,
    actual: actual.length,
    lost: lost.length,
    duplicated: duplicated.length,
    extraCopies: duplicated.reduce((n, d) => n + d.extra, 0),
    unexpected: unexpected.length,
    reordered: reordered.length,
    ...(order ? { orderKeys: order.keys } : {}),
  };
  const ok = lost.length === 0 && duplicated.length === 0 && unexpected.length === 0 && reordered.length === 0;
  return { lost, duplicated, unexpected, reordered, counts, ok, summary: () => `${options.label ? `${options.label}: ` : ''}${summarize(counts, lost, duplicated, unexpected, reordered)}` };
}

const SHOWN = 5;
const MAX_RECORD_CHARS = 200;

function show(record: unknown): string {
  const s = canonicalJson(record);
  return s.length > MAX_RECORD_CHARS ? `${s.slice(0, MAX_RECORD_CHARS)}...` : s;
}

function section<T>(title: string, items: readonly T[], render: (item: T) => string): string[] {
  if (items.length === 0) return [];
  const lines = [`  ${title}:`, ...items.slice(0, SHOWN).map((i) => `    ${render(i)}`)];
  if (items.length > SHOWN) lines.push(`    ... and ${items.length - SHOWN} more`);
  return lines;
}

function summarize(
  counts: Comparison['counts'],
  lost: readonly unknown[],
  duplicated: readonly DuplicatedRecord[],
  unexpected: readonly unknown[],
  reordered: readonly OrderViolation[],
): string {
  const sizes = [
    ...(counts.input !== undefined ? [`input ${counts.input} events`] : []),
    `reference ${counts.reference} records, actual ${counts.actual}`,
    ...(counts.orderKeys !== undefined ? [`order checked over ${counts.orderKeys} keys`] : []),
  ].join(', ');
  if (lost.length === 0 && duplicated.length === 0 && unexpected.length === 0 && reordered.length === 0) {
    return `exactly-once: ok (${sizes})`;
  }
  return [
    `exactly-once violated: ${counts.lost} lost, ${counts.duplicated} duplicated (${counts.extraCopies} extra copies), ` +
      `${counts.unexpected} unexpected, ${counts.reordered} out of order; ${sizes}`,
    ...section('lost', lost, show),
    ...section('duplicated', duplicated, (d) => `${show(d.record)} (+${d.extra})`),
    ...section('unexpected', unexpected, show),
    ...section('out of order', reordered, (v) => `key ${JSON.stringify(v.key)}: ${show(v.record)} at output index ${v.index} came ${v.side} ${show(v.neighbour)}; the reference has it ${v.side === 'after' ? 'before' : 'after'}`),
  ].join('\n');
}

/**
 * Throws an Error listing the counts and the first few lost, duplicated, unexpected and
 * out-of-order records; also when the reference is empty, unless `allowEmpty`.
 */
export function assertExactlyOnce(reference: readonly unknown[], actual: readonly unknown[], options: CompareOptions = {}): Comparison {
  const result = compareOutputs(reference, actual, options);
  if (reference.length === 0 && !options.allowEmpty) {
    throw new Error(`${options.label ? `${options.label}: ` : ''}exactly-once check is vacuous: the reference has no records (actual ${actual.length}); pass allowEmpty if an empty output is expected`);
  }
  if (!result.ok) throw new Error(result.summary());
  return result;
}
