/**
 * Windowed join of two keyed inputs (input 0 = left, 1 = right) on equal keys.
 * Both sides are buffered per window (fields `l${windowKey}` / `r${windowKey}`, in
 * arrival order); when the watermark reaches end - 1 the window fires with timestamp
 * end - 1 and its buffers are purged:
 * - 'pairs': join(left, right, {key, window}) for every pair, left order then right order;
 * - 'coGroup': coGroup(lefts, rights, info, out) once per window with a record on either
 *   side, or (`inner`) on both sides.
 * Tumbling and sliding windows only. There is no allowed lateness: a record late for
 * all its windows (end - 1 <= watermark) is dropped and counted in `droppedLate`.
 */
import type { Collector, WindowInfo } from '../api/functions.ts';
import type { Key, StreamRecord } from '../api/types.ts';
import { JobDefinitionError } from '../errors.ts';
import type { NodeSpec } from '../api/logical.ts';
import type { OperatorContext, TimeDomain } from './contract.ts';
import { fixedWindowsOf } from '../graph/window-plan.ts';
import { checkTimestamp, firstWindowStart, WindowKeyCache, type WindowOperator } from './window-state.ts';

export function windowJoinOperator(ctx: OperatorContext, spec: Extract<NodeSpec, { kind: 'windowJoin' }>): WindowOperator {
  const w = fixedWindowsOf(spec.assigner);
  if (!w) {
    throw new JobDefinitionError(ctx.node.name, 'a tumbling or sliding window for a window join', 'session windows (merging windows are not supported in joins)');
  }
  const cache = new WindowKeyCache(w.size, ['l', 'r']);
  const fn = spec.fn;
  // Pairs need both sides too: an empty side gives no pair.
  const bothSides = fn.kind === 'pairs' || fn.inner;
  // One collector for every firing, not a closure per (key, window): the firing's
  // timestamp is the default of what coGroup emits.
  let firingTs = 0;
  const out: Collector<unknown> = { emit: (value, timestamp) => ctx.emit(value, timestamp ?? firingTs) };

  const op = {
    droppedLate: 0,

    processElement(r: StreamRecord, input: number): void {
      const t = r.timestamp;
      checkTimestamp(t);
      const wm = ctx.watermark();
      const first = firstWindowStart(t, w);
      let live = 0;
      for (let start = first; start <= t; start += w.slide) {
        const fireAt = start + w.size - 1;
        if (fireAt <= wm) continue;
        live++;
        const names = cache.get(start);
        const field = input === 0 ? names[1] : names[2];
        // The side's list grows in the batch's overlay: no copy of it per record.
        if (ctx.stateAppend(field, r.value) === 1) {
          // At most twice per window (once per side); registering again is a no-op. The
          // time names the window (its size is fixed), so no namespace is needed.
          ctx.registerTimer('event', fireAt);
        }
      }
      if (live === 0 && first <= t) op.droppedLate++;
    },

    onTimer(domain: TimeDomain, time: number): void {
      if (domain !== 'event') return;
      const start = time + 1 - w.size;
      const [, lf, rf] = cache.get(start);
      if (bothSides && !(hasRecords(ctx.statePeek(lf)) && hasRecords(ctx.statePeek(rf)))) {
        // Nothing to call: purge without stateGet's copies of lists no one reads (in
        // Nexmark Q8, about 60 % of firings: persons who opened no auction, and sellers
        // registered in earlier windows).
        ctx.stateDelete(lf);
        ctx.stateDelete(rf);
        return;
      }
      const lefts = (ctx.stateGet(lf) as unknown[] | undefined) ?? [];
      const rights = (ctx.stateGet(rf) as unknown[] | undefined) ?? [];
      if (lefts.length === 0 && rights.length === 0) return;
      const ts = time;
      const info: WindowInfo<Key> = { key: ctx.currentKey(), window: { start, end: time + 1 } };
      if (fn.kind === 'pairs') {
        for (const l of lefts) for (const r of rights) ctx.emit(fn.join(l, r, info), ts);
      } else {
        firingTs = ts;
        fn.coGroup(lefts, rights, info, out);
      }
      ctx.stateDelete(lf);
      ctx.stateDelete(rf);
    },
  };
  return op;
}

function hasRecords(side: unknown): boolean {
  return side !== undefined && (side as unknown[]).length > 0;
}
