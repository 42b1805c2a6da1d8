/** Keyed process functions (one or two inputs): user code with keyed state and timers. */
import type { KeyedContext, OnTimerContext, TimerService } from '../api/functions.ts';
import type { StateSpec } from '../api/state.ts';
import type { Key, OutputTag } from '../api/types.ts';
import { bindStateHandles } from '../state/handles.ts';
import type { OperatorContext, StreamOperator, TimeDomain } from './contract.ts';

interface KeyedFunctionShape {
  readonly state?: StateSpec;
  onTimer?(timestamp: number, ctx: OnTimerContext<Key, unknown, StateSpec>): void;
}

/** One mutable context object per operator instance, re-pointed at each record: no allocation per record. */
function makeContext(op: OperatorContext, spec: StateSpec | undefined) {
  const timers: TimerService = {
    currentProcessingTime: () => op.clock.now(),
    currentWatermark: () => op.watermark(),
    registerEventTimeTimer: (t) => op.registerTimer('event', t),
    registerProcessingTimeTimer: (t) => op.registerTimer('processing', t),
    deleteEventTimeTimer: (t) => op.deleteTimer('event', t),
    deleteProcessingTimeTimer: (t) => op.deleteTimer('processing', t),
  };
  const ctx = {
    timestamp: 0,
    timeDomain: 'event' as TimeDomain,
    state: bindStateHandles(op, spec),
    timers,
    get key(): Key {
      return op.currentKey();
    },
    emit(value: unknown, timestamp?: number) {
      op.emit(value, timestamp ?? ctx.timestamp);
    },
    output<X>(tag: OutputTag<X>, value: X, timestamp?: number) {
      op.emit(value, timestamp ?? ctx.timestamp, tag.id);
    },
  };
  return ctx;
}

export function keyedProcessOperator(
  op: OperatorContext,
  fn: KeyedFunctionShape & { processElement(v: unknown, ctx: KeyedContext<Key, unknown, StateSpec>): void },
): StreamOperator {
  const ctx = makeContext(op, fn.state);
  return {
    processElement(r) {
      ctx.timestamp = r.timestamp;
      fn.processElement(r.value, ctx as unknown as KeyedContext<Key, unknown, StateSpec>);
    },
    onTimer(domain, time) {
      if (!fn.onTimer) return;
      ctx.timestamp = time;
      ctx.timeDomain = domain;
      fn.onTimer(time, ctx as unknown as OnTimerContext<Key, unknown, StateSpec>);
    },
  };
}

export function coProcessOperator(
  op: OperatorContext,
  fn: KeyedFunctionShape & {
    processElement1(v: unknown, ctx: KeyedContext<Key, unknown, StateSpec>): void;
    processElement2(v: unknown, ctx: KeyedContext<Key, unknown, StateSpec>): void;
  },
): StreamOperator {
  const ctx = makeContext(op, fn.state);
  return {
    processElement(r, input) {
      ctx.timestamp = r.timestamp;
      const c = ctx as unknown as KeyedContext<Key, unknown, StateSpec>;
      if (input === 0) fn.processElement1(r.value, c);
      else fn.processElement2(r.value, c);
    },
    onTimer(domain, time) {
      if (!fn.onTimer) return;
      ctx.timestamp = time;
      ctx.timeDomain = domain;
      fn.onTimer(time, ctx as unknown as OnTimerContext<Key, unknown, StateSpec>);
    },
  };
}
