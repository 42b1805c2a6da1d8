/**
 * Session windows (merging windows) with allowed lateness: sessions that outlive their
 * firing. Without allowed lateness (the common case) sessions live in
 * window-session-lazy.ts, which does not move timers on every extension.
 *
 * Each record opens the proto-window [t, t + gap); a key's sessions that overlap or
 * touch it (a.start <= b.end && b.start <= a.end) merge into one, so a record can also
 * bridge two existing sessions. Merged contents: aggregate merge(), the reduce function,
 * or the element lists one after the other, in start order (for a process function, the
 * earlier session's elements come first). Lateness is judged on the merged window, as
 * Flink does: an old record that extends a live session is not late.
 *
 * State: field `I`, the key's open sessions as [start, end, id, ...] sorted by start; they
 * never touch one another, so the sessions a record touches are contiguous there. A
 * session's contents live in `C${id}`, its id being the time of its first record, which
 * no other live session of the key can hold: the field keeps its name while the session
 * grows and when later sessions merge into it (Flink's "state window" of a merging
 * window), so a process function's records are appended, not copied per record.
 *
 * Timers: namespace windowKey(start, end), at end - 1 (the firing) and end - 1 + lateness
 * (the cleanup); a session that changes bounds moves its timers.
 */
import type { StreamRecord } from '../api/types.ts';
import type { TimeWindow } from '../api/windows.ts';
import type { OperatorContext, TimeDomain } from './contract.ts';
import type { WindowSpec } from '../graph/window-plan.ts';
import { checkTimestamp, decodeWindowKey, windowContents, windowKey, type WindowOperator } from './window-state.ts';
import { lazySessionOperator } from './window-session-lazy.ts';

const INDEX = 'I';

/** The field of the session with this id's contents. */
export function sessionField(id: number): string {
  return 'C' + id;
}

export function sessionWindowOperator(ctx: OperatorContext, spec: WindowSpec): WindowOperator {
  if (spec.assigner.kind !== 'session') throw new TypeError('sessionWindowOperator: a session assigner');
  if (spec.allowedLatenessMs === 0) return lazySessionOperator(ctx, spec, spec.assigner.gap);
  const gap = spec.assigner.gap;
  const contents = windowContents(ctx, spec.fn, true);
  const lateness = spec.allowedLatenessMs;
  const lateTag = spec.lateTag;
  // A process function's session is the list of its records: appended, not rewritten.
  const appends = spec.fn.kind === 'process';

  /** Add a record to the session with this id (the first one when it has none). */
  const add = (id: number, value: unknown): void => {
    const field = sessionField(id);
    if (appends) ctx.stateAppend(field, value);
    else {
      const prev = ctx.stateGet(field);
      ctx.stateSet(field, prev === undefined ? contents.first(value) : contents.add(prev, value));
    }
  };
  /** Merge session `from`'s contents into session `into`'s (the earlier one) and drop `from`'s field. */
  const mergeInto = (into: number, from: number): void => {
    const source = sessionField(from);
    const moved = ctx.stateGet(source);
    ctx.stateDelete(source);
    if (moved === undefined) return;
    const target = sessionField(into);
    if (appends) for (const v of moved as unknown[]) ctx.stateAppend(target, v);
    else {
      const kept = ctx.stateGet(target);
      ctx.stateSet(target, kept === undefined ? moved : contents.merge(kept, moved));
    }
  };
  /** Fire a session: the function sees a copy (windowContents, retained), so the stored contents can be peeked. */
  const fire = (id: number, window: TimeWindow): void => {
    const state = ctx.statePeek(sessionField(id));
    if (state !== undefined) contents.fire(state, ctx.currentKey(), window);
  };

  /** The key's index: [start, end, id, ...] per live session. */
  const index = (): number[] => (ctx.stateGet(INDEX) as number[] | undefined) ?? [];

  const op = {
    droppedLate: 0,

    processElement(r: StreamRecord): void {
      const t = r.timestamp;
      checkTimestamp(t);
      const wm = ctx.watermark();
      const idx = index();
      let start = t;
      let end = t + gap;
      let from = -1;
      let to = -1;
      for (let i = 0; i < idx.length; i += 3) {
        if (idx[i] <= t + gap && t <= idx[i + 1]) {
          if (from < 0) from = i;
          to = i + 3;
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
      const id = from < 0 ? t : idx[from + 2];
      if (from >= 0 && to - from === 3 && idx[from] === start && idx[from + 1] === end) {
        // The record falls inside one existing session: no merge, no new timers.
        add(id, r.value);
      } else {
        for (let i = from; i >= 0 && i < to; i += 3) {
          if (i > from) mergeInto(id, idx[i + 2]);
          const oldKey = windowKey(idx[i], idx[i + 1]);
          ctx.deleteTimer('event', idx[i + 1] - 1, oldKey);
          ctx.deleteTimer('event', idx[i + 1] - 1 + lateness, oldKey);
        }
        add(id, r.value);
        if (from >= 0) idx.splice(from, to - from, start, end, id);
        else {
          let at = 0;
          while (at < idx.length && idx[at] < start) at += 3;
          idx.splice(at, 0, start, end, id);
        }
        ctx.stateSet(INDEX, idx);
        if (end - 1 > wm) ctx.registerTimer('event', end - 1, k);
      }
      if (end - 1 <= wm) {
        // Within allowed lateness after the session's end: fire the update now.
        fire(id, { start, end });
        ctx.registerTimer('event', end - 1 + lateness, k);
      }
    },

    onTimer(domain: TimeDomain, time: number, ns: string): void {
      if (domain !== 'event') return;
      const window = decodeWindowKey(ns);
      const idx = index();
      let at = 0;
      while (at < idx.length && !(idx[at] === window.start && idx[at + 1] === window.end)) at += 3;
      if (at === idx.length) return;
      const id = idx[at + 2];
      if (time === window.end - 1) {
        fire(id, window);
        ctx.registerTimer('event', time + lateness, ns);
        return;
      }
      // The cleanup timer at end - 1 + lateness.
      ctx.stateDelete(sessionField(id));
      idx.splice(at, 3);
      if (idx.length) ctx.stateSet(INDEX, idx);
      else ctx.stateDelete(INDEX);
    },
  };
  return op;
}
