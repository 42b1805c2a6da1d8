/** User function interfaces, in the spirit of Flink's DataStream API. */
import type { StateHandles, StateSpec } from './state.ts';
import type { Key, OutputTag } from './types.ts';
import type { TimeWindow } from './windows.ts';

export interface Collector<O> {
  /** Emit a record; its timestamp defaults to the input's (or the timer's / window's). */
  emit(value: O, timestamp?: number): void;
}

export interface TimerService {
  currentProcessingTime(): number;
  currentWatermark(): number;
  registerEventTimeTimer(time: number): void;
  registerProcessingTimeTimer(time: number): void;
  deleteEventTimeTimer(time: number): void;
  deleteProcessingTimeTimer(time: number): void;
}

export interface KeyedContext<K extends Key, O, S extends StateSpec> extends Collector<O> {
  readonly key: K;
  /** Event time of the record (or the timer's time in onTimer). */
  readonly timestamp: number;
  readonly state: StateHandles<S>;
  readonly timers: TimerService;
  /** Emit to a side output. */
  output<X>(tag: OutputTag<X>, value: X, timestamp?: number): void;
}

export interface OnTimerContext<K extends Key, O, S extends StateSpec> extends KeyedContext<K, O, S> {
  readonly timeDomain: 'event' | 'processing';
}

export interface KeyedProcessFunction<K extends Key, I, O, S extends StateSpec = {}> {
  readonly state?: S;
  processElement(value: I, ctx: KeyedContext<K, O, S>): void;
  onTimer?(timestamp: number, ctx: OnTimerContext<K, O, S>): void;
}

export interface KeyedCoProcessFunction<K extends Key, I1, I2, O, S extends StateSpec = {}> {
  readonly state?: S;
  processElement1(value: I1, ctx: KeyedContext<K, O, S>): void;
  processElement2(value: I2, ctx: KeyedContext<K, O, S>): void;
  onTimer?(timestamp: number, ctx: OnTimerContext<K, O, S>): void;
}

/** Incremental aggregation (Flink's AggregateFunction). `merge` is required for session windows. */
export interface AggregateFunction<I, A, R> {
  createAccumulator(): A;
  add(value: I, accumulator: A): A;
  getResult(accumulator: A): R;
  merge?(a: A, b: A): A;
}

export type ReduceFunction<T> = (a: T, b: T) => T;

export interface WindowInfo<K extends Key> {
  readonly key: K;
  readonly window: TimeWindow;
}

/** Full window function: sees every element of the window at once. */
export type ProcessWindowFunction<K extends Key, I, O> = (
  elements: readonly I[],
  info: WindowInfo<K>,
  out: Collector<O>,
) => void;

/** Coupled to an incremental aggregate: turns the result into the output record. */
export type WindowResultFunction<K extends Key, R, O> = (result: R, info: WindowInfo<K>) => O;

export type JoinFunction<L, R, O> = (left: L, right: R, info: WindowInfo<Key>) => O;
export type CoGroupFunction<K extends Key, L, R, O> = (
  lefts: readonly L[],
  rights: readonly R[],
  info: WindowInfo<K>,
  out: Collector<O>,
) => void;

export interface IntervalJoinContext<K extends Key, O> extends Collector<O> {
  readonly key: K;
  readonly leftTimestamp: number;
  readonly rightTimestamp: number;
}
export type IntervalJoinFunction<K extends Key, L, R, O> = (left: L, right: R, ctx: IntervalJoinContext<K, O>) => void;
