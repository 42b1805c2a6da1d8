/**
 * The checkpoint codec takes values from users (events in the input log, keyed state),
 * so no depth may overflow the stack: a value nested deeper than JSON.stringify can write
 * (about 10,000 levels) encodes and reads back as written, and the text for every
 * value is the one the tagging rules give (compared with a plain recursive reference).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeJson, encodeJson, encodeJsonFast, fromBytes, stringifyIterative, toBytes } from '../../lib/checkpoint/codec.ts';

/** The tagging rules, written recursively: the reference for shallow values. */
function reference(v: unknown): unknown {
  if (typeof v === 'number') return Number.isFinite(v) ? v : { $n: String(v) };
  if (v === undefined) return { $u: 1 };
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(reference);
  const out: Record<string, unknown> = {};
  let tagged = false;
  for (const k of Object.keys(v)) {
    if (k === '$n' || k === '$u' || k === '$o') tagged = true;
    const x = (v as Record<string, unknown>)[k];
    if (x !== undefined) out[k] = reference(x);
  }
  return tagged ? { $o: out } : out;
}

const text = fc.oneof(fc.string({ maxLength: 5 }), fc.constantFrom('null', '$n', '$u', '$o', '$', '"\\\n\u2028'));
// -0 is left out: JSON writes it as 0.
const leaf = fc.oneof(fc.integer(), fc.double().map((x) => (Object.is(x, -0) ? 0 : x)), fc.constantFrom(Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Number.NaN, null, true, false), text);
const value: fc.Arbitrary<unknown> = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    fc.array(fc.oneof(tie('v'), fc.constant(undefined)), { maxLength: 4 }),
    fc.dictionary(text, fc.oneof(tie('v'), fc.constant(undefined)), { maxKeys: 4 }),
  ),
})).v;

/** [[[ ... leaf ... ]]] `depth` levels deep. */
function deepArray(depth: number, leafValue: unknown): unknown {
  let v: unknown = leafValue;
  for (let i = 0; i < depth; i++) v = [v];
  return v;
}

/** {"a": {"a": ... leaf}} `depth` levels deep, with a tag-looking key at the bottom. */
function deepObject(depth: number, leafValue: unknown): unknown {
  let v: unknown = { $n: 'user data', x: leafValue };
  for (let i = 0; i < depth; i++) v = { a: v, n: i };
  return v;
}

/** Reads `depth` levels of [..] or {a: ..} back down to the leaf, without recursion. */
function bottom(v: unknown, depth: number, key: 0 | 'a'): unknown {
  let x = v as any;
  for (let i = 0; i < depth; i++) x = x[key];
  return x;
}

describe('checkpoint codec', () => {
  it('writes the tagging rules exactly and reads every value back', () => {
    fc.assert(
      fc.property(value, (v) => {
        const t = encodeJson(v);
        expect(t).toBe(JSON.stringify(reference(v)));
        expect(decodeJson(t)).toEqual(v);
        expect(decodeJson(encodeJsonFast(v))).toEqual(v);
      }),
      { numRuns: 500, seed: 31 },
    );
  });

  it('the iterative writer gives JSON.stringify text (indent, toJSON, values JSON leaves out)', () => {
    const plain = fc.jsonValue({ maxDepth: 4 });
    fc.assert(
      fc.property(plain, fc.constantFrom(undefined, 0, 2, 12), (v, indent) => {
        expect(stringifyIterative(v, indent)).toBe(JSON.stringify(v, null, indent));
      }),
      { numRuns: 300, seed: 7 },
    );
    const odd = { d: new Date(0), f: () => 1, u: undefined, s: Symbol('s'), arr: [undefined, () => 1, Symbol('t'), new Date(1)], n: Object(3), e: [], o: {} };
    for (const indent of [undefined, 2]) expect(stringifyIterative(odd, indent)).toBe(JSON.stringify(odd, null, indent));
    expect(() => stringifyIterative({ b: 1n })).toThrow(TypeError);
  });

  it('a value nested 50,000 levels deep encodes and reads back (arrays and objects, tags at the bottom)', () => {
    const depth = 50_000;
    const arr = deepArray(depth, [Number.NEGATIVE_INFINITY, undefined, 'x']);
    for (const t of [encodeJson(arr), encodeJsonFast(arr)]) {
      expect(t.length).toBeGreaterThan(2 * depth);
      expect(bottom(decodeJson(t), depth, 0)).toEqual([Number.NEGATIVE_INFINITY, undefined, 'x']);
    }
    // Nothing to tag: the fast path's plain JSON.stringify is what overflows.
    const clean = deepArray(depth, 1);
    expect(bottom(decodeJson(encodeJsonFast(clean)), depth, 0)).toBe(1);
    const obj = deepObject(depth, Number.POSITIVE_INFINITY);
    const back = fromBytes(toBytes(obj));
    expect(bottom(back, depth, 'a')).toEqual({ $n: 'user data', x: Number.POSITIVE_INFINITY });
    expect(encodeJson(back)).toBe(encodeJson(obj));
  });

  it('a cycle is a TypeError, as in JSON.stringify, not an endless walk', () => {
    const a: unknown[] = [];
    let v: unknown[] = a;
    for (let i = 0; i < 3000; i++) v = [v];
    a.push(v, Number.NaN);
    expect(() => encodeJson(a)).toThrow(TypeError);
    const small: Record<string, unknown> = { x: Number.NaN };
    small.self = small;
    expect(() => encodeJson(small)).toThrow(TypeError);
  });
});
