/**
 * The stack's stateful resources created on the local servers as CloudFormation would
 * create them from the template: queues with their attributes (dead-letter queues first,
 * so RedrivePolicy names an existing queue), tables with their key schema, indexes and
 * TTL, buckets with versioning. The names are the template's, so a leftover of an earlier
 * run under the same names is removed first (a fresh deployment). remove() deletes what
 * create() made.
 */
import { CreateTableCommand, DeleteTableCommand, DescribeTableCommand, type DynamoDBClient, ResourceNotFoundException, UpdateTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { CreateBucketCommand, DeleteBucketCommand, DeleteObjectsCommand, ListObjectVersionsCommand, ListObjectsV2Command, PutBucketVersioningCommand, type S3Client } from '@aws-sdk/client-s3';
import { CreateQueueCommand, DeleteQueueCommand, GetQueueUrlCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { AssemblyModel, AssemblyQueue } from './model.ts';

export interface ProvisionClients {
  readonly dynamodb: DynamoDBClient;
  readonly sqs: SQSClient;
  readonly s3: S3Client;
}

export interface Provisioned {
  /** By queue logical id: the URL the upstream SQS gave it. */
  readonly queueUrls: ReadonlyMap<string, string>;
}

/** Queues in creation order: each after the queue its RedrivePolicy names. */
function queueOrder(model: AssemblyModel): AssemblyQueue[] {
  const out: AssemblyQueue[] = [];
  const seen = new Set<string>();
  const visit = (q: AssemblyQueue) => {
    if (seen.has(q.logicalId)) return;
    seen.add(q.logicalId);
    const dlq = q.deadLetter && model.queues.get(q.deadLetter.queueLogicalId);
    if (dlq) visit(dlq);
    out.push(q);
  };
  for (const q of model.queues.values()) visit(q);
  return out;
}

export async function provision(model: AssemblyModel, c: ProvisionClients, log?: (line: string) => void): Promise<Provisioned> {
  await remove(model, c, (name) => log?.(`assembly: replacing ${name} left by an earlier run`));
  const queueUrls = new Map<string, string>();
  for (const q of queueOrder(model)) {
    const out = await c.sqs.send(new CreateQueueCommand({ QueueName: q.name, Attributes: { ...q.attributes } }));
    queueUrls.set(q.logicalId, out.QueueUrl!);
  }
  await Promise.all(
    [...model.tables.values()].map(async (t) => {
      const used = new Set<string>();
      for (const k of t.keySchema) used.add(k.AttributeName);
      for (const i of [...t.globalSecondaryIndexes, ...t.localSecondaryIndexes] as { KeySchema?: { AttributeName: string }[] }[]) for (const k of i.KeySchema ?? []) used.add(k.AttributeName);
      const strip = (i: Record<string, unknown>) => {
        const { ContributorInsightsSpecification: _c, ...rest } = i as Record<string, unknown> & { ContributorInsightsSpecification?: unknown };
        return rest;
      };
      await c.dynamodb.send(
        new CreateTableCommand({
          TableName: t.name,
          KeySchema: [...t.keySchema],
          AttributeDefinitions: t.attributeDefinitions.filter((a) => used.has(a.AttributeName)) as never,
          BillingMode: 'PAY_PER_REQUEST',
          ...(t.globalSecondaryIndexes.length ? { GlobalSecondaryIndexes: t.globalSecondaryIndexes.map(strip) as never } : {}),
          ...(t.localSecondaryIndexes.length ? { LocalSecondaryIndexes: t.localSecondaryIndexes.map(strip) as never } : {}),
        }),
      );
      if (t.ttlAttribute) await c.dynamodb.send(new UpdateTimeToLiveCommand({ TableName: t.name, TimeToLiveSpecification: { AttributeName: t.ttlAttribute, Enabled: true } }));
    }),
  );
  for (const b of model.buckets.values()) {
    await c.s3.send(new CreateBucketCommand({ Bucket: b.name }));
    if (b.versioned) await c.s3.send(new PutBucketVersioningCommand({ Bucket: b.name, VersioningConfiguration: { Status: 'Enabled' } }));
  }
  return { queueUrls };
}

/** Delete the stack's queues, tables and buckets (emptied first) where they exist. */
export async function remove(model: AssemblyModel, c: ProvisionClients, onFound?: (name: string) => void): Promise<void> {
  await Promise.all(
    [...model.queues.values()].map(async (q) => {
      let url: string | undefined;
      try {
        url = (await c.sqs.send(new GetQueueUrlCommand({ QueueName: q.name }))).QueueUrl;
      } catch {
        return; // not there
      }
      onFound?.(`queue ${q.name}`);
      await c.sqs.send(new DeleteQueueCommand({ QueueUrl: url }));
    }),
  );
  await Promise.all(
    [...model.tables.values()].map(async (t) => {
      try {
        await c.dynamodb.send(new DescribeTableCommand({ TableName: t.name }));
      } catch (e) {
        if (e instanceof ResourceNotFoundException || (e as Error).name === 'ResourceNotFoundException') return;
        throw e;
      }
      onFound?.(`table ${t.name}`);
      await c.dynamodb.send(new DeleteTableCommand({ TableName: t.name }));
    }),
  );
  for (const b of model.buckets.values()) {
    try {
      await emptyBucket(c.s3, b.name);
    } catch {
      continue; // no such bucket
    }
    onFound?.(`bucket ${b.name}`);
    await c.s3.send(new DeleteBucketCommand({ Bucket: b.name })).catch(() => undefined);
  }
}

async function emptyBucket(s3: S3Client, bucket: string): Promise<void> {
  // Deleting in a versioned bucket leaves delete markers, removed in the next round.
  for (let round = 0; round < 20; round++) {
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: 1000 }));
    const keys = (listed.Contents ?? []).map((o) => ({ Key: o.Key! }));
    let versions: { Key: string; VersionId?: string }[] = [];
    try {
      const v = await s3.send(new ListObjectVersionsCommand({ Bucket: bucket, MaxKeys: 1000 }));
      versions = [...(v.Versions ?? []), ...(v.DeleteMarkers ?? [])].filter((x) => x.VersionId && x.VersionId !== 'null').map((x) => ({ Key: x.Key!, VersionId: x.VersionId }));
    } catch {
      // a server without versions
    }
    const all = [...keys, ...versions];
    if (!all.length) return;
    await s3.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: all.slice(0, 1000), Quiet: true } }));
    if (all.length < 1000 && !listed.IsTruncated) {
      const again = await s3.send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: 1 }));
      if (!again.Contents?.length) return;
    }
  }
}
