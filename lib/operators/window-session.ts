/**
 * Session windows (merging windows), the session half of the window operator.
 *
 * Each record opens the proto-window [t, t + gap); a key's sessions that overlap or
 * touch it (a.start <= b.end && b.start <= a.end) merge into one, so a record can also
 * bridge two existing sessions. The key's open sessions are kept sorted in field `i`;
 * they never touch one another, so the sessions a record touches are contiguous there.
 * Merged contents: aggregate merge(), the reduce function, or list concatenation, in
 * start order (for a process function, the earlier session's elements come first).
 * Lateness is judged on the merged window, as Flink does: an old record that extends
 * a live session is not late.
 *
 * Without allowed lateness (the common case) sessions live in window-session-lazy.ts,
 * which does not move timers and fields on every extension; this file keeps sessions
 * that outlive their firing.
 */
import type { StreamRecord } from '../api/types.ts';
import type { TimeWindow } from '../api/windows.ts';
import type { OperatorContext, TimeDomain } from '../runtime/operator.ts';
import type { WindowOperator, WindowSpec } from './window.ts';
import { checkTimestamp, decodeWindowKey, windowContents, windowKey } from './window-state.ts';
import { lazySessionOperator } from './window-session-lazy.ts';

const INDEX = 'i';

export function sessionWindowOperator(ctx: OperatorContext, spec: WindowSpec): WindowOperator {
  if (spec.assigner.kind !== 'session') throw new TypeError('sessionWindowOperator: a session assigner');
  if (spec.allowedLatenessMs === 0) return lazySessionOperator(ctx, spec, spec.assigner.gap);
  const gap = spec.assigner.gap;
  const contents = windowContents(ctx, spec.fn, spec.allowedLatenessMs > 0);
  const lateness = spec.allowedLatenessMs;
  const lateTag = spec.lateTag;

  const fire = (state: unknown, window: TimeWindow) => contents.fire(state, ctx.currentKey(), window);

  /** Remove [start, end) from the key's session index. */
  const unindex = (start: number) => {
    const idx = ctx.stateGet(INDEX) as number[] | undefined;
    if (!idx) return;
    for (let i = 0; i < idx.length; i += 2) {
      if (idx[i] === start) {
        idx.splice(i, 2);
        break;
      }
    }
    if (idx.length) ctx.stateSet(INDEX, idx);
    else ctx.stateDelete(INDEX);
  };

  const op = {
    droppedLate: 0,

    processElement(r: StreamRecord): void {
      const t = r.timestamp;
      checkTimestamp(t);
      const wm = ctx.watermark();
      const idx = (ctx.stateGet(INDEX) as number[] | undefined) ?? [];
      let start = t;
      let end = t + gap;
      let from = -1;
      let to = -1;
      for (let i = 0; i < idx.length; i += 2) {
        if (idx[i] <= t + gap && t <= idx[i + 1]) {
          if (from < 0) from = i;
          to = i + 2;
          if (idx[i] < start) start = idx[i];
          if (idx[i + 1] > end) end = idx[i + 1];
        }
      }
      if (from < 0 && end - 1 + lateness <= wm) {
        if (lateTag !== undefined) ctx.emit(r.value, t, lateTag);
        else op.droppedLate++;
        return;
      }
      const k = windowKey(start, end);
      const field = 'w' + k;
      let state: unknown;
      if (from >= 0 && to - from === 2 && idx[from] === start && idx[from + 1] === end) {
        // The record falls inside one existing session: no merge.
        state = contents.add(ctx.stateGet(field), r.value);
        ctx.stateSet(field, state);
      } else {
        let merged: unknown;
        for (let i = from; i >= 0 && i < to; i += 2) {
          const oldKey = windowKey(idx[i], idx[i + 1]);
          const old = ctx.stateGet('w' + oldKey);
          if (old !== undefined) merged = merged === undefined ? old : contents.merge(merged, old);
          ctx.stateDelete('w' + oldKey);
          ctx.deleteTimer('event', idx[i + 1] - 1, oldKey);
          if (lateness > 0) ctx.deleteTimer('event', idx[i + 1] - 1 + lateness, oldKey);
        }
        state = merged === undefined ? contents.first(r.value) : contents.add(merged, r.value);
        ctx.stateSet(field, state);
        if (from >= 0) idx.splice(from, to - from, start, end);
        else {
          let at = 0;
          while (at < idx.length && idx[at] < start) at += 2;
          idx.splice(at, 0, start, end);
        }
        ctx.stateSet(INDEX, idx);
        if (end - 1 > wm) ctx.registerTimer('event', end - 1, k);
      }
      if (end - 1 <= wm) {
        // Within allowed lateness after the session's end: fire the update now.
        fire(state, { start, end });
        ctx.registerTimer('event', end - 1 + lateness, k);
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
        if (lateness > 0) {
          ctx.registerTimer('event', time + lateness, ns);
          return;
        }
      }
      ctx.stateDelete(field);
      unindex(window.start);
    },
  };
  return op;
}
