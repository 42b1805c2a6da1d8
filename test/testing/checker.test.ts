import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InputRejectedError } from '../../lib/errors.ts';
import { assertExactlyOnce, canonicalJson, compareOutputs } from '../../lib/testing/checker.ts';
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
    expect(result.summary()).toMatch(/^exactly-once violated: 2 lost, 1 duplicated \(2 extra copies\), 2 unexpected; reference 4 records, actual 6/);
    expect(result.summary()).toContain('{"k":"a"} (+2)');
  });

  it('uses a custom key when given', () => {
    const result = compareOutputs([{ id: 1, at: 100 }], [{ id: 1, at: 999 }], { key: (r) => String((r as { id: number }).id) });
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
    expect(message).toMatch(/7 lost, 1 duplicated \(1 extra copies\), 1 unexpected; reference 10 records, actual 5/);
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
