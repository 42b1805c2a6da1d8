/**
 * Tumbling and sliding windows without allowed lateness, stored as panes (as Arroyo
 * and Flink's old "pane" optimisation do). Time is cut into panes of length
 * g = gcd(size, slide); every window is a run of size / g panes. A record updates
 * only its pane (one accumulator), not each of the size / slide windows it belongs
 * to; a window's result is the merge of its panes when it fires.
 *
 * Used (panesApply, lib/graph/window-plan.ts) when each window is a single pane (tumbling windows, or a slide that is a
 * multiple of the size), and for sliding windows of an AggregateFunction with
 * merge(). Same results as the per-window operator (window.ts), including the firing
 * order: one event-time timer per (key, window end), time = end - 1, namespace ''.
 *
 * State: one field per key, `P` = [paneStart, contents, ...] sorted by start. Timers
 * form a chain per key: a new pane registers its first window end still to come;
 * a firing window registers the next end when a pane of the key lies in that window.
 * A pane is dropped when its last window has fired. A process function's records are
 * kept out of `P`, in a field of their own per pane (`R${paneStart}`, its contents in `P`
 * null): a record is appended to it, where inside `P` each batch would copy every record
 * of the key's panes.
 *
 * A combined input (window-combiner.ts) carries one partial accumulator per (key, pane)
 * of a sender's channel buffer instead of records: it is decided like the records it
 * stands for (same pane, same watermark) and merged into its pane.
 */
import type { StreamRecord } from '../api/types.ts';
import type { TimeWindow } from '../api/windows.ts';
import { InvariantError } from '../errors.ts';
import type { OperatorContext, TimeDomain } from './contract.ts';
import { cloneValue } from '../state/txn.ts';
import { type FixedWindows, gcd, type PartialAggregate, type WindowSpec } from '../graph/window-plan.ts';
import { checkTimestamp, floorMod, recordsField, type WindowOperator, windowContents } from './window-state.ts';

const PANES = 'P';

/**
 * Where panes lie: time cut into panes of length g = gcd(size, slide), aligned like the
 * windows. Shared by the operator and the combiner that pre-aggregates its input per pane
 * before the shuffle (window-combiner.ts), so both cut time the same way.
 */
export class PaneGeometry {
  readonly size: number;
  readonly slide: number;
  readonly offset: number;
  /** The pane length. */
  readonly g: number;

  constructor(w: FixedWindows) {
    this.size = w.size;
    this.slide = w.slide;
    this.offset = w.offset;
    this.g = gcd(w.size, w.slide);
  }

  /** The start of the pane holding t. */
  paneOf(t: number): number {
    return t - floorMod(t - this.offset, this.g);
  }

  /** Latest window start at or before t. */
  startAtOrBefore(t: number): number {
    return t - floorMod(t - this.offset, this.slide);
  }

  /** Earliest window start at or after t. */
  startAtOrAfter(t: number): number {
    const r = floorMod(t - this.offset, this.slide);
    return r === 0 ? t : t - r + this.slide;
  }

  /** The first (earliest) window start of a pane; above lastStart when a slide longer than the size leaves the pane in no window. */
  firstStart(pane: number): number {
    return this.startAtOrAfter(pane + this.g - this.size);
  }

  /** The last (latest) window start of a pane: the pane is late once the watermark reaches that window's end - 1. */
  lastStart(pane: number): number {
    return this.startAtOrBefore(pane);
  }
}

/**
 * `combined`: the input carries partial accumulators, one per (key, pane) of a sender's
 * channel buffer (window-combiner.ts), each merged into its pane instead of added.
 */
