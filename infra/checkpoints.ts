/**
 * The hook for the checkpoint state machine. SluiceJob owns the resources around it (log
 * group, alarms, dashboard, storage and grants); the factory builds the machine and its
 * task functions. Sluice's own factory is `checkpointStateMachine`
 * (infra/checkpoint-state-machine.ts): the one definition both the deployment and the
 * local runners execute. A factory creates its task functions with `ctx.newFunction`
 * (bundled with the job and permissioned like the handlers) and grants them with
 * `ctx.grantCoordinator` / `ctx.grantInjectBarriers`.
 */
import type { Duration } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import type { PhysicalPlan } from '../lib/graph/compile.ts';
import type { SluiceFunction } from './function.ts';

export interface CheckpointFunctionOptions {
  /** @default Duration.seconds(60) */
  readonly timeout?: Duration;
  /** @default 512 */
  readonly memorySize?: number;
  /** Added to the handlers' environment (infra/handler-environment.ts). @default - none */
  readonly environment?: Readonly<Record<string, string>>;
}

export interface CheckpointContext {
  readonly plan: PhysicalPlan;
  readonly table: dynamodb.ITable;
  readonly bucket: s3.IBucket;
  /** Stage queues by stage id (barriers enter through the source stages' queues). */
  readonly stageQueues: readonly sqs.IQueue[];
  /** Where the state machine must log its executions (level ALL). */
  readonly logGroup: logs.ILogGroup;
  readonly encryptionKey?: kms.IKey;
  /** The stage functions' timeout (their queues' visibility timeout is a multiple): epochs must outlast a failed batch. */
  readonly operatorTimeout: Duration;
  /** The environment the handlers get (SLUICE_BUCKET, ...). */
  readonly environment: Readonly<Record<string, string>>;
  /** A function bundled like the handlers (esbuild, ESM, nodejs22.x, arm64), with its own role and log group. */
  newFunction(id: string, entry: string, options?: CheckpointFunctionOptions): SluiceFunction;
  /**
   * Checkpoint storage: the coordinator's pointer items (`${job}#c`, read and
   * compare-and-set), snapshots, manifests and checkpoint stats in the bucket (read,
   * write, delete for garbage collection).
   */
  grantCoordinator(grantee: iam.IGrantable): iam.Grant;
  /** Send barriers into the source stages' queues. */
  grantInjectBarriers(grantee: iam.IGrantable): iam.Grant;
}

/** Builds the state machine in `scope` (a construct SluiceJob created for it). */
export type CheckpointStateMachineFactory = (scope: Construct, context: CheckpointContext) => sfn.IStateMachine;

/** Combine grants into one (iam.Grant has no n-ary form). */
export function allOf(grants: readonly iam.Grant[]): iam.Grant {
  return grants.reduce((a, b) => a.combine(b));
}

