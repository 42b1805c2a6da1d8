/**
 * What the job's AWS sinks need (lib/aws/sinks/sink-options.ts describes each as
 * `awsResources`): the stage functions that run a sink write to it, the checkpoint task
 * commits S3 file sinks, readers read them.
 *
 *   AwsSinks.s3Files   stage: GetObject + PutObject on its prefix (a redelivered object is
 *                      read back and compared), ListBucket; checkpoint task: also delete
 *                      (rollback) and the commit pointer (`${job}#c`, already the
 *                      coordinator's); readers: GetObject + ListBucket, pointer GetItem.
 *                      Prefix: `${job}/sinks/<prefix>` in the snapshot bucket, or
 *                      `<prefix>` in the sink's own bucket (imported by name).
 *   AwsSinks.dynamodbUpsert  stage: PutItem (conditional) on its table; readers: GetItem,
 *                      Query, Scan. The table is the user's, imported by name.
 */
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { NagSuppressions } from 'cdk-nag';
import { Construct } from 'constructs';
import { type AwsSinkResources, isAwsBindable } from '../lib/aws/sinks/sink-options.ts';
import type { PhysicalPlan } from '../lib/graph/compile.ts';
import { grantKey, grantObjects, grantTable } from './permissions.ts';

export interface AwsSink {
  readonly name: string;
  readonly stage: number;
  readonly resources: AwsSinkResources;
}

export function awsSinksOf(plan: PhysicalPlan): AwsSink[] {
  return plan.job.sinks().flatMap((n) => (n.spec.kind === 'sink' && isAwsBindable(n.spec.sink) ? [{ name: n.name, stage: plan.stageOfNode[n.id], resources: n.spec.sink.awsResources }] : []));
}

type Access = { read?: boolean; write?: boolean; delete?: boolean };

/** The sinks' buckets and tables as constructs (imported by name once each), and the grants on them. */
export class SinkGrants extends Construct {
  private readonly buckets = new Map<string, s3.IBucket>();
  private readonly tables = new Map<string, dynamodb.ITable>();

  constructor(
    scope: Construct,
    id: string,
    private readonly o: {
      readonly job: string;
      readonly sinks: readonly AwsSink[];
      readonly bucket: s3.IBucket;
      readonly table: dynamodb.ITable;
      /** The job's key (its bucket and table). */
      readonly encryptionKey?: kms.IKey;
      /** The key of the users' sink buckets and tables, when they have one. */
      readonly sinkEncryptionKey?: kms.IKey;
    },
  ) {
    super(scope, id);
  }

  /** Where an S3 file sink's objects are: bucket and key prefix. */
  private location(r: Extract<AwsSinkResources, { kind: 's3-files' }>): { bucket: s3.IBucket; prefix: string; own: boolean } {
    if (!r.bucket) return { bucket: this.o.bucket, prefix: `${this.o.job}/sinks/${r.prefix}`, own: true };
    let b = this.buckets.get(r.bucket);
    if (!b) this.buckets.set(r.bucket, (b = s3.Bucket.fromBucketName(this, `Bucket${this.buckets.size}`, r.bucket)));
    return { bucket: b, prefix: r.prefix, own: false };
  }

  private tableOf(name: string): dynamodb.ITable {
    let t = this.tables.get(name);
    if (!t) this.tables.set(name, (t = dynamodb.Table.fromTableName(this, `Table${this.tables.size}`, name)));
    return t;
  }

  private objects(grantee: iam.IGrantable, sink: AwsSink, access: Access): iam.Grant | undefined {
    if (sink.resources.kind !== 's3-files') return undefined;
    const { bucket, prefix, own } = this.location(sink.resources);
    const grant = grantObjects(grantee, bucket, [prefix], access, own ? this.o.encryptionKey : this.o.sinkEncryptionKey);
    suppressPrefixFinding(grantee, own ? undefined : sink.resources.bucket, prefix);
    return grant;
  }

  private tableGrant(grantee: iam.IGrantable, table: string, actions: string[], keyActions: string[]): iam.Grant[] {
    const grant = iam.Grant.addToPrincipal({ grantee, actions, resourceArns: [this.tableOf(table).tableArn] });
    const key = this.o.sinkEncryptionKey;
    return key ? [grant, grantKey(grantee, key, keyActions)] : [grant];
  }

  /** A stage function writes the sinks it runs. */
  grantWrite(grantee: iam.IGrantable, stage: number): iam.Grant | undefined {
    const grants = this.o.sinks
      .filter((s) => s.stage === stage)
      .flatMap((s) => {
        if (s.resources.kind === 'dynamodb-upsert') return this.tableGrant(grantee, s.resources.table, ['dynamodb:PutItem'], ['kms:Encrypt', 'kms:GenerateDataKey', 'kms:Decrypt']);
        return [this.objects(grantee, s, { read: true, write: true })!];
      });
    return combine(grants);
  }

  /** The checkpoint task prepares, commits and (on a rollback) deletes S3 file sinks' objects. */
  grantCommit(grantee: iam.IGrantable): iam.Grant | undefined {
    return combine(this.o.sinks.flatMap((s) => this.objects(grantee, s, { read: true, write: true, delete: true }) ?? []));
  }

  /** Read every sink's committed output (S3 files follow their pointer in the state table). */
  grantRead(grantee: iam.IGrantable): iam.Grant | undefined {
    const grants = this.o.sinks.flatMap((s) => {
      if (s.resources.kind === 'dynamodb-upsert') return this.tableGrant(grantee, s.resources.table, ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:Scan'], ['kms:Decrypt']);
      return [this.objects(grantee, s, { read: true })!, grantTable(grantee, this.o.table, ['dynamodb:GetItem'], [`${this.o.job}#c`], this.o.encryptionKey)];
    });
    return combine(grants);
  }
}

function combine(grants: readonly iam.Grant[]): iam.Grant | undefined {
  return grants.length ? grants.reduce((a, b) => a.combine(b)) : undefined;
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

/** cdk-nag IAM5 for exactly this sink's object prefix (keys are generated per delivery and epoch). */
function suppressPrefixFinding(grantee: iam.IGrantable, userBucket: string | undefined, prefix: string): void {
  const role = grantee.grantPrincipal;
  if (!(role instanceof Construct)) return;
  const resource = userBucket ? `arn:<AWS::Partition>:s3:::${escape(userBucket)}` : '<[A-Za-z0-9]+\\.Arn>';
  NagSuppressions.addResourceSuppressions(
    role,
    [
      {
        id: 'AwsSolutions-IAM5',
        reason: 'A sink writes one object per delivery and a manifest per epoch, with generated names, so object access is granted on the sink\'s own key prefix, not the whole bucket.',
        appliesTo: [{ regex: `/^Resource::${resource}\\/${escape(prefix)}\\*$/g` }],
      },
    ],
    true,
  );
}
