import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InputRejectedError } from '../../lib/errors.ts';
import { assertExactlyOnce, canonicalJson, type Comparison, compareOutputs } from '../../lib/testing/checker.ts';
import { readJsonLines } from '../../lib/testing/jsonl.ts';

describe('canonicalJson', () => {
  it('sorts object keys recursively, keeps array order', () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: null } })).toBe('{"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}');
    expect(canonicalJson([2, 1])).not.toBe(canonicalJson([1, 2]));
  });
  it('treats __proto__ as an ordinary key and encodes bigints', () => {
    expect(canonicalJson(JSON.parse('{"__proto__":1,"a":2}'))).toBe('{"__proto__":1,"a":2}');
    expect(canonicalJson({ n: 10n })).toBe('{"n":{"$bigint":"10"}}');
  });
});

describe('compareOutputs', () => {
  it('is ok for the same multiset in another order and with other key order', () => {
    const result = compareOutputs([{ k: 'a', n: 1 }, { k: 'b', n: 2 }], [{ n: 2, k: 'b' }, { n: 1, k: 'a' }]);
    expect(result.ok).toBe(true);
    expect(result.summary()).toBe('exactly-once: ok (reference 2 records, actual 2)');
  });

  it('detects lost, duplicated and unexpected records', () => {
    const ref = [{ k: 'a' }, { k: 'b' }, { k: 'b' }, { k: 'c' }];
    const act = [{ k: 'a' }, { k: 'a' }, { k: 'a' }, { k: 'b' }, { k: 'x' }, { k: 'x' }];
    const result = compareOutputs(ref, act);
    expect(result.ok).toBe(false);
    expect(result.lost).toEqual([{ k: 'b' }, { k: 'c' }]);
    expect(result.duplicated).toEqual([{ record: { k: 'a' }, extra: 2 }]);
    expect(result.unexpected).toEqual([{ k: 'x' }, { k: 'x' }]);
    expect(result.summary()).toMatch(/^exactly-once violated: 2 lost, 1 duplicated \(2 extra copies\), 2 unexpected, 0 out of order; reference 4 records, actual 6/);
    expect(result.counts).toEqual({ reference: 4, actual: 6, lost: 2, duplicated: 1, extraCopies: 2, unexpected: 2, reordered: 0 });
    expect(result.summary()).toContain('{"k":"a"} (+2)');
  });

  it('uses a custom identity when given', () => {
    const result = compareOutputs([{ id: 1, at: 100 }], [{ id: 1, at: 999 }], { identity: (r) => String((r as { id: number }).id) });
    expect(result.ok).toBe(true);
  });

  it('assertExactlyOnce lists the first few records and the counts', () => {
    const ref = Array.from({ length: 10 }, (_, i) => ({ i }));
    expect(() => assertExactlyOnce(ref, ref)).not.toThrow();
    let message = '';
    try {
      assertExactlyOnce(ref, [...ref.slice(7), { i: 9 }, { i: 42 }]);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/7 lost, 1 duplicated \(1 extra copies\), 1 unexpected, 0 out of order; reference 10 records, actual 5/);
    expect(message).toContain('  lost:\n    {"i":0}\n');
    expect(message).toContain('... and 2 more');
    expect(message).toContain('  duplicated:\n    {"i":9} (+1)');
    expect(message).toContain('  unexpected:\n    {"i":42}');
  });

  const records = fc.array(fc.jsonValue(), { maxLength: 30 });

  it('property: a shuffled copy of the reference is exactly once', () => {
    fc.assert(
      fc.property(records, fc.infiniteStream(fc.nat()), (ref, randoms) => {
        const shuffled = [...ref];
        for (let i = shuffled.length - 1; i > 0; i--) {
          const j = randoms.next().value % (i + 1);
          [shuffled[i], shuffled[j]] = [shuffled[j], shuffled[i]];
        }
        expect(compareOutputs(ref, shuffled).ok).toBe(true);
      }),
    );
  });

  it('property: removing one element reports exactly it as lost', () => {
    fc.assert(
      fc.property(
        records.filter((r) => r.length > 0),
        fc.nat(),
        (ref, n) => {
          const index = n % ref.length;
          const actual = ref.filter((_, i) => i !== index);
          const result = compareOutputs(ref, actual);
          expect(result.ok).toBe(false);
          expect(result.lost.map(canonicalJson)).toEqual([canonicalJson(ref[index])]);
          expect(result.duplicated).toEqual([]);
          expect(result.unexpected).toEqual([]);
        },
      ),
    );
  });
});

