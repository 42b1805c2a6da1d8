/**
 * Shared pieces of the window operators: an order-preserving encoding of times and
 * windows into state field names and timer namespaces, window enumeration without
 * allocation, and the per-function "window contents" (what is stored per window and
 * how a firing turns it into output).
 *
 * Field layout of a window operator's keyed state (one entity per key):
 * - `P`: tumbling and sliding windows without allowed lateness, the key's panes as a flat
 *   [paneStart, contents, ...] array (window-panes.ts; a process function's records in
 *   `R${paneStart}`);
 * - `S`: session windows without allowed lateness, the key's sessions as a flat
 *   [start, end, contents, ...] array (window-session-lazy.ts; a process function's records
 *   in `R${id}`);
 * - tumbling and sliding windows with allowed lateness (or without merge):
 *   `w${windowKey}`, a window's contents (accumulator, reduced value, or element list);
 * - session windows with allowed lateness: `I`, the open sessions as [start, end, id, ...]
 *   by start, and `C${id}`, a session's contents (window-session.ts);
 * - window joins: `l${windowKey}` / `r${windowKey}`, the left / right elements of a window;
 * - interval joins: `L${time}` / `R${time}`, the left / right elements with that timestamp.
 * Timers: where a timer's time names the window (fixed sizes; sessions, which never share
 * an end), the namespace is '' and time order fires one key's windows by end; the
 * retaining operators use windowKey as namespace (a key's timers of one time fire by
 * namespace: by end, then start).
 */
import type { Collector, WindowInfo } from '../api/functions.ts';
import type { Key } from '../api/types.ts';
import type { TimeWindow } from '../api/windows.ts';
import { InputRejectedError, JobDefinitionError } from '../errors.ts';
import type { WindowFunctionSpec } from '../api/logical.ts';
import type { FixedWindows } from '../graph/window-plan.ts';
import type { OperatorContext, StreamOperator } from './contract.ts';
import { cloneValue } from '../state/txn.ts';


/** A window or join operator: counts what it drops as late. */
export interface WindowOperator extends StreamOperator {
  /**
   * Records dropped because they were late for every window they belong to and no
   * late-data side output was set. Counts this operator instance (one partition,
   * since it was opened): a metric, not state, so a recovery starts it again at 0.
   */
  readonly droppedLate: number;
}

const BIAS = 2 ** 53;
const TIME_WIDTH = 17;
const CHAR_P = 'p'.charCodeAt(0);

/**
 * Fixed-width time encoding whose lexical order is numeric order, negatives included
 * ('n' sorts before 'p'): timer namespaces and field names must sort like times.
 */
export function encodeTime(t: number): string {
  if (!Number.isSafeInteger(t)) throw new InputRejectedError('timestamp', 'an integer number of milliseconds within ±2^53', String(t));
  return t >= 0 ? 'p' + String(t).padStart(16, '0') : 'n' + String(BIAS + t).padStart(16, '0');
}

export function decodeTime(s: string, at: number): number {
  const n = Number(s.slice(at + 1, at + TIME_WIDTH));
  return s.charCodeAt(at) === CHAR_P ? n : n - BIAS;
}

/**
 * The field of a process function's buffered records for one pane (window-panes.ts) or one
 * session (window-session-lazy.ts), named by a time that no other live one of the key holds.
 */
export function recordsField(id: number): string {
  return 'R' + id;
}

/** End first, then start: the order in which one key's windows must fire. */
export function windowKey(start: number, end: number): string {
  return encodeTime(end) + encodeTime(start);
}

export function decodeWindowKey(k: string): TimeWindow {
  return { start: decodeTime(k, TIME_WIDTH), end: decodeTime(k, 0) };
}

/** Event times must be integer milliseconds: window bounds go into fixed-width names. */
export function checkTimestamp(t: number): void {
  if (!Number.isSafeInteger(t)) throw new InputRejectedError('timestamp', 'an integer number of epoch milliseconds', String(t));
}

/**
 * The earliest start of a window containing t (t - size < start <= t, start aligned to
 * slide + offset); iterate `for (s = first; s <= t; s += slide)`. When slide > size a
 * record may fall in no window: then first > t.
 */
export function firstWindowStart(t: number, w: FixedWindows): number {
  const x = t - w.size;
  return x - floorMod(x - w.offset, w.slide) + w.slide;
}

/** Below this floorMod divides (see there); beyond it, `%`. */
const FLOOR_MOD_EXACT = 2 ** 52;

