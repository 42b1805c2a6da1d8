/**
 * Least-privilege grants, written out instead of CDK's grant helpers where those add
 * wildcard actions (`kms:GenerateDataKey*`, `kms:ReEncrypt*`) or more than a function
 * uses. Each grant names exact actions on exact resources; table access is limited to
 * the function's own partition keys (dynamodb:LeadingKeys), bucket access to a prefix.
 */
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { signalsPk } from '../lib/aws/checkpoint/checkpoint-acks.ts';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';

/**
 * What a stage's partitions do on the table (lib/aws/dynamodb/dynamodb-state.ts,
 * record-attempts.ts): recover (GetItem, Query), commit (TransactWriteItems is
 * authorised per item as Put/Update/Delete/ConditionCheck), clear the outbox and the
 * redo log (BatchWriteItem), count record attempts (PutItem). No Scan: with
 * ForAllValues a request without a partition key would pass the LeadingKeys condition.
 */
export const STAGE_TABLE_ACTIONS = [
  'dynamodb:GetItem',
  'dynamodb:Query',
  'dynamodb:PutItem',
  'dynamodb:UpdateItem',
  'dynamodb:DeleteItem',
  'dynamodb:ConditionCheckItem',
  'dynamodb:BatchWriteItem',
] as const;

/** Checkpoint acks (lib/aws/checkpoint/checkpoint-acks.ts): created once per epoch and partition (conditional PutItem). */
export const STAGE_ACK_TABLE_ACTIONS = ['dynamodb:PutItem'] as const;

/**
 * The ingest function waking the coordinator (lib/aws/checkpoint/checkpoint-wakeup.ts): touch the
 * activity item (UpdateItem on `${job}#a`), read the lease item (GetItem on `${job}#c`).
 */
export const WAKE_TABLE_ACTIONS = { activity: ['dynamodb:UpdateItem'], lease: ['dynamodb:GetItem'] } as const;

/**
 * The ingest function's Idempotency-Keys (lib/aws/ingest/idempotency-store.ts): claim (conditional
 * PutItem, the old item returned on conflict, else read), record the answer (UpdateItem),
 * release a claim that enqueued nothing (DeleteItem). Only the key items, `${job}#k#*`.
 */
export const INGEST_KEY_TABLE_ACTIONS = ['dynamodb:PutItem', 'dynamodb:GetItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem'] as const;

export function ingestKeyLeadingKeys(job: string): string[] {
  return [`${job}#k#*`];
}

/** Checkpoint pointers and coordinator records: read, compare-and-set (lib/aws/dynamodb/dynamodb-pointers.ts). */
export const COORDINATOR_TABLE_ACTIONS = ['dynamodb:GetItem', 'dynamodb:PutItem'] as const;

/**
 * `sluice checkpoints|savepoint|restore --target aws` (SluiceJob.grantOperate) on the
 * table: the coordinator's items (pointer, record, lease, savepoint request: read,
 * compare-and-set), the activity item (touched after a restore), and every partition's
 * control and state items (a restore reads each head, queries and rewrites the partition
 * with BatchWriteItem, sets the head with a conditional PutItem; the input log replayed
 * is queried from the control items).
 */
export const OPERATE_TABLE_ACTIONS = ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:BatchWriteItem'] as const;

export function operateLeadingKeys(job: string): string[] {
  return [...coordinatorLeadingKeys(job), signalsPk(job), `${job}#p#*`, `${job}#s#*`];
}

/** What a restore does to the stages' consumers (lib/aws/restore/job-control.ts): find, disable, enable and watch the event source mappings. */
export const OPERATE_MAPPING_ACTIONS = ['lambda:GetEventSourceMapping', 'lambda:UpdateEventSourceMapping'] as const;

/** Input log truncation (lib/aws/operator/input-log.ts): list a source partition's segment items, delete them. */
export const INPUT_LOG_TRUNCATE_ACTIONS = ['dynamodb:Query', 'dynamodb:BatchWriteItem'] as const;

/** The control items of the partitions of stage `stage` (where its input log segments are named). */
export function partitionControlKeys(job: string, stage: number): string[] {
  return [`${job}#p#${stage}#*`];
}

/**
 * The partition keys of stage `stage` (layouts in lib/aws/dynamodb/dynamodb-layout.ts and
 * record-attempts.ts): state per key group, control items per partition, record
 * attempts per partition. State is per stage, not per partition (rescaling moves key
 * groups), so the finest practical scope is the stage.
 */
export function stageLeadingKeys(job: string, stage: number): string[] {
  return [`${job}#s#${stage}#*`, `${job}#p#${stage}#*`, `${job}#f#${stage}#*`];
}