describe('per-key order', () => {
  type R = { k: string; n: number };
  const byKey = { orderKey: (r: unknown) => (r as R).k };
  // Two keys interleaved; each key's records numbered in reference order.
  const ref: R[] = [
    { k: 'a', n: 1 },
    { k: 'b', n: 1 },
    { k: 'a', n: 2 },
    { k: 'b', n: 2 },
    { k: 'a', n: 3 },
  ];

  it('passes an equal run and one with the keys interleaved differently (the check is not vacuous)', () => {
    const equal = assertExactlyOnce(ref, ref.map((r) => ({ ...r })), byKey);
    expect(equal.ok).toBe(true);
    expect(equal.counts).toMatchObject({ lost: 0, duplicated: 0, unexpected: 0, reordered: 0, orderKeys: 2 });
    expect(equal.summary()).toBe('exactly-once: ok (reference 5 records, actual 5, order checked over 2 keys)');
    const regrouped = [ref[1], ref[3], ref[0], ref[2], ref[4]];
    expect(compareOutputs(ref, regrouped, byKey).ok).toBe(true);
  });

  it('catches a lost, a duplicated, an unexpected and a reordered record, each on its own', () => {
    const cases: [string, unknown[], keyof Comparison['counts']][] = [
      ['lost', [ref[0], ref[1], ref[3], ref[4]], 'lost'],
      ['duplicated', [...ref, ref[3]], 'duplicated'],
      ['unexpected', [...ref, { k: 'c', n: 1 }], 'unexpected'],
      ['reordered', [ref[2], ref[1], ref[0], ref[3], ref[4]], 'reordered'],
    ];
    for (const [name, actual, count] of cases) {
      const result = compareOutputs(ref, actual, byKey);
      expect(result.ok, name).toBe(false);
      const counts = { lost: 0, duplicated: 0, unexpected: 0, reordered: 0, [count]: 1 };
      expect(result.counts, name).toMatchObject(counts);
      expect(() => assertExactlyOnce(ref, actual, byKey), name).toThrow(/^exactly-once violated: /);
    }
  });

  it('names the key, the misplaced record and the one it is on the wrong side of', () => {
    // a2 moved to the front: one record out of order (a longest in-order run keeps a1, a3).
    const result = compareOutputs(ref, [ref[2], ref[0], ref[1], ref[3], ref[4]], byKey);
    expect(result.reordered).toEqual([{ key: 'a', record: { k: 'a', n: 2 }, neighbour: { k: 'a', n: 1 }, side: 'before', index: 0 }]);
    expect(result.summary()).toContain('exactly-once violated: 0 lost, 0 duplicated (0 extra copies), 0 unexpected, 1 out of order');
    expect(result.summary()).toContain(
      '  out of order:\n    key "a": {"k":"a","n":2} at output index 0 came before {"k":"a","n":1}; the reference has it after',
    );
    // a1 moved to the end: it came after a3.
    const late = compareOutputs(ref, [ref[1], ref[2], ref[3], ref[4], ref[0]], byKey);
    expect(late.reordered).toEqual([{ key: 'a', record: { k: 'a', n: 1 }, neighbour: { k: 'a', n: 3 }, side: 'after', index: 4 }]);
  });

  it('records whose order key is undefined carry no order; without orderKey order is not checked', () => {
    const swapped = [ref[2], ref[1], ref[0], ref[3], ref[4]];
    expect(compareOutputs(ref, swapped).ok).toBe(true);
    expect(compareOutputs(ref, swapped, { orderKey: (r) => ((r as R).k === 'a' ? undefined : 'b') }).ok).toBe(true);
  });

  it('a duplicate copy or a loss is not also counted as out of order', () => {
    const result = compareOutputs(ref, [ref[0], ref[1], ref[0], ref[3], ref[4]], byKey);
    expect(result.counts).toMatchObject({ lost: 1, duplicated: 1, reordered: 0 });
  });

  it('names the input size; refuses an empty reference unless allowed', () => {
    expect(compareOutputs(ref, ref, { input: [1, 2, 3] }).summary()).toBe('exactly-once: ok (input 3 events, reference 5 records, actual 5)');
    expect(() => assertExactlyOnce([], [])).toThrow(/vacuous: the reference has no records/);
    expect(() => assertExactlyOnce(ref, [], { label: 'seed 7' })).toThrow(/^seed 7: exactly-once violated: 5 lost/);
    expect(assertExactlyOnce([], [], { allowEmpty: true }).ok).toBe(true);
    expect(() => assertExactlyOnce([], [{ k: 'x' }], { allowEmpty: true })).toThrow(/1 unexpected/);
  });

  // Seeded properties: a fixed seed, printed by fast-check on failure.
  const seed = 20261202;
  /** A reference of records (key, n-th record of that key) over a few keys. */
  const keyedRuns = fc
    .array(fc.constantFrom('a', 'b', 'c', 'd'), { minLength: 1, maxLength: 40 })
    .map((keys) => {
      const next: Record<string, number> = {};
      return keys.map((k) => ({ k, n: (next[k] = (next[k] ?? 0) + 1) }));
    });

  it('property: interleaving the keys differently (each key in order) keeps a pass', () => {
    fc.assert(
      fc.property(keyedRuns, fc.infiniteStream(fc.nat()), (reference, randoms) => {
        // Merge the per-key runs in a random interleaving.
        const runs = new Map<string, R[]>();
        for (const r of reference) runs.set(r.k, [...(runs.get(r.k) ?? []), r]);
        const queues = [...runs.values()];
        const merged: R[] = [];
        while (queues.length > 0) {
          const i = randoms.next().value % queues.length;
          merged.push(queues[i]!.shift()!);
          if (queues[i]!.length === 0) queues.splice(i, 1);
        }
        const result = compareOutputs(reference, merged, byKey);
        expect(result.ok, result.summary()).toBe(true);
      }),
      { seed, numRuns: 200 },
    );
  });

  it('property: dropping any one record is caught as exactly that record lost', () => {
    fc.assert(
      fc.property(keyedRuns, fc.nat(), (reference, n) => {
        const index = n % reference.length;
        const result = compareOutputs(reference, reference.filter((_, i) => i !== index), byKey);
        expect(result.ok).toBe(false);
        expect(result.lost).toEqual([reference[index]]);
        expect(result.counts).toMatchObject({ duplicated: 0, unexpected: 0, reordered: 0 });
      }),
      { seed, numRuns: 200 },
    );
  });

  it('property: swapping two records of one key is caught as out of order', () => {
    fc.assert(
      fc.property(keyedRuns, fc.nat(), fc.nat(), (reference, x, y) => {
        const i = x % reference.length;
        const sameKey = reference.map((r, j) => (r.k === reference[i]!.k && j !== i ? j : -1)).filter((j) => j >= 0);
        fc.pre(sameKey.length > 0);
        const j = sameKey[y % sameKey.length]!;
        const swapped = [...reference];
        [swapped[i], swapped[j]] = [swapped[j]!, swapped[i]!];
        const result = compareOutputs(reference, swapped, byKey);
        expect(result.counts).toMatchObject({ lost: 0, duplicated: 0, unexpected: 0 });
        expect(result.counts.reordered).toBeGreaterThanOrEqual(1);
        expect(result.reordered.every((v) => v.key === reference[i]!.k)).toBe(true);
      }),
      { seed, numRuns: 200 },
    );
  });

  it('property: the out-of-order count is the fewest moves (one record moved elsewhere is one)', () => {
    fc.assert(
      fc.property(keyedRuns, fc.nat(), fc.nat(), (reference, x, y) => {
        const from = x % reference.length;
        const moved = reference.filter((_, i) => i !== from);
        const to = y % (moved.length + 1);
        moved.splice(to, 0, reference[from]!);
        expect(compareOutputs(reference, moved, byKey).counts.reordered).toBeLessThanOrEqual(1);
      }),
      { seed, numRuns: 200 },
    );
  });
});

describe('readJsonLines', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-jsonl-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('reads one value per non-blank line', async () => {
    const file = join(dir, 'ok.jsonl');
    await writeFile(file, '\uFEFF{"a":1}\r\n\n[2]\n"three"\n');
    expect(await readJsonLines(file)).toEqual([{ a: 1 }, [2], 'three']);
  });

  it('names file:line for a malformed line', async () => {
    const file = join(dir, 'bad.jsonl');
    await writeFile(file, '{"a":1}\n{"a":2}\n{"a":\n');
    const reading = readJsonLines(file);
    await expect(reading).rejects.toThrow(InputRejectedError);
    await expect(reading).rejects.toThrow(`${file}:3: expected one JSON value per line, received {"a": (`);
  });

  it('names the file when it cannot be read', async () => {
    await expect(readJsonLines(join(dir, 'missing.jsonl'))).rejects.toThrow(/missing\.jsonl: cannot read: ENOENT/);
  });
});
