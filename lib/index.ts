/** Sluice's public API: write a job with these, run it with `sluice` or on AWS. */
export { Job, DataStream, KeyedStream, WindowedStream, type CoGroupOptions } from './api/stream.ts';
export type { JobOptions } from './graph/logical.ts';
export { Windows, type TimeWindow, type WindowAssigner } from './api/windows.ts';
export { WatermarkStrategies, OutputTag, ManualClock, systemClock, type Clock, type Key, type WatermarkStrategy } from './api/types.ts';
export { valueState, listState, mapState, type ValueState, type ListState, type MapState, type StateOptions } from './api/state.ts';
export type {
  AggregateFunction,
  Collector,
  KeyedProcessFunction,
  KeyedCoProcessFunction,
  ProcessWindowFunction,
  ReduceFunction,
  WindowInfo,
} from './api/functions.ts';
export { Sinks, IdempotentSink, CollectSink, StdoutSink, JsonLinesFileSink, type Sink, type SinkBatch } from './api/sinks.ts';
export type { SourceOptions, SourceBinding } from './api/sources.ts';
export { EmbeddedRuntime, runJob, type EmbeddedOptions, type RuntimeStats } from './local/embedded.ts';
export { FaultInjector, type FaultPlanOptions } from './local/faults.ts';
export { startIngestServer } from './local/ingest-server.ts';
export { compareOutputs, assertExactlyOnce, canonicalJson } from './testing/checker.ts';
export * from './errors.ts';
