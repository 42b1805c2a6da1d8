/**
 * Tumbling and sliding windows without allowed lateness, stored as panes (as Arroyo
 * and Flink's old "pane" optimisation do). Time is cut into panes of length
 * g = gcd(size, slide); every window is a run of size / g panes. A record updates
 * only its pane (one accumulator), not each of the size / slide windows it belongs
 * to; a window's result is the merge of its panes when it fires.
 *
 * Used when each window is a single pane (tumbling windows, or a slide that is a
 * multiple of the size), and for sliding windows of an AggregateFunction with
 * merge(). Same results as the per-window operator (window.ts), including the firing
 * order: one event-time timer per (key, window end), time = end - 1, namespace ''.
 *
 * State: one field per key, `P` = [paneStart, contents, ...] sorted by start. Timers
 * form a chain per key: a new pane registers its first window end still to come;
 * a firing window registers the next end when a pane of the key lies in that window.
 * A pane is dropped when its last window has fired.
 */
import type { StreamRecord } from '../api/types.ts';
import type { OperatorContext, TimeDomain } from '../runtime/operator.ts';
import { cloneValue } from '../state/txn.ts';
import type { WindowOperator, WindowSpec } from './window.ts';
import { checkTimestamp, type FixedWindows, windowContents } from './window-state.ts';

const PANES = 'P';

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

const mod = (a: number, m: number) => {
  const r = a % m;
  return r < 0 ? r + m : r;
};

/** True when windows of this spec can be kept as panes (see the file comment). */
export function panesApply(spec: WindowSpec, w: FixedWindows): boolean {
  if (spec.allowedLatenessMs !== 0) return false;
  if (gcd(w.size, w.slide) === w.size) return true;
  return spec.fn.kind === 'aggregate' && spec.fn.agg.merge !== undefined;
}

export function paneWindowOperator(ctx: OperatorContext, spec: WindowSpec, w: FixedWindows): WindowOperator {
  const { size, slide, offset } = w;
  const g = gcd(size, slide);
  const single = g === size;
  const contents = windowContents(ctx, spec.fn, false);
  const lateTag = spec.lateTag;

  /** Latest window start at or before t. */
  const startAtOrBefore = (t: number) => t - mod(t - offset, slide);
  /** Earliest window start at or after t. */
  const startAtOrAfter = (t: number) => {
    const r = mod(t - offset, slide);
    return r === 0 ? t : t - r + slide;
  };
  /** The first end, among the windows [first, last] of a pane, whose firing is still to come. */
  const firstLiveEnd = (firstStart: number, wm: number) => {
    const e = firstStart + size;
    if (e - 1 > wm) return e;
    return e + Math.ceil((wm + 2 - e) / slide) * slide;
  };

  let cached = { pane: Number.NaN, lastStart: 0, firstStart: 0 };

  const op = {
    droppedLate: 0,

    processElement(r: StreamRecord): void {
      const t = r.timestamp;
      checkTimestamp(t);
      // Records mostly fall in the pane of the one before: skip the float modulo (fmod on
      // epoch milliseconds) then; the windows of a pane depend only on the pane.
      if (!(t >= cached.pane && t < cached.pane + g)) {
        const pane = t - mod(t - offset, g);
        cached = { pane, lastStart: startAtOrBefore(pane), firstStart: startAtOrAfter(pane + g - size) };
      }
      const { pane: p, lastStart, firstStart } = cached;
      // A slide longer than the size leaves gaps that belong to no window.
      if (firstStart > lastStart) return;
      const wm = ctx.watermark();
      if (lastStart + size - 1 <= wm) {
        if (lateTag !== undefined) ctx.emit(r.value, t, lateTag);
        else op.droppedLate++;
        return;
      }
      let panes = ctx.stateGet(PANES) as unknown[] | undefined;
      let fresh = true;
      if (panes === undefined) panes = [p, contents.first(r.value)];
      else {
        // Records mostly land in the newest pane: search from the end.
        let i = panes.length - 2;
        while (i >= 0 && (panes[i] as number) > p) i -= 2;
        if (i >= 0 && panes[i] === p) {
          panes[i + 1] = contents.add(panes[i + 1], r.value);
          fresh = false;
        } else panes.splice(i + 2, 0, p, contents.first(r.value));
      }
      ctx.stateSet(PANES, panes);
      // A pane that already existed has its chain of timers.
      if (fresh) ctx.registerTimer('event', firstLiveEnd(firstStart, wm) - 1);
    },

    onTimer(domain: TimeDomain, time: number): void {
      if (domain !== 'event') return;
      const panes = ctx.stateGet(PANES) as unknown[] | undefined;
      if (panes === undefined) return;
      const end = time + 1;
      const start = end - size;
      let acc: unknown;
      let any = false;
      for (let i = 0; i < panes.length; i += 2) {
        const p = panes[i] as number;
        if (p < start) continue;
        if (p >= end) break;
        // Merging must not change a pane that later windows still need.
        if (!any) acc = single ? panes[i + 1] : cloneValue(panes[i + 1]);
        else acc = contents.merge(acc, panes[i + 1]);
        any = true;
      }
      if (any) contents.fire(acc, ctx.currentKey(), { start, end });
      let drop = 0;
      while (drop < panes.length && startAtOrBefore(panes[drop] as number) + size <= end) drop += 2;
      if (drop === panes.length) {
        ctx.stateDelete(PANES);
        return;
      }
      if (drop > 0) {
        panes.splice(0, drop);
        ctx.stateSet(PANES, panes);
      }
      if ((panes[0] as number) < end + slide) ctx.registerTimer('event', end + slide - 1);
    },
  };
  return op;
}
