/**
 * JSON for checkpoint objects. State and progress hold numbers JSON cannot write
 * (watermarks start at -Infinity, timers at +Infinity) and may hold `undefined` in
 * arrays; they are tagged as {"$n": "..."} / {"$u": 1}, and a user object that happens
 * to use a tag key is wrapped in {"$o": ...}, so every value reads back as written.
 * Object key order is kept: restored state must emit byte-identical records.
 */

const TAGS = new Set(['$n', '$u', '$o']);

/** Tags what JSON cannot hold; copy-on-write, so clean subtrees (most state) are not copied. */
function encodeWalk(v: unknown): unknown {
  if (typeof v === 'number') return Number.isFinite(v) ? v : { $n: String(v) };
  if (v === undefined) return { $u: 1 };
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) {
    let out: unknown[] | undefined;
    for (let i = 0; i < v.length; i++) {
      const x = v[i];
      const y = encodeWalk(x);
      if (y !== x && !out) out = v.slice(0, i);
      if (out) out.push(y);
    }
    return out ?? v;
  }
  let out: Record<string, unknown> | undefined;
  let tagged = false;
  const keys = Object.keys(v);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i];
    const x = (v as Record<string, unknown>)[k];
    if (TAGS.has(k)) tagged = true;
    // JSON drops undefined properties itself; keep them out of copies too.
    const y = x === undefined ? x : encodeWalk(x);
    if (y !== x && !out) {
      out = {};
      for (let j = 0; j < i; j++) out[keys[j]] = (v as Record<string, unknown>)[keys[j]];
    }
    if (out && y !== undefined) out[k] = y;
  }
  const o = out ?? v;
  return tagged ? { $o: o } : o;
}

function decodeWalk(v: unknown): unknown {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(decodeWalk);
  const o = v as Record<string, unknown>;
  if ('$n' in o) return Number(o.$n);
  if ('$u' in o) return undefined;
  const src = ('$o' in o ? o.$o : o) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(src)) out[k] = decodeWalk(src[k]);
  return out;
}

export function encodeJson(v: unknown, indent?: number): string {
  return JSON.stringify(encodeWalk(v), null, indent);
}

/**
 * The same text as encodeJson, faster for values that need no tags (most state): plain
 * JSON first; only when it shows a `null` (which a non-finite number or an undefined
 * array slot also becomes) or a `"$` key does the value take the tagging walk.
 */
export function encodeJsonFast(v: unknown): string {
  const plain = JSON.stringify(v);
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
