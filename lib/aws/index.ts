/**
 * Sluice on AWS (`sluice/aws`): the Lambda handler factories SluiceJob's functions are
 * built from, for custom entries or tests, and the AWS sinks (also reachable as
 * `Sinks.dynamodbUpsert` and `Sinks.s3Files` from `sluice`).
 */
export { createOperatorHandler, type OperatorHandler, type OperatorHandlerConfig } from './operator-handler.ts';
export { createIngestHandler, type IngestHandler, type IngestHandlerConfig } from './ingest-handler.ts';
export { DynamoDbIdempotencyStore, type DynamoDbIdempotencyStoreOptions, type IdempotencyStore } from './idempotency-store.ts';
export { createCheckpointHandler, type CheckpointHandler, type CheckpointHandlerConfig } from './checkpoint-handler.ts';
export { S3FilesSink, DynamoDbUpsert } from '../api/aws-sinks.ts';
export { DynamoDbUpsertSink, SinkRecordError } from './dynamodb-upsert-sink.ts';
export { S3FileSink, readCommittedFiles, SinkNotBoundError, SinkManifestMissingError, type S3FileLocation } from './s3-file-sink.ts';
export { SinkRecordsRejectedError } from './sink-options.ts';
export { stageQueueName, deadLetterQueueName, stateTableName, stackNameFor } from './naming.ts';
