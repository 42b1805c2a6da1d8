/**
 * Session windows without allowed lateness: the same sessions as window-session.ts
 * (each record opens [t, t + gap); a key's sessions that overlap or touch merge; a
 * session fires once the watermark reaches end - 1, with timestamp end - 1), kept so
 * that the usual case, a record extending the key's open session, costs one state read
 * and write and no timer work.
 *
 * State: one field per key, `S` = [start, end, contents, ...], sessions sorted by start,
 * never touching one another. A process function's sessions keep their records out of
 * `S`, appended to a field of their own, `R${id}` (in `S` the id, a number, where the
 * contents would be): the id is the time of the session's first record, which no other
 * live session of the key can hold (a session keeps its first record's time). Inside `S`,
 * each batch's first record would copy every record of the key's sessions.
 *
 * Timers are lazy: a session registers one event-time timer at its end - 1 when it is
 * created (namespace ''), and nothing when it grows or merges. When a timer fires, the
 * key's sessions whose end - 1 is at or before it fire; every other session gets a timer
 * at its current end - 1 (a no-op when it has one). So each session always has a timer
 * at or before its end - 1, fires exactly when the watermark reaches its end - 1, and a
 * key's sessions fire by end, as they would with one timer per session.
 */
import type { StreamRecord } from '../api/types.ts';
import type { OperatorContext, TimeDomain } from './contract.ts';
import type { WindowSpec } from '../graph/window-plan.ts';
import { checkTimestamp, recordsField, windowContents, type WindowOperator } from './window-state.ts';

const SESSIONS = 'S';

export function lazySessionOperator(ctx: OperatorContext, spec: WindowSpec, gap: number): WindowOperator {
  const contents = windowContents(ctx, spec.fn, false);
  const lateTag = spec.lateTag;
  /** A process function's sessions keep their records in fields of their own (recordsField). */
  const ownFields = spec.fn.kind === 'process';

  /** A session's contents in `S` (a process function's: its id) with the record's value added. */
  const add = (c: unknown, v: unknown): unknown => {
    if (!ownFields) return contents.add(c, v);
    ctx.stateAppend(recordsField(c as number), v);
    return c;
  };
  /** Sessions `b` merged into `a` (`a` the earlier): a process function's records move to `a`'s field. */
  const merge = (a: unknown, b: unknown): unknown => {
    if (!ownFields) return contents.merge(a, b);
    const from = recordsField(b as number);
    const moved = (ctx.stateGet(from) as unknown[] | undefined) ?? [];
    ctx.stateDelete(from);
    for (const v of moved) ctx.stateAppend(recordsField(a as number), v);
    return a;
  };
  /** A session's contents to fire: a process function's records read from their field (a copy), which is then deleted. */
  const take = (c: unknown): unknown => {
    if (!ownFields) return c;
    const field = recordsField(c as number);
    const records = (ctx.stateGet(field) as unknown[] | undefined) ?? [];
    ctx.stateDelete(field);
    return records;
  };

  const op = {
    droppedLate: 0,

    processElement(r: StreamRecord): void {
      const t = r.timestamp;
      checkTimestamp(t);
      const s = (ctx.stateGet(SESSIONS) as unknown[] | undefined) ?? [];
      // The sessions [start, end) touching [t, t + gap): start <= t + gap and t <= end.
      // They are contiguous; records mostly extend the newest, so search from the end.
      let to = s.length;
      while (to > 0 && (s[to - 3] as number) > t + gap) to -= 3;
      let from = to;
      while (from > 0 && t <= (s[from - 2] as number)) from -= 3;
      if (from === to) {
        const end = t + gap;
        if (end - 1 <= ctx.watermark()) {
          if (lateTag !== undefined) ctx.emit(r.value, t, lateTag);
          else op.droppedLate++;
          return;
        }
        if (ownFields) {
          ctx.stateAppend(recordsField(t), r.value);
          s.splice(to, 0, t, end, t);
        } else s.splice(to, 0, t, end, contents.first(r.value));
        ctx.registerTimer('event', end - 1);
      } else {
        const start = Math.min(s[from] as number, t);
        const end = Math.max(s[to - 2] as number, t + gap);
        if (to - from === 3) {
          // The usual case: the record extends (or falls inside) one session.
          s[from] = start;
          s[from + 1] = end;
          s[from + 2] = add(s[from + 2], r.value);
        } else {
          // It bridges several: merge them (earlier contents first), then add the record.
          let merged = s[from + 2];
          for (let i = from + 5; i < to; i += 3) merged = merge(merged, s[i]);
          s.splice(from, to - from, start, end, add(merged, r.value));
        }
      }
      ctx.stateSet(SESSIONS, s);
    },

    onTimer(domain: TimeDomain, time: number): void {
      if (domain !== 'event') return;
      const s = ctx.stateGet(SESSIONS) as unknown[] | undefined;
      if (s === undefined) return;
      let kept = 0;
      for (let i = 0; i < s.length; i += 3) {
        const end = s[i + 1] as number;
        if (end - 1 <= time) {
          contents.fire(take(s[i + 2]), ctx.currentKey(), { start: s[i] as number, end });
        } else {
          ctx.registerTimer('event', end - 1);
          if (kept !== i) {
            s[kept] = s[i];
            s[kept + 1] = s[i + 1];
            s[kept + 2] = s[i + 2];
          }
          kept += 3;
        }
      }
      if (kept === s.length) return;
      if (kept === 0) ctx.stateDelete(SESSIONS);
      else {
        s.length = kept;
        ctx.stateSet(SESSIONS, s);
      }
    },
  };
  return op;
}
