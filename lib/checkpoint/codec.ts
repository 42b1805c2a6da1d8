/**
 * JSON for checkpoint objects. State and progress hold numbers JSON cannot write
 * (watermarks start at -Infinity, timers at +Infinity) and may hold `undefined` in
 * arrays; they are tagged as {"$n": "..."} / {"$u": 1}, and a user object that happens
 * to use a tag key is wrapped in {"$o": ...}, so every value reads back as written.
 * Object key order is kept: restored state must emit byte-identical records.
 *
 * Values come from users (events in the input log, state), so no step recurses: a value
 * nested a million levels deep encodes and decodes like any other (JSON.stringify
 * overflows the stack near 10,000 levels; such values take an iterative writer).
 */

const TAGS = new Set(['$n', '$u', '$o']);

/** A container being walked: its own keys (objects) or null (arrays), the next index, and its copy once one is needed. */
interface Frame {
  readonly v: any;
  readonly keys: string[] | null;
  i: number;
  out: any;
  tagged: boolean;
}

/** Stack depth above which the walk also checks for cycles (JSON.stringify's TypeError instead of an endless walk). */
const CYCLE_CHECK_DEPTH = 1024;

function circular(): TypeError {
  return new TypeError('Converting circular structure to JSON');
}

const CONTAINER: unique symbol = Symbol('container');

/** The tagged form of a leaf, or CONTAINER for an array or object (walked). */
function encodeLeaf(v: unknown): unknown {
  if (typeof v === 'number') return Number.isFinite(v) ? v : { $n: String(v) };
  if (v === undefined) return { $u: 1 };
  if (v === null || typeof v !== 'object') return v;
  return CONTAINER;
}

function frameOf(v: object): Frame {
  return { v, keys: Array.isArray(v) ? null : Object.keys(v), i: 0, out: undefined, tagged: false };
}

/** Child `k` of frame f became `y` (was `x`): copy-on-write, so clean subtrees (most state) are not copied. */
function put(f: Frame, x: unknown, y: unknown): void {
  const keys = f.keys;
  if (y !== x && !f.out) {
    if (keys) {
      f.out = {};
      for (let j = 0; j < f.i; j++) f.out[keys[j]] = f.v[keys[j]];
    } else f.out = (f.v as unknown[]).slice(0, f.i);
  }
  if (!f.out) return;
  if (keys) {
    // JSON drops undefined properties itself; keep them out of copies too.
    if (y !== undefined) f.out[keys[f.i]] = y;
  } else f.out.push(y);
}

/** Tags what JSON cannot hold, with an explicit stack. */
function encodeWalk(root: unknown): unknown {
  const leaf = encodeLeaf(root);
  if (leaf !== CONTAINER) return leaf;
  const stack: Frame[] = [frameOf(root as object)];
  let onPath: Set<unknown> | undefined;
  for (;;) {
    const f = stack[stack.length - 1];
    const keys = f.keys;
    if (f.i < (keys ? keys.length : f.v.length)) {
      const k = keys ? keys[f.i] : f.i;
      const x = f.v[k];
      if (keys) {
        if (TAGS.has(k as string)) f.tagged = true;
        if (x === undefined) {
          f.i++;
          continue;
        }
      }
      const y = encodeLeaf(x);
      if (y !== CONTAINER) {
        put(f, x, y);
        f.i++;
        continue;
      }
      if (stack.length >= CYCLE_CHECK_DEPTH) {
        onPath ??= new Set(stack.map((s) => s.v));
        if (onPath.has(x)) throw circular();
        onPath.add(x);
      }
      stack.push(frameOf(x as object));
      continue;
    }
    stack.pop();
    onPath?.delete(f.v);
    const o = f.out ?? f.v;
    const r = f.tagged ? { $o: o } : o;
    if (stack.length === 0) return r;
    const p = stack[stack.length - 1];
    put(p, f.v, r);
    p.i++;
  }
}

/** A container being decoded: its source, keys (objects) or null (arrays), the next index, and what it becomes. */
interface DecodeFrame {
  readonly src: any;
  readonly keys: string[] | null;
  i: number;
  readonly out: any;
}

const LEAF: unique symbol = Symbol('leaf');
let leafValue: unknown;

/** Decodes a tag or a primitive into leafValue (returning LEAF), or opens a frame for a container. */
function decodeOpen(v: unknown): DecodeFrame | typeof LEAF {
  if (v === null || typeof v !== 'object') {
    leafValue = v;
    return LEAF;
  }
  if (Array.isArray(v)) return { src: v, keys: null, i: 0, out: [] };
  const o = v as Record<string, unknown>;
  if ('$n' in o) {
    leafValue = Number(o.$n);
    return LEAF;
  }
  if ('$u' in o) {
    leafValue = undefined;
    return LEAF;
  }
  const src = ('$o' in o ? o.$o : o) as Record<string, unknown>;
  return { src, keys: Object.keys(src), i: 0, out: {} };
}

