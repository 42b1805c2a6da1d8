/**
 * Exactly-once output checker for fault-injection tests: compares the output
 * of a faulty run with a reference run as multisets, so order may differ but
 * every record must appear exactly as many times as in the reference.
 */

export interface CompareOptions {
  /** Identity of a record; default canonicalJson (deep equality, key order ignored). */
  key?: (record: unknown) => string;
}

export interface Comparison {
  /** Occurrences missing from the output (one entry per missing copy), in reference order. */
  lost: unknown[];
  /** Records that occur more often in the output than in the reference. */
  duplicated: { record: unknown; extra: number }[];
  /** Occurrences in the output of records the reference never produced, in output order. */
  unexpected: unknown[];
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

function tally(records: readonly unknown[], key: (r: unknown) => string): Map<string, Tally> {
  const counts = new Map<string, Tally>();
  for (const record of records) {
    const k = key(record);
    const t = counts.get(k);
    if (t) t.count++;
    else counts.set(k, { record, count: 1 });
  }
  return counts;
}

export function compareOutputs(
  reference: readonly unknown[],
  actual: readonly unknown[],
  options: CompareOptions = {},
): Comparison {
  const key = options.key ?? canonicalJson;
  const expected = tally(reference, key);
  const got = tally(actual, key);
  const lost: unknown[] = [];
  const duplicated: { record: unknown; extra: number }[] = [];
  const unexpected: unknown[] = [];

  for (const [k, ref] of expected) {
    const have = got.get(k)?.count ?? 0;
    for (let i = have; i < ref.count; i++) lost.push(ref.record);
    if (have > ref.count) duplicated.push({ record: ref.record, extra: have - ref.count });
  }
  for (const record of actual) {
    if (!expected.has(key(record))) unexpected.push(record);
  }

  const ok = lost.length === 0 && duplicated.length === 0 && unexpected.length === 0;
  return {
    lost,
    duplicated,
    unexpected,
    ok,
    summary: () => summarize(reference.length, actual.length, lost, duplicated, unexpected),
  };
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
  referenceCount: number,
  actualCount: number,
  lost: readonly unknown[],
  duplicated: readonly { record: unknown; extra: number }[],
  unexpected: readonly unknown[],
): string {
  const counts = `reference ${referenceCount} records, actual ${actualCount}`;
  if (lost.length === 0 && duplicated.length === 0 && unexpected.length === 0) {
    return `exactly-once: ok (${counts})`;
  }
  const extra = duplicated.reduce((n, d) => n + d.extra, 0);
  return [
    `exactly-once violated: ${lost.length} lost, ${duplicated.length} duplicated (${extra} extra copies), ` +
      `${unexpected.length} unexpected; ${counts}`,
    ...section('lost', lost, show),
    ...section('duplicated', duplicated, (d) => `${show(d.record)} (+${d.extra})`),
    ...section('unexpected', unexpected, show),
  ].join('\n');
}

/** Throws an Error listing the first few lost/duplicated/unexpected records and the counts. */
export function assertExactlyOnce(reference: readonly unknown[], actual: readonly unknown[], options?: CompareOptions): void {
  const result = compareOutputs(reference, actual, options);
  if (!result.ok) throw new Error(result.summary());
}
