/**
 * Sluice's test kit (`sluice/testing`): what a job's own tests need, on the embedded
 * runtime and against local AWS servers.
 *
 * - Run a job in process: `runJob` / `EmbeddedRuntime` with `Sinks.collect()` sinks, an
 *   injectable `ManualClock`, and a seeded `FaultInjector` that crashes partitions
 *   between any two steps of a batch.
 * - Check results: `compareOutputs` / `assertExactlyOnce` (lost, duplicated, unexpected
 *   and, with `orderKey`, per-key out-of-order records against a reference), `readJsonLines`.
 * - Local AWS: `openLocalAws()` starts DynamoDB Local and the SQS/S3 emulator on loopback
 *   (or uses the servers AWS_ENDPOINT_URL_* name), `LocalAwsRuntime` runs a job through
 *   the real Lambda handlers against them.
 */
export { CollectSink } from '../api/sinks.ts';
export { ManualClock, systemClock, type Clock } from '../api/types.ts';
export { EmbeddedRuntime, runJob, type EmbeddedOptions, type RuntimeStats } from '../local/embedded.ts';
export { FaultInjector, mulberry32, type CrashPoint, type FaultPlanOptions } from '../local/faults.ts';
export { compareOutputs, assertExactlyOnce, canonicalJson, type Comparison, type CompareOptions, type DuplicatedRecord, type OrderViolation } from './checker.ts';
export { readJsonLines } from './jsonl.ts';
export { openLocalAws, localAwsAt, type LocalAwsEnvironment, type ServiceEndpoint } from './local-aws/endpoints.ts';
export { startDynamoDbLocal, startFauxqs, LOCAL_CREDENTIALS, LOCAL_REGION, type LocalServer } from './local-aws/servers.ts';
export { LocalAwsRuntime, type LocalAwsOptions, type LocalAwsRunResult, type StageReport, type DeadLetterReport } from './local-aws/runner.ts';
export type { LocalAwsCheckpointOptions } from './local-aws/checkpointing.ts';
export type { EventSourceMetrics } from './local-aws/event-source.ts';
export type { CostEstimate, CostLine, LambdaUsage } from '../aws/cost/prices.ts';
export type { AwsAccounting, OperationCounters, OperationRow } from '../aws/cost/accounting.ts';
export type { DeadLetterMessage } from '../aws/sqs/sqs-codec.ts';
export type { DeadLetter, DeadTimer } from '../transport/envelope.ts';
export type { RejectedInput } from '../transport/sources.ts';
export type { PhysicalPlan, StagePlan, StageEdge, EdgeSource } from '../graph/compile.ts';
