/**
 * The nexmark-ts v1 PRNG (NEXMARK.md section 3.2): sfc32, seeded per event
 * from (user seed, event number) through fmix32, so any event can be
 * generated alone. Every operation is defined modulo 2^32; `>>> 0` keeps
 * values as uint32 and Math.imul gives the low 32 bits of products.
 */

import { fmix32 } from '../util/hash.ts';

const TWO_32 = 4294967296;
const TWO_26 = 67108864;
const TWO_53 = 9007199254740992;
const TWO_21 = 2097152;

export { fmix32 };

/**
 * sfc32 state. Mutable and re-seedable in place so the generator can reuse
 * one instance instead of allocating per event.
 */
export class Rng {
  private a = 0;
  private b = 0;
  private c = 0;
  private d = 0;

  constructor(seed = 0, n = 0) {
    this.reseed(seed, n);
  }

  /** Seeds for event number `n` (0 <= n < 2^53) under uint32 user seed `seed`. */
  reseed(seed: number, n: number): this {
    const lo = n % TWO_32;
    const hi = Math.floor(n / TWO_32);
    let a = fmix32((seed ^ 0x6a09e667) >>> 0);
    let b = fmix32((lo ^ 0xbb67ae85) >>> 0);
    let c = fmix32((hi ^ 0x3c6ef372) >>> 0);
    let d = 1;
    // Warm-up: the first outputs of sfc32 are poorly mixed. Same step as
    // u32(), on locals because this runs once per event.
    for (let i = 0; i < 12; i++) {
      const t = (a + b + d) >>> 0;
      d = (d + 1) >>> 0;
      a = (b ^ (b >>> 9)) >>> 0;
      b = (c + (c << 3)) >>> 0;
      c = (((c << 21) | (c >>> 11)) + t) >>> 0;
    }
    this.a = a;
    this.b = b;
    this.c = c;
    this.d = d;
    return this;
  }

  /** One sfc32 step; uint32. */
  u32(): number {
    const a = this.a;
    const b = this.b;
    const c = this.c;
    const t = (a + b + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = (b ^ (b >>> 9)) >>> 0;
    this.b = (c + (c << 3)) >>> 0;
    this.c = (((c << 21) | (c >>> 11)) + t) >>> 0;
    return t;
  }

  /** Uniform in [0, 1) with 53 bits; the high part is drawn first. */
  double(): number {
    const hi = this.u32() >>> 5;
    const lo = this.u32() >>> 6;
    return (hi * TWO_26 + lo) / TWO_53;
  }

  /** Integer in [0, m), m >= 1. The small-m path is exact: u32 * m < 2^53. */
  int(m: number): number {
    if (m <= TWO_21) return Math.floor((this.u32() * m) / TWO_32);
    return Math.min(Math.floor(this.double() * m), m - 1);
  }

  /**
   * Random lowercase text of 3 .. maxLen-1 chars with ~1/13 `special`
   * chars; a space `special` is trimmed at both ends (Beam's behaviour).
   */
  string(maxLen: number, special = ' '): string {
    const len = 3 + this.int(maxLen - 3);
    let s = '';
    for (let i = 0; i < len; i++) {
      // The letter is drawn only when no special char is emitted.
      s += this.int(13) === 0 ? special : String.fromCharCode(97 + this.int(26));
    }
    return special === ' ' ? trimSpaces(s) : s;
  }

  /** Log-uniform price in cents, 100 .. 1e8 (V8 Math.pow defines v1). */
  price(): number {
    return Math.round(Math.pow(10, this.double() * 6) * 100);
  }
}

/** Only spaces, unlike String#trim which also strips other whitespace. */
function trimSpaces(s: string): string {
  let i = 0;
  let j = s.length;
  while (i < j && s.charCodeAt(i) === 32) i++;
  while (j > i && s.charCodeAt(j - 1) === 32) j--;
  return i === 0 && j === s.length ? s : s.slice(i, j);
}
