/**
 * The sender of a combined edge (StageEdge.combine: the hash edge into a window that
 * pre-aggregates, lib/operators/window-combiner.ts). It routes a record as the keyed
 * sender does, then adds it to the partial aggregate of its (key, pane) in the target
 * partition's open buffer, or starts one there. A buffer is sealed into one envelope
 * whenever this partition's watermark moves (outputs.ts flushChannels), so the records
 * one partial stands for all meet the same watermark downstream.
 *
 * The partial's timestamp is the latest of its records (a time inside the pane: the
 * receiver finds the same pane, windows and lateness) and the envelope's largest
 * timestamp stays that of the records. Partials keep the order of their first records.
 */
import { type Key, keyToString } from '../api/types.ts';
import type { StageEdge } from '../graph/compile.ts';
import { keyGroupOfString, partitionOfKeyGroup } from '../graph/keygroups.ts';
import type { LogicalNode } from '../api/logical.ts';
import { InvariantError } from '../errors.ts';
import type { PartialAggregate } from '../graph/window-plan.ts';
import { PaneCombiner } from '../operators/window-combiner.ts';
import type { Push } from './context.ts';
import type { ChannelBuffer } from './channel-buffer.ts';

/** The error for user code of `operator` that threw on `value` while this partition applied its input (attributed to the input record or callback). */
export type FailureOf = (operator: string, value: unknown, cause: unknown) => Error;

/**
 * Keys whose routing a sender remembers; past it the cache starts over (keys come and go:
 * auctions, windows). Small enough that a route dies young: at 16 384 Nexmark Q5's routes
 * (one per new auction) lived through two young-generation collections and were promoted,
 * and Q5 took 7-17 % more CPU than at 4 096 (bench/ab.ts, three rounds). A job with more
 * keys recurring than this recomputes a key's routing (its key string and hash) when the
 * cache has started over.
 */
const ROUTES_LIMIT = 4_096;

/** A key's routing, computed once while it stays cached, and where its partials in the open buffer are. */
class KeyRoute {
  /** The buffer `pane`, `at` and `more` describe (ChannelBuffer.id; 0: none). */
  buffer = 0;
  /** The pane of this key's first partial in that buffer, and its column index (most keys have one pane in a buffer). */
  pane = Number.NaN;
  at = -1;
  /** [pane start, column index, ...] of its other partials there. */
  more: number[] | undefined = undefined;

  constructor(
    readonly ks: string,
    readonly kg: number,
    readonly p: number,
  ) {}
}

/**
 * `open(p)`: opens a buffer for target partition p (when it has none). `failure`: the error
 * for a throw in the window's add() or first record (or a timestamp the window would
 * reject), attributed to the window and the input record or callback being applied here,
 * so it is retried and dead-lettered like any user-code failure.
 */
export function combiningSender(edge: StageEdge, window: LogicalNode, maxP: number, targetP: number, buffers: readonly (ChannelBuffer | undefined)[], open: (p: number) => ChannelBuffer, failure: FailureOf): Push {
  if (window.spec.kind !== 'window') throw new InvariantError(`edge ${edge.id} combines but feeds ${window.spec.kind} "${window.name}"`);
  const combiner = new PaneCombiner(window.spec);
  const operator = window.name;
  const keyOf = edge.key!;
  // Routes by key: numbers and strings by value (no key string to build and hash; a Map
  // tells 1 from '1'), other keys by key string, in a map of their own so that a string
  // key can never meet another key's key string.
  const byValue = new Map<number | string, KeyRoute>();
  const byKeyString = new Map<number | string, KeyRoute>();
  const routeOf = (key: Key): KeyRoute => {
    const primitive = typeof key === 'number' || typeof key === 'string';
    const routes = primitive ? byValue : byKeyString;
    const k = primitive ? key : keyToString(key);
    let r = routes.get(k);
    if (r === undefined) {
      if (routes.size >= ROUTES_LIMIT) routes.clear();
      const ks = primitive ? keyToString(key) : (k as string);
      const kg = keyGroupOfString(ks, maxP);
      routes.set(k, (r = new KeyRoute(ks, kg, partitionOfKeyGroup(kg, targetP, maxP))));
    }
    return r;
  };

  let lastKey: unknown;
  let last: KeyRoute | undefined;
  return (value, timestamp) => {
    const key = keyOf(value) as Key;
    // Consecutive records often share a key (a window's number, a hot auction).
    const r = key === lastKey && last !== undefined && typeof key !== 'object' ? last : routeOf(key);
    lastKey = key;
    last = r;
    let pane: number;
    try {
      pane = combiner.paneOf(timestamp);
    } catch (e) {
      throw failure(operator, value, e);
    }
    const b = buffers[r.p] ?? open(r.p);
    // In no window (a slide longer than the size): the window would ignore it, so it is
    // not sent; its buffer is still opened, so the target gets the envelope it would have
    // got (without records), and the envelopes are those of an uncombined run.
    if (pane !== pane) return;
    let i = -1;
    if (r.buffer !== b.id) {
      r.buffer = b.id;
      r.pane = Number.NaN;
      if (r.more !== undefined) r.more.length = 0;
    } else if (r.pane === pane) i = r.at;
    else if (r.more !== undefined) {
      const more = r.more;
      for (let j = more.length - 2; j >= 0; j -= 2) {
        if (more[j] === pane) {
          i = more[j + 1];
          break;
        }
      }
    }
    if (i < 0) {
      let partial: unknown;
      try {
        partial = combiner.first(value);
      } catch (e) {
        throw failure(operator, value, e);
      }
      const at = b.count++;
      if (r.pane !== r.pane) {
        r.pane = pane;
        r.at = at;
      } else (r.more ??= []).push(pane, at);
      b.values[at] = { partial, records: 1 } satisfies PartialAggregate;
      b.timestamps[at] = timestamp;
      if (timestamp > b.maxTimestamp) b.maxTimestamp = timestamp;
      b.keys![at] = key;
      b.keyStrings![at] = r.ks;
      b.keyGroups![at] = r.kg;
      return;
    }
    const agg = b.values[i] as PartialAggregate;
    try {
      agg.partial = combiner.add(agg.partial, value);
    } catch (e) {
      throw failure(operator, value, e);
    }
    agg.records++;
    if (timestamp > b.timestamps[i]) b.timestamps[i] = timestamp;
    if (timestamp > b.maxTimestamp) b.maxTimestamp = timestamp;
  };
}
