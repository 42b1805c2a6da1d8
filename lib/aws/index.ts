/**
 * Sluice on AWS (`sluice/aws`): the AWS sinks a job module writes to
 * (`AwsSinks.dynamodbUpsert`, `AwsSinks.s3Files`), and the Lambda handler factories
 * SluiceJob's functions are built from, for custom entries or tests.
 */
export { createOperatorHandler, type OperatorHandler, type OperatorHandlerConfig } from './operator/operator-handler.ts';
export type { GroupBackoffOptions } from './operator/group-backoff.ts';
export type { HandlerMetrics } from './handler-metrics.ts';
export { createIngestHandler, type IngestHandler, type IngestHandlerConfig } from './ingest/ingest-handler.ts';
export type { BackPressureOptions } from './ingest/ingest-backpressure.ts';
export { CloudWatchQueueAge, type QueueAgeSource } from './ingest/queue-age.ts';
export { DynamoDbIdempotencyStore, type DynamoDbIdempotencyStoreOptions, type IdempotencyStore } from './ingest/idempotency-store.ts';
export type { RememberedAnswer } from '../transport/idempotency.ts';
export type { ShedEvent } from '../transport/ingest-validation.ts';
export { createCheckpointHandler, type CheckpointHandler, type CheckpointHandlerConfig } from './checkpoint/checkpoint-handler.ts';
export type { Carry, Next } from './checkpoint/checkpoint-task.ts';
export type { QueueResolver } from './sqs/sqs-queues.ts';
export type { BlobStore } from '../checkpoint/storage.ts';
export { AwsAccounting, type OperationCounters, type OperationRow } from './cost/accounting.ts';
export type { PhysicalPlan, StagePlan, StageEdge, EdgeSource } from '../graph/compile.ts';
export { AwsSinks, S3FilesSink, DynamoDbUpsert } from './sinks/sinks.ts';
export { DynamoDbUpsertSink, SinkRecordError } from './sinks/dynamodb-upsert-sink.ts';
export { S3FileSink, readCommittedFiles, SinkNotBoundError, SinkManifestMissingError, type S3FileLocation } from './sinks/s3-file-sink.ts';
export {
  SinkRecordsRejectedError,
  type DynamoDbUpsertSinkOptions,
  type S3FileSinkOptions,
  type ResolvedUpsertOptions,
  type ResolvedS3FileSinkOptions,
  type KeyValue,
  type AwsBindableSink,
  type AwsSinkBinding,
  type AwsSinkResources,
} from './sinks/sink-options.ts';
export { stageQueueName, deadLetterQueueName, stateTableName, stackNameFor } from './naming.ts';