/** The checkpoint coordinator's items (lib/aws/dynamodb/dynamodb-pointers.ts). */
export function coordinatorLeadingKeys(job: string): string[] {
  return [`${job}#c`];
}

/** Bucket prefixes (keys under `${job}/`, see lib/aws/sqs/sqs-transport.ts and lib/checkpoint). */
export function bucketPrefixes(job: string) {
  return {
    /** Oversized envelopes (claim check): the operator's blob store has prefix `${job}/`, its keys start `spill/${job}/`. */
    spill: `${job}/spill/`,
    snapshots: `${job}/snapshots/`,
    /** Logged source input (lib/aws/operator/input-log.ts): written by source stages, deleted by the coordinator's truncation. */
    inputLog: `${job}/input-log/`,
    manifests: `${job}/manifests/`,
    checkpoints: `${job}/checkpoints/`,
    /** Savepoints copied out of the chain (lib/aws/restore/savepoints.ts): written by the coordinator, never deleted by it. */
    savepoints: `${job}/savepoints/`,
  } as const;
}

export function grantTable(grantee: iam.IGrantable, table: dynamodb.ITable, actions: readonly string[], leadingKeys: readonly string[], key?: kms.IKey): iam.Grant {
  const grant = iam.Grant.addToPrincipal({
    grantee,
    actions: [...actions],
    resourceArns: [table.tableArn],
    conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [...leadingKeys] } },
  });
  return key ? grant.combine(grantKey(grantee, key, ['kms:Decrypt', 'kms:Encrypt', 'kms:GenerateDataKey', 'kms:DescribeKey'])) : grant;
}

/**
 * Objects under prefixes. ListBucket (on the whole bucket, which belongs to this job
 * alone) is what makes S3 answer 404 rather than 403 for a missing key: the blob store
 * reads a key before writing it and must tell "absent" from "denied".
 */
export function grantObjects(grantee: iam.IGrantable, bucket: s3.IBucket, prefixes: readonly string[], access: { read?: boolean; write?: boolean; delete?: boolean }, key?: kms.IKey): iam.Grant {
  const actions = [...(access.read ? ['s3:GetObject'] : []), ...(access.write ? ['s3:PutObject'] : []), ...(access.delete ? ['s3:DeleteObject'] : [])];
  let grant = iam.Grant.addToPrincipal({ grantee, actions, resourceArns: prefixes.map((p) => bucket.arnForObjects(`${p}*`)) });
  if (access.read) grant = grant.combine(iam.Grant.addToPrincipal({ grantee, actions: ['s3:ListBucket'], resourceArns: [bucket.bucketArn] }));
  if (key) {
    const keyActions = [...(access.read ? ['kms:Decrypt'] : []), ...(access.write ? ['kms:GenerateDataKey', 'kms:Decrypt'] : [])];
    if (keyActions.length) grant = grant.combine(grantKey(grantee, key, [...new Set(keyActions)]));
  }
  return grant;
}

/** Send to queues (SendMessageBatch is authorised as SendMessage); GetQueueUrl because the handlers find queues by name. */
export function grantSend(grantee: iam.IGrantable, queues: readonly sqs.IQueue[], options: { readAttributes?: boolean; key?: kms.IKey } = {}): iam.Grant {
  const actions = ['sqs:SendMessage', 'sqs:GetQueueUrl', ...(options.readAttributes ? ['sqs:GetQueueAttributes'] : [])];
  const grant = iam.Grant.addToPrincipal({ grantee, actions, resourceArns: queues.map((q) => q.queueArn) });
  // SQS with a customer managed key: senders need a data key; Decrypt lets SQS reuse a cached one.
  return options.key ? grant.combine(grantKey(grantee, options.key, ['kms:GenerateDataKey', 'kms:Decrypt'])) : grant;
}

export function grantKey(grantee: iam.IGrantable, key: kms.IKey, actions: readonly string[]): iam.Grant {
  return iam.Grant.addToPrincipal({ grantee, actions: [...actions], resourceArns: [key.keyArn] });
}

/** The ingest function wakes the checkpoint state machine: activity item, lease item, StartExecution. */
export function grantWakeUp(grantee: iam.IGrantable, table: dynamodb.ITable, machine: sfn.IStateMachine, job: string, key?: kms.IKey): iam.Grant {
  return grantTable(grantee, table, WAKE_TABLE_ACTIONS.activity, [signalsPk(job)], key)
    .combine(grantTable(grantee, table, WAKE_TABLE_ACTIONS.lease, coordinatorLeadingKeys(job), key))
    .combine(machine.grantStartExecution(grantee));
}