function decodeWalk(root: unknown): unknown {
  const first = decodeOpen(root);
  if (first === LEAF) return leafValue;
  const stack: DecodeFrame[] = [first];
  for (;;) {
    const f = stack[stack.length - 1];
    const keys = f.keys;
    if (f.i < (keys ? keys.length : f.src.length)) {
      const next = decodeOpen(f.src[keys ? keys[f.i] : f.i]);
      if (next !== LEAF) {
        stack.push(next);
        continue;
      }
      if (keys) f.out[keys[f.i]] = leafValue;
      else f.out.push(leafValue);
      f.i++;
      continue;
    }
    stack.pop();
    if (stack.length === 0) return f.out;
    const p = stack[stack.length - 1];
    if (p.keys) p.out[p.keys[p.i]] = f.out;
    else p.out.push(f.out);
    p.i++;
  }
}

function isStackOverflow(e: unknown): boolean {
  return e instanceof RangeError && /call stack/i.test(e.message);
}

/** JSON.stringify, falling back to the iterative writer when the value is too deep for it. */
function stringify(v: unknown, indent?: number): string {
  try {
    return JSON.stringify(v, null, indent);
  } catch (e) {
    if (!isStackOverflow(e)) throw e;
    return stringifyIterative(v, indent);
  }
}

/**
 * The text JSON.stringify(v, null, indent) gives, written with an explicit stack:
 * toJSON is called, boxed primitives are unboxed, functions, symbols and undefined are
 * left out of objects and written null in arrays; BigInt and cycles throw TypeError.
 */
export function stringifyIterative(v: unknown, indent?: number): string {
  const gap = indent && indent > 0 ? ' '.repeat(Math.min(10, Math.floor(indent))) : '';
  const parts: string[] = [];
  interface W {
    readonly v: any;
    readonly keys: string[] | null;
    i: number;
    /** Something written yet (a separator before the next member). */
    any: boolean;
  }
  const stack: W[] = [];
  const onPath = new Set<unknown>();
  /** Writes a primitive; or returns the container to open (after toJSON and unboxing), or skip when JSON leaves the value out. */
  const prepare = (key: string, x: unknown): { open?: object; skip?: true } => {
    if (x !== null && (typeof x === 'object' || typeof x === 'bigint') && typeof (x as { toJSON?: unknown }).toJSON === 'function') x = (x as { toJSON: (k: string) => unknown }).toJSON(key);
    if (x instanceof Number) x = Number(x);
    else if (x instanceof String) x = String(x);
    else if (x instanceof Boolean) x = x.valueOf();
    switch (typeof x) {
      case 'string':
      case 'number':
      case 'boolean':
        parts.push(JSON.stringify(x));
        return {};
      case 'bigint':
        throw new TypeError('Do not know how to serialize a BigInt');
      case 'object':
        if (x === null) {
          parts.push('null');
          return {};
        }
        return { open: x };
      default:
        return { skip: true };
    }
  };
  const newline = (depth: number) => (gap ? '\n' + gap.repeat(depth) : '');
  const open = (x: object) => {
    if (onPath.has(x)) throw circular();
    onPath.add(x);
    const isArray = Array.isArray(x);
    parts.push(isArray ? '[' : '{');
    stack.push({ v: x, keys: isArray ? null : Object.keys(x), i: 0, any: false });
  };
  const top = prepare('', v);
  if (top.skip) return undefined as unknown as string; // JSON.stringify(undefined) is undefined
  if (!top.open) return parts.join('');
  open(top.open);
  while (stack.length) {
    const f = stack[stack.length - 1];
    const keys = f.keys;
    if (f.i >= (keys ? keys.length : f.v.length)) {
      stack.pop();
      onPath.delete(f.v);
      if (f.any) parts.push(newline(stack.length));
      parts.push(keys ? '}' : ']');
      continue;
    }
    const i = f.i++;
    const key = keys ? keys[i] : String(i);
    const x = f.v[key];
    const sep = (f.any ? ',' : '') + newline(stack.length);
    if (keys) {
      const mark = parts.length;
      parts.push(sep + JSON.stringify(key) + (gap ? ': ' : ':'));
      const r = prepare(key, x);
      if (r.skip) {
        parts.length = mark;
        continue;
      }
      f.any = true;
      if (r.open) open(r.open);
    } else {
      parts.push(sep);
      f.any = true;
      const r = prepare(key, x);
      if (r.skip) parts.push('null');
      else if (r.open) open(r.open);
    }
  }
  return parts.join('');
}

export function encodeJson(v: unknown, indent?: number): string {
  return stringify(encodeWalk(v), indent);
}

/**
 * The same text as encodeJson, faster for values that need no tags (most state): plain
 * JSON first; only when it shows a `null` (which a non-finite number or an undefined
 * array slot also becomes) or a `"$` key does the value take the tagging walk.
 */
export function encodeJsonFast(v: unknown): string {
  let plain: string;
  try {
    plain = JSON.stringify(v);
  } catch (e) {
    if (!isStackOverflow(e)) throw e;
    return encodeJson(v);
  }
  return plain.includes('null') || plain.includes('"$') ? encodeJson(v) : plain;
}

export function decodeJson<T = unknown>(text: string): T {
  return decodeWalk(JSON.parse(text)) as T;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function toBytes(v: unknown, indent?: number): Uint8Array {
  return encoder.encode(encodeJson(v, indent));
}

export function fromBytes<T = unknown>(bytes: Uint8Array): T {
  return decodeJson<T>(decoder.decode(bytes));
}