export function paneWindowOperator(ctx: OperatorContext, spec: WindowSpec, w: FixedWindows, combined: boolean): WindowOperator {
  const geo = new PaneGeometry(w);
  const { size, slide, g } = geo;
  const contents = windowContents(ctx, spec.fn, false);
  const lateTag = spec.lateTag;

  /** The first end, among the windows [first, last] of a pane, whose firing is still to come. */
  const firstLiveEnd = (firstStart: number, wm: number) => {
    const e = firstStart + size;
    if (e - 1 > wm) return e;
    return e + Math.ceil((wm + 2 - e) / slide) * slide;
  };
  /** A fresh pane's contents from the record's value. */
  const first = combined ? (v: unknown) => partialOf(ctx, v) : contents.first;
  /** A pane's contents with the record's value added (merged, for a partial: the pane's earlier records first). */
  const add = combined ? (c: unknown, v: unknown) => contents.merge(c, partialOf(ctx, v)) : contents.add;
  /** A process function's panes keep their records in fields of their own (recordsField). */
  const ownFields = spec.fn.kind === 'process' && !combined;

  let cached = { pane: Number.NaN, lastStart: 0, firstStart: 0, field: '' };
  /**
   * The window that fired last, shared by every key that fires it (thousands per slide in
   * Nexmark Q5): frozen, as a TimeWindow is read-only to the window function.
   */
  let fired: TimeWindow = Object.freeze({ start: Number.NaN, end: Number.NaN });

  /**
   * A process function's record into its pane's field; a new pane joins `P` (contents null)
   * and starts its timers.
   */
  const appendToPane = (p: number, field: string, value: unknown, firstStart: number, wm: number): void => {
    const peeked = ctx.statePeek(PANES) as unknown[] | undefined;
    // Records mostly land in the newest pane: search from the end.
    let i = peeked === undefined ? -2 : peeked.length - 2;
    while (i >= 0 && (peeked![i] as number) > p) i -= 2;
    if (i < 0 || peeked![i] !== p) {
      const panes = (ctx.stateGet(PANES) as unknown[] | undefined) ?? [];
      panes.splice(i + 2, 0, p, null);
      ctx.stateSet(PANES, panes);
      ctx.registerTimer('event', firstLiveEnd(firstStart, wm) - 1);
    }
    ctx.stateAppend(field, value);
  };

  const op = {
    droppedLate: 0,

    processElement(r: StreamRecord): void {
      const t = r.timestamp;
      checkTimestamp(t);
      // Records mostly fall in the pane of the one before: skip the float modulo (fmod on
      // epoch milliseconds) then; the windows of a pane depend only on the pane.
      if (!(t >= cached.pane && t < cached.pane + g)) {
        const pane = geo.paneOf(t);
        cached = { pane, lastStart: geo.lastStart(pane), firstStart: geo.firstStart(pane), field: ownFields ? recordsField(pane) : '' };
      }
      const { pane: p, lastStart, firstStart } = cached;
      // A slide longer than the size leaves gaps that belong to no window.
      if (firstStart > lastStart) return;
      const wm = ctx.watermark();
      if (lastStart + size - 1 <= wm) {
        if (lateTag !== undefined) ctx.emit(r.value, t, lateTag);
        else op.droppedLate += combined ? partialRecords(ctx, r.value) : 1;
        return;
      }
      if (ownFields) {
        appendToPane(p, cached.field, r.value, firstStart, wm);
        return;
      }
      let panes = ctx.stateGet(PANES) as unknown[] | undefined;
      let fresh = true;
      if (panes === undefined) panes = [p, first(r.value)];
      else {
        // Records mostly land in the newest pane: search from the end.
        let i = panes.length - 2;
        while (i >= 0 && (panes[i] as number) > p) i -= 2;
        if (i >= 0 && panes[i] === p) {
          panes[i + 1] = add(panes[i + 1], r.value);
          fresh = false;
        } else if (i + 2 === panes.length) panes.push(p, first(r.value));
        else panes.splice(i + 2, 0, p, first(r.value));
      }
      ctx.stateSet(PANES, panes);
      // A pane that already existed has its chain of timers.
      if (fresh) ctx.registerTimer('event', firstLiveEnd(firstStart, wm) - 1);
    },

    onTimer(domain: TimeDomain, time: number): void {
      if (domain !== 'event') return;
      // Read without the copy stateGet makes (a firing mostly changes nothing: four of a
      // pane's five windows in Nexmark Q5), so nothing here may change `panes` or what it
      // holds: the window function gets copies of the contents, and a drop writes a new list.
      const panes = ctx.statePeek(PANES) as unknown[] | undefined;
      if (panes === undefined) return;
      const end = time + 1;
      const start = end - size;
      let acc: unknown;
      let any = false;
      for (let i = 0; i < panes.length; i += 2) {
        const p = panes[i] as number;
        if (p < start) continue;
        if (p >= end) break;
        // Copies (free for numbers): merge and getResult may change their arguments.
        const copy = ownFields ? (ctx.stateGet(recordsField(p)) ?? []) : cloneValue(panes[i + 1]);
        acc = any ? contents.merge(acc, copy) : copy;
        any = true;
      }
      if (any) {
        if (fired.end !== end) fired = Object.freeze({ start, end });
        contents.fire(acc, ctx.currentKey(), fired);
      }
      let drop = 0;
      while (drop < panes.length && geo.lastStart(panes[drop] as number) + size <= end) {
        if (ownFields) ctx.stateDelete(recordsField(panes[drop] as number));
        drop += 2;
      }
      if (drop === panes.length) {
        ctx.stateDelete(PANES);
        return;
      }
      if (drop > 0) {
        // The panes left, copied: a later record of this batch may add to them in place.
        const rest = panes.slice(drop);
        for (let i = 1; i < rest.length; i += 2) {
          const c = rest[i];
          if (c !== null && typeof c === 'object') rest[i] = cloneValue(c);
        }
        ctx.stateSet(PANES, rest);
      }
      if ((panes[drop] as number) < end + slide) ctx.registerTimer('event', end + slide - 1);
    },
  };
  return op;
}

function checkPartial(ctx: OperatorContext, v: unknown): PartialAggregate {
  const p = v as PartialAggregate | null;
  if (p === null || typeof p !== 'object' || !Number.isSafeInteger(p.records) || p.records < 1) {
    throw new InvariantError(`window "${ctx.node.name}" expected a partial aggregate {partial, records >= 1} from its combining input, received ${JSON.stringify(v)?.slice(0, 120)}`);
  }
  return p;
}

/**
 * The partial accumulator a record on a combined edge carries, copied: the envelope may
 * be applied again (a redelivery after a crash), so a pane must never share, and a later
 * merge update, the envelope's object.
 */
function partialOf(ctx: OperatorContext, v: unknown): unknown {
  return cloneValue(checkPartial(ctx, v).partial);
}

/** How many input records a partial stands for (what droppedLate counts when it is late). */
function partialRecords(ctx: OperatorContext, v: unknown): number {
  return checkPartial(ctx, v).records;
}
