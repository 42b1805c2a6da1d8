/** Characters SQS messages cannot carry, found in an event with their path (the ingest function rejects such events). */

/** The first string (key or value) with a character SQS refuses, as "path: ...", or undefined. */
export function sqsUnsafe(value: unknown, path = '(event)'): string | undefined {
  if (typeof value === 'string') {
    const bad = badChar(value);
    return bad && `${path}: contains ${bad}, a character SQS messages cannot carry; expected only tab, LF, CR, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF, received ${shown(value)}`;
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const r = sqsUnsafe(value[i], path === '(event)' ? String(i) : `${path}.${i}`);
      if (r) return r;
    }
    return undefined;
  }
  if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      const p = path === '(event)' ? k : `${path}.${k}`;
      const badKey = badChar(k);
      if (badKey) return `${p}: the field name contains ${badKey}, a character SQS messages cannot carry; received field name ${shown(k)}`;
      const r = sqsUnsafe(v, p);
      if (r) return r;
    }
  }
  return undefined;
}

/** A string as JSON (NUL and lone surrogates escaped), cut to 80 characters. */
const shown = (s: string): string => (JSON.stringify(s).length > 80 ? `${JSON.stringify(s).slice(0, 80)}...` : JSON.stringify(s));

function badChar(s: string): string | undefined {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x20 && c < 0xd800) continue;
    const at = ` at position ${i}`;
    const hex = `U+${c.toString(16).toUpperCase().padStart(4, '0')}`;
    if (c < 0x20) {
      if (c === 0x09 || c === 0x0a || c === 0x0d) continue;
      return hex + at;
    }
    if (c <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++;
        continue;
      }
      return `a lone surrogate ${hex}${at}`;
    }
    if (c <= 0xdfff) return `a lone surrogate ${hex}${at}`;
    if (c === 0xfffe || c === 0xffff) return hex + at;
  }
  return undefined;
}
