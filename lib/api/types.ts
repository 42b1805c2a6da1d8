/**
 * Core value types shared by the API, the compiler and the runtimes.
 * Times are integer epoch milliseconds throughout.
 */

/** A key: a string, a number, or a tuple of those (serialised deterministically). */
export type Key = string | number | readonly (string | number)[];

export type KeySelector<T, K extends Key = Key> = (value: T) => K;

/** A record as it travels between operators: the value, its event time, and (after keyBy) its key. */
export interface StreamRecord<T = unknown> {
  value: T;
  timestamp: number;
  key?: Key;
}

/** Event time is measured by watermarks: W means no record with timestamp <= W is still to come. */
export const MIN_WATERMARK = Number.NEGATIVE_INFINITY;
export const MAX_WATERMARK = Number.POSITIVE_INFINITY;

/**
 * How a source derives watermarks. Bounded out-of-orderness as in Flink:
 * watermark = max timestamp seen - maxOutOfOrdernessMs - 1. A source partition
 * that receives nothing for idleTimeoutMs (processing time) is marked idle and
 * stops holding event time back downstream until it receives data again.
 */
export interface WatermarkStrategy {
  readonly maxOutOfOrdernessMs: number;
  /** Default: 5000 ms. `undefined` in a strategy built by hand means never idle. */
  readonly idleTimeoutMs?: number;
}

export const WatermarkStrategies = {
  boundedOutOfOrderness(maxOutOfOrdernessMs: number, options: { idleTimeoutMs?: number } = {}): WatermarkStrategy {
    return { maxOutOfOrdernessMs, idleTimeoutMs: options.idleTimeoutMs ?? 5000 };
  },
  /** Timestamps never decrease within a source partition. */
  monotonous(options: { idleTimeoutMs?: number } = {}): WatermarkStrategy {
    return { maxOutOfOrdernessMs: 0, idleTimeoutMs: options.idleTimeoutMs ?? 5000 };
  },
};

/** A time source the runtime reads for processing time and TTL. Injectable for tests. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock tests move by hand. */
export class ManualClock implements Clock {
  constructor(private t = 0) {}
  now(): number {
    return this.t;
  }
  set(t: number): void {
    this.t = t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

/** Names a side output; records emitted to it form a separate stream. */
export class OutputTag<T> {
  /** Phantom field so TypeScript keeps T. */
  declare readonly __type?: T;
  constructor(readonly id: string) {}
}

/** Deterministic string form of a key: used for state addresses and hashing. */
export function keyToString(key: Key): string {
  if (typeof key === 'string') return 's' + key;
  if (typeof key === 'number') return 'n' + key;
  return 'j' + JSON.stringify(key);
}

export function keyFromString(s: string): Key {
  const body = s.slice(1);
  switch (s[0]) {
    case 's':
      return body;
    case 'n':
      return Number(body);
    default:
      return JSON.parse(body) as Key;
  }
}
