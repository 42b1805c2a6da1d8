/**
 * The job's durable storage: the state table (state, progress, outboxes, checkpoint
 * pointers; layout in lib/aws/dynamodb/dynamodb-state.ts) and the snapshot bucket (snapshots,
 * manifests, checkpoint stats, spilled envelopes), with a bucket for its access logs.
 */
import { Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';
import { stateTableName } from '../lib/aws/naming.ts';
import { bucketPrefixes } from './permissions.ts';
import type { ResolvedProps } from './props.ts';

/** The TTL attribute of redo-log leftovers (createStateTable in lib/aws/dynamodb/dynamodb-table.ts). */
export const TTL_ATTRIBUTE = 'expires';

export function stateTable(scope: Construct, p: ResolvedProps): dynamodb.Table {
  return new dynamodb.Table(scope, 'StateTable', {
    // The handlers find the table by this name (lib/aws/naming.ts).
    tableName: stateTableName(p.job.name, p.queuePrefix),
    partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
    sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
    // Pay per request: nothing at zero traffic.
    billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
    pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
    timeToLiveAttribute: TTL_ATTRIBUTE,
    encryption: p.encryptionKey ? dynamodb.TableEncryption.CUSTOMER_MANAGED : dynamodb.TableEncryption.AWS_MANAGED,
    encryptionKey: p.encryptionKey,
    removalPolicy: p.removalPolicy,
  });
}

export function snapshotBucket(scope: Construct, p: ResolvedProps): { bucket: s3.Bucket; accessLogs: s3.Bucket } {
  // Server access logs cannot go to an SSE-KMS bucket, so this one is always S3-managed.
  const accessLogs = new s3.Bucket(scope, 'AccessLogBucket', {
    encryption: s3.BucketEncryption.S3_MANAGED,
    blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
    objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
    enforceSSL: true,
    minimumTLSVersion: 1.2,
    lifecycleRules: [{ id: 'expire-access-logs', expiration: p.retention.accessLogs }],
    removalPolicy: p.removalPolicy,
    // A bucket that holds objects (or, versioned, old versions) cannot be deleted: emptied first when the stack goes.
    autoDeleteObjects: p.removalPolicy === RemovalPolicy.DESTROY,
  });
  const prefixes = bucketPrefixes(p.job.name);
  const bucket = new s3.Bucket(scope, 'SnapshotBucket', {
    encryption: p.encryptionKey ? s3.BucketEncryption.KMS : s3.BucketEncryption.S3_MANAGED,
    encryptionKey: p.encryptionKey,
    // One KMS request per bucket key instead of per object.
    bucketKeyEnabled: p.encryptionKey ? true : undefined,
    blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
    objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
    enforceSSL: true,
    minimumTLSVersion: 1.2,
    // Objects are immutable; versioning keeps what the coordinator deleted for a while.
    versioned: true,
    lifecycleRules: [
      { id: 'abort-incomplete-uploads', abortIncompleteMultipartUploadAfter: Duration.days(1) },
      { id: 'expire-spilled-envelopes', prefix: prefixes.spill, expiration: p.retention.spilledEnvelopes, noncurrentVersionExpiration: Duration.days(1) },
      // "Expired snapshots": objects the coordinator's garbage collection deleted.
      { id: 'expire-deleted-snapshots', noncurrentVersionExpiration: p.retention.deletedSnapshots, expiredObjectDeleteMarker: true },
    ],
    removalPolicy: p.removalPolicy,
    autoDeleteObjects: p.removalPolicy === RemovalPolicy.DESTROY,
  });
  // Server access logging through a bucket policy for the logging service (ACLs are off
  // on both buckets), set here rather than by aws-cdk-lib, whose choice between the two
  // depends on an app feature flag.
  const logPrefix = 'snapshot-bucket/';
  (bucket.node.defaultChild as s3.CfnBucket).loggingConfiguration = { destinationBucketName: accessLogs.bucketName, logFilePrefix: logPrefix };
  accessLogs.addToResourcePolicy(
    new iam.PolicyStatement({
      effect: iam.Effect.ALLOW,
      principals: [new iam.ServicePrincipal('logging.s3.amazonaws.com')],
      actions: ['s3:PutObject'],
      resources: [accessLogs.arnForObjects(`${logPrefix}*`)],
      conditions: { ArnLike: { 'aws:SourceArn': bucket.bucketArn }, StringEquals: { 'aws:SourceAccount': Stack.of(scope).account } },
    }),
  );
  return { bucket, accessLogs };
}
