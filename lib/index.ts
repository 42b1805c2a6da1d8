/** Sluice's public API (`sluice`): write a job with these, run it with `sluice` or on the embedded runtime. */
export { Job, DataStream, KeyedStream, WindowedStream, JoinedWindow, IntervalJoined, ConnectedStreams, type CoGroupOptions } from './api/stream.ts';
export type { JobOptions, ParallelismOverride } from './api/logical.ts';
export { DataStreamSink } from './api/stream-sink.ts';
export { Windows, type TimeWindow, type WindowAssigner } from './api/windows.ts';
export {
  WatermarkStrategies,
  OutputTag,
  ManualClock,
  systemClock,
  MIN_WATERMARK,
  MAX_WATERMARK,
  type Clock,
  type Key,
  type KeySelector,
  type StreamRecord,
  type WatermarkStrategy,
} from './api/types.ts';
export {
  valueState,
  listState,
  mapState,
  type ValueState,
  type ListState,
  type MapState,
  type StateOptions,
  type StateSpec,
  type StateHandles,
  type DeclaredStateHandles,
  type UntypedStateHandle,
  type UntypedStateHandles,
  type StateDescriptor,
  type ValueStateDescriptor,
  type ListStateDescriptor,
  type MapStateDescriptor,
} from './api/state.ts';
export type {
  AggregateFunction,
  CoGroupFunction,
  Collector,
  IntervalJoinContext,
  IntervalJoinFunction,
  JoinFunction,
  KeyedContext,
  KeyedCoProcessFunction,
  KeyedProcessFunction,
  OnTimerContext,
  ProcessWindowFunction,
  ReduceFunction,
  TimerService,
  WindowInfo,
  WindowResultFunction,
} from './api/functions.ts';
export { Sinks, IdempotentSink, CollectSink, StdoutSink, JsonLinesFileSink, SinkRecordsRejectedError, type Sink, type SinkBatch, type TransactionalSink } from './api/sinks.ts';
export type { SourceOptions, SourceBinding, IdleAdvance, LoadShedding } from './api/sources.ts';
export { isJob, type JobParams } from './api/job-module.ts';
export { EmbeddedRuntime, runJob, type EmbeddedOptions, type RuntimeStats } from './local/embedded.ts';
export type { StageQueue } from './local/embedded-stats.ts';
export type { PhysicalPlan, StagePlan, StageEdge, EdgeSource } from './graph/compile.ts';
export type { RejectedInput } from './transport/sources.ts';
export type { StoredDeadLetter } from './checkpoint/dead-letter-store.ts';
export type { DeadLetter, DeadTimer } from './transport/envelope.ts';
export { startIngestServer, type IngestServer, type IngestServerOptions } from './local/ingest-server.ts';
export type { IngestRejections } from './local/ingest-bounds.ts';
export type { IngestTarget, OfferResult, IngestPressure, ShedCount } from './local/ingest-target.ts';
export type { ShedDecision, ShedReason } from './transport/load-shedding.ts';
export type { KeyedOffer } from './local/ingest-keys.ts';
export {
  IngestClient,
  IngestRefusedError,
  publishEvents,
  parseRetryAfter,
  retryDelay,
  type IngestClientOptions,
  type IngestReply,
  type IngestResult,
  type SendOptions,
  type SignableRequest,
} from './transport/ingest-client.ts';
export type { RememberedAnswer } from './transport/idempotency.ts';
export type { ShedEvent } from './transport/ingest-validation.ts';
export * from './errors.ts';
/** zod, the schema library of `job.ingest(name, { schema })`: the same copy Sluice validates with. */
export { z } from 'zod';
export { FaultInjector, type FaultPlanOptions } from './local/faults.ts';
export { compareOutputs, assertExactlyOnce, canonicalJson } from './testing/checker.ts';
