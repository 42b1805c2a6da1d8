/**
 * The keyed window operator: tumbling, sliding and session windows with an
 * incremental (aggregate, reduce) or full (process) window function.
 *
 * Semantics (Flink's event-time windows with EventTimeTrigger):
 * - state lives per (key, window) (or per pane, window-panes.ts): an aggregate keeps only
 *   its accumulator, a reduce the reduced value, a process function the list of elements;
 * - a window fires when the watermark reaches end - 1; its results carry timestamp
 *   end - 1; only windows that received a record exist, so empty windows never fire;
 * - one key's windows that fire at the same watermark fire by end, then start;
 * - a record is late for a window when end - 1 + allowedLateness <= watermark. It is
 *   added to every window it is not late for. With allowed lateness, a window's state
 *   is kept until end - 1 + lateness, and a record arriving after the window fired
 *   fires it again at once: that late firing emits the window's full updated result,
 *   an update of the earlier one, not a delta;
 * - a record late for all its windows goes to the late-data side output when one is
 *   set, otherwise it is dropped and counted in `droppedLate`.
 */
import type { StreamRecord } from '../api/types.ts';
import type { TimeWindow } from '../api/windows.ts';
import { combinesInput, type FixedWindows, fixedWindowsOf, panesApply, type WindowSpec } from '../graph/window-plan.ts';
import type { OperatorContext, TimeDomain } from './contract.ts';
import { paneWindowOperator } from './window-panes.ts';
import { sessionWindowOperator } from './window-session.ts';
import { checkTimestamp, decodeWindowKey, firstWindowStart, windowContents, WindowKeyCache, type WindowOperator } from './window-state.ts';

export function windowOperator(ctx: OperatorContext, spec: WindowSpec): WindowOperator {
  const w = fixedWindowsOf(spec.assigner);
  if (!w) return sessionWindowOperator(ctx, spec);
  // Whether the input carries partial aggregates is a function of the spec alone, the one
  // the compiler used to mark the edge (lib/graph/compile.ts): both sides agree.
  return panesApply(spec, w) ? paneWindowOperator(ctx, spec, w, combinesInput(spec)) : fixedWindowOperator(ctx, spec, w);
}

/**
 * Tumbling and sliding windows kept per window: a record's windows are known from its
 * timestamp alone. Used with allowed lateness, and for sliding windows whose function
 * cannot merge partial results (reduce, process, aggregate without merge).
 */
function fixedWindowOperator(ctx: OperatorContext, spec: WindowSpec, w: FixedWindows): WindowOperator {
  const contents = windowContents(ctx, spec.fn, spec.allowedLatenessMs > 0);
  const lateness = spec.allowedLatenessMs;
  const lateTag = spec.lateTag;
  const cache = new WindowKeyCache(w.size, ['w']);
  // A process function's window is the list of its records: appended (no copy of the list per batch).
  const appends = spec.fn.kind === 'process';

  const fire = (contentsValue: unknown, window: TimeWindow) => contents.fire(contentsValue, ctx.currentKey(), window);

  const op = {
    droppedLate: 0,

    processElement(r: StreamRecord): void {
      const t = r.timestamp;
      checkTimestamp(t);
      const wm = ctx.watermark();
      const first = firstWindowStart(t, w);
      let live = 0;
      // Ascending start: late firings of several windows come out by end, then start.
      for (let start = first; start <= t; start += w.slide) {
        const end = start + w.size;
        const fireAt = end - 1;
        if (fireAt + lateness <= wm) continue;
        live++;
        const [k, field] = cache.get(start);
        let first: boolean;
        let next: unknown;
        if (appends) first = ctx.stateAppend(field, r.value) === 1;
        else {
          const prev = ctx.stateGet(field);
          first = prev === undefined;
          next = first ? contents.first(r.value) : contents.add(prev, r.value);
          ctx.stateSet(field, next);
        }
        if (fireAt > wm) {
          // One timer per window, registered with its first element.
          if (first) ctx.registerTimer('event', fireAt, k);
        } else {
          // The window already fired (or would have): fire the update now, keep it until cleanup.
          fire(appends ? ctx.stateGet(field) : next, { start, end });
          ctx.registerTimer('event', fireAt + lateness, k);
        }
      }
      if (live === 0 && first <= t) {
        if (lateTag !== undefined) ctx.emit(r.value, t, lateTag);
        else op.droppedLate++;
      }
    },

    onTimer(domain: TimeDomain, time: number, ns: string): void {
      if (domain !== 'event') return;
      const field = 'w' + ns;
      const state = ctx.stateGet(field);
      if (state === undefined) return;
      const window = decodeWindowKey(ns);
      if (time === window.end - 1) {
        fire(state, window);
        if (lateness === 0) ctx.stateDelete(field);
        else ctx.registerTimer('event', time + lateness, ns);
      } else {
        // The cleanup timer at end - 1 + lateness.
        ctx.stateDelete(field);
      }
    },
  };
  return op;
}
