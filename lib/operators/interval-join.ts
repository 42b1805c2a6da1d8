/**
 * Interval join (Flink semantics): left l and right r with the same key join when
 * l.ts + lower <= r.ts <= l.ts + upper, both bounds inclusive.
 *
 * Each side is buffered by timestamp (fields `L${time}` / `R${time}`, lists in arrival
 * order; the time encoding sorts like numbers). An arriving record is joined against
 * the other side's buffer (in timestamp order), then buffered until no partner can
 * arrive any more: a left record until the watermark reaches l.ts + upper, a right
 * record until it reaches r.ts - lower (cleanup timers, namespaces 'L' and 'R').
 * A record with ts <= watermark is late: partners of it may already have been cleaned
 * up, so it is dropped (counted in `droppedLate`) rather than joined incompletely.
 */
import type { IntervalJoinContext } from '../api/functions.ts';
import type { Key, StreamRecord } from '../api/types.ts';
import { JobDefinitionError } from '../errors.ts';
import type { NodeSpec } from '../api/logical.ts';
import type { OperatorContext, TimeDomain } from './contract.ts';
import { checkTimestamp, decodeTime, encodeTime, type WindowOperator } from './window-state.ts';

export function intervalJoinOperator(ctx: OperatorContext, spec: Extract<NodeSpec, { kind: 'intervalJoin' }>): WindowOperator {
  const { lowerMs: lower, upperMs: upper, fn } = spec;
  if (!Number.isSafeInteger(lower) || !Number.isSafeInteger(upper) || lower > upper) {
    throw new JobDefinitionError(ctx.node.name, 'integer bounds lowerMs <= upperMs', `between(${lower}, ${upper})`);
  }

  // One context object, re-pointed for each pair: no allocation per output.
  const jctx = {
    leftTimestamp: 0,
    rightTimestamp: 0,
    get key(): Key {
      return ctx.currentKey();
    },
    emit(value: unknown, timestamp?: number) {
      ctx.emit(value, timestamp ?? Math.max(jctx.leftTimestamp, jctx.rightTimestamp));
    },
  };
  const jc = jctx as IntervalJoinContext<Key, unknown>;

  const op = {
    droppedLate: 0,

    processElement(r: StreamRecord, input: number): void {
      const t = r.timestamp;
      checkTimestamp(t);
      const wm = ctx.watermark();
      if (t <= wm) {
        op.droppedLate++;
        return;
      }
      const isLeft = input === 0;
      // Partner timestamps: r.ts in [l.ts + lower, l.ts + upper], l.ts in [r.ts - upper, r.ts - lower].
      const lo = isLeft ? t + lower : t - upper;
      const hi = isLeft ? t + upper : t - lower;
      for (const [field, values] of ctx.stateFields(isLeft ? 'R' : 'L')) {
        const other = decodeTime(field, 1);
        if (other < lo) continue;
        if (other > hi) break;
        for (const v of values as unknown[]) {
          if (isLeft) {
            jctx.leftTimestamp = t;
            jctx.rightTimestamp = other;
            fn(r.value, v, jc);
          } else {
            jctx.leftTimestamp = other;
            jctx.rightTimestamp = t;
            fn(v, r.value, jc);
          }
        }
      }
      const cleanupAt = isLeft ? t + upper : t - lower;
      // With negative bounds every partner may already be here: nothing to keep.
      if (cleanupAt <= wm) return;
      const side = isLeft ? 'L' : 'R';
      const field = side + encodeTime(t);
      if (ctx.stateAppend(field, r.value) === 1) ctx.registerTimer('event', cleanupAt, side);
    },

    onTimer(domain: TimeDomain, time: number, ns: string): void {
      if (domain !== 'event') return;
      if (ns === 'L') ctx.stateDelete('L' + encodeTime(time - upper));
      else if (ns === 'R') ctx.stateDelete('R' + encodeTime(time + lower));
    },
  };
  return op;
}