/**
 * a mod m in [0, m), for integers a and m > 0 (window bounds, epoch milliseconds), by a
 * division and a floor: `%` on numbers beyond small integers (epoch milliseconds are) is a
 * call to C's fmod, tens of nanoseconds on every record and firing of a window. Exact for
 * |a| < 2^52: rounding can carry the quotient across an integer only when |a| is about 2^53
 * or more, so its floor is the true one, and the product is an exact integer of at most
 * |a| + m (0 or -m when m > |a|).
 */
export function floorMod(a: number, m: number): number {
  if (a < FLOOR_MOD_EXACT && a > -FLOOR_MOD_EXACT) return a - Math.floor(a / m) * m;
  const r = a % m;
  return r < 0 ? r + m : r + 0; // + 0: `%` gives -0 for a negative multiple
}

/** Window key (and prefixed field names) by window start: the hot path computes each only once. */
export class WindowKeyCache {
  private readonly map = new Map<number, string[]>();
  constructor(
    private readonly size: number,
    private readonly prefixes: readonly string[],
  ) {}

  /** The last window asked for: records mostly fall in the window of the one before. */
  private lastStart = Number.NaN;
  private last: string[] = [];

  /** [windowKey, ...prefix + windowKey]. */
  get(start: number): string[] {
    if (start === this.lastStart) return this.last;
    let e = this.map.get(start);
    if (e === undefined) {
      // Windows advance with event time: a full cache is mostly stale, so start over.
      if (this.map.size >= 4096) this.map.clear();
      const k = windowKey(start, start + this.size);
      e = [k, ...this.prefixes.map((p) => p + k)];
      this.map.set(start, e);
    }
    this.lastStart = start;
    this.last = e;
    return e;
  }
}

/** What one window stores and how it becomes output. */
export interface WindowContents {
  /** The contents after the window's first element. */
  first(value: unknown): unknown;
  /** Add an element; may update in place, returns the new contents. */
  add(contents: unknown, value: unknown): unknown;
  /** Contents of two merged (session) windows, `a` the earlier one. */
  merge(a: unknown, b: unknown): unknown;
  /** Emit the window's result(s) with timestamp end - 1. */
  fire(contents: unknown, key: Key, window: TimeWindow): void;
}

/**
 * `retained`: the window outlives its firing (allowed lateness). Its result is then
 * computed from a copy, so that neither the user function nor a downstream operator
 * holding the emitted record can change the stored contents.
 */
export function windowContents(ctx: OperatorContext, fn: WindowFunctionSpec, retained: boolean): WindowContents {
  const c = windowContentsOf(ctx, fn);
  if (!retained) return c;
  const fire = c.fire;
  return { ...c, fire: (contents, key, window) => fire(cloneValue(contents), key, window) };
}

function windowContentsOf(ctx: OperatorContext, fn: WindowFunctionSpec): WindowContents {
  switch (fn.kind) {
    case 'aggregate': {
      const { agg, project } = fn;
      return {
        first: (v) => agg.add(v, agg.createAccumulator()),
        add: (acc, v) => agg.add(v, acc),
        merge: (a, b) => {
          if (!agg.merge) throw new JobDefinitionError(ctx.node.name, 'an AggregateFunction with merge() for session windows', 'no merge()');
          return agg.merge(a, b);
        },
        fire: (acc, key, window) => {
          const result = agg.getResult(acc);
          ctx.emit(project ? project(result, { key, window }) : result, window.end - 1);
        },
      };
    }
    case 'reduce': {
      const { reduce, project } = fn;
      return {
        // A copy: a reduce function that updates its first argument in place must not
        // change the input record, which sliding windows share between windows.
        first: (v) => cloneValue(v),
        add: (acc, v) => reduce(acc, v),
        merge: (a, b) => reduce(a, b),
        fire: (acc, key, window) => ctx.emit(project ? project(acc, { key, window }) : acc, window.end - 1),
      };
    }
    case 'process': {
      const { process } = fn;
      return {
        first: (v) => [v],
        add: (list, v) => {
          (list as unknown[]).push(v);
          return list;
        },
        merge: (a, b) => (a as unknown[]).concat(b as unknown[]),
        fire: (list, key, window) => {
          const ts = window.end - 1;
          const out: Collector<unknown> = { emit: (value, timestamp) => ctx.emit(value, timestamp ?? ts) };
          const info: WindowInfo<Key> = { key, window };
          process(list as unknown[], info, out);
        },
      };
    }
  }
}
