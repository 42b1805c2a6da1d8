/**
 * Finding a deployed job's resources from its name (for `sluice checkpoints|savepoint|
 * restore --target aws`), following the construct's naming (lib/aws/naming.ts, infra/):
 *
 *   stage queues   `<prefix><job>-s<stage>.fifo` (GetQueueUrl, then its ARN)
 *   state table    `sluice-<job>`                                  (--table overrides)
 *   bucket         SLUICE_BUCKET of the function a stage queue's    (--bucket overrides;
 *                  event source mapping invokes                     CloudFormation names it)
 *   state machine  SLUICE_STATE_MACHINE_ARN of that function        (--state-machine overrides)
 *   parallelism    SLUICE_PARALLELISM of that function (parallelism-env.ts): the plan it runs
 *
 * Clients come from the SDK's defaults, so AWS_ENDPOINT_URL* point them at LocalStack or
 * local servers without code of ours.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SFNClient } from '@aws-sdk/client-sfn';
import { GetQueueAttributesCommand, GetQueueUrlCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { CloudWatchClient } from '@aws-sdk/client-cloudwatch';
import type { LambdaClient } from '@aws-sdk/client-lambda';
import { ConfigError } from '../errors.ts';
import type { PhysicalPlan } from '../graph/compile.ts';
import type { StageQueueRef } from './restore/job-control.ts';
import { configuredEndpoint } from './configured-endpoints.ts';
import { stageQueueName, stateTableName } from './naming.ts';
import { decodeParallelism, PARALLELISM_ENV } from './parallelism-env.ts';
import type { ParallelismOverride } from '../api/logical.ts';

export interface DeploymentFlags {
  readonly table?: string;
  readonly bucket?: string;
  readonly stateMachine?: string;
  readonly queuePrefix?: string;
}

export interface DeployedJob {
  readonly job: string;
  readonly table: string;
  readonly bucket: string;
  /** Undefined: deployed without checkpoints (nothing to list, save or restore). */
  readonly stateMachineArn?: string;
  readonly queues: readonly StageQueueRef[];
  /** The parallelism the deployment runs the job at (SLUICE_PARALLELISM), undefined: the job's own. */
  readonly parallelism?: ParallelismOverride;
}

export interface AwsClients {
  readonly dynamodb: DynamoDBClient;
  readonly s3: S3Client;
  readonly sqs: SQSClient;
  readonly sfn: SFNClient;
  /** Loaded on first use (the Lambda client is only needed to find and stop consumers). */
  lambda(): Promise<LambdaClient>;
  /** Loaded on first use (`sluice status --target aws` reads the stages' metrics). */
  cloudwatch(): Promise<CloudWatchClient>;
  destroy(): void;
}

/** The SDK's default clients; S3 path-style and SQS on the configured host when an endpoint variable names a local server. */
export function awsClients(env: NodeJS.ProcessEnv = process.env): AwsClients {
  const local = (s: 'sqs' | 's3') => configuredEndpoint(s, env) !== undefined;
  const dynamodb = new DynamoDBClient({});
  const s3 = new S3Client({ forcePathStyle: local('s3') || undefined });
  const sqs = new SQSClient({ useQueueUrlAsEndpoint: local('sqs') ? false : undefined });
  const sfn = new SFNClient({});
  let lambda: LambdaClient | undefined;
  let cloudwatch: CloudWatchClient | undefined;
  return {
    dynamodb,
    s3,
    sqs,
    sfn,
    async lambda() {
      if (!lambda) {
        const { LambdaClient } = await import('@aws-sdk/client-lambda');
        lambda = new LambdaClient({});
      }
      return lambda;
    },
    async cloudwatch() {
      if (!cloudwatch) {
        const { CloudWatchClient } = await import('@aws-sdk/client-cloudwatch');
        cloudwatch = new CloudWatchClient({});
      }
      return cloudwatch;
    },
    destroy() {
      for (const c of [dynamodb, s3, sqs, sfn, lambda, cloudwatch]) c?.destroy();
    },
  };
}

async function stageQueue(sqs: SQSClient, name: string, stage: number): Promise<StageQueueRef> {
  let url: string;
  try {
    url = (await sqs.send(new GetQueueUrlCommand({ QueueName: name }))).QueueUrl!;
  } catch (e) {
    const n = (e as { name?: string }).name ?? '';
    if (/QueueDoesNotExist|NonExistentQueue/.test(n)) throw new ConfigError('<job>', `a deployed job with stage queue ${name} (check the job name, --queue-prefix and the region)`, 'no such queue');
    throw e;
  }
  const arn = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['QueueArn'] }))).Attributes?.QueueArn;
  if (!arn) throw new ConfigError('<job>', `the ARN of queue ${name}`, 'none in GetQueueAttributes');
  return { stage, url, arn };
}

/** The job's stage queues, table, bucket and state machine. */
export async function findDeployedJob(clients: AwsClients, plan: PhysicalPlan, flags: DeploymentFlags): Promise<DeployedJob> {
  const job = plan.job.name;
  const queues = await Promise.all(plan.stages.map((s) => stageQueue(clients.sqs, stageQueueName(job, s.id, flags.queuePrefix ?? ''), s.id)));
  let bucket = flags.bucket;
  let stateMachineArn = flags.stateMachine;
  let table = flags.table;
  // Always read: the parallelism is known only from there.
  const env = await stageFunctionEnvironment(await clients.lambda(), queues[0]);
  bucket ??= env.SLUICE_BUCKET;
  stateMachineArn ??= env.SLUICE_STATE_MACHINE_ARN;
  table ??= env.SLUICE_TABLE;
  const parallelism = decodeParallelism(env[PARALLELISM_ENV], `${PARALLELISM_ENV} of the function reading ${queues[0].arn}`);
  if (!bucket) throw new ConfigError('--bucket', `the job's snapshot bucket (SLUICE_BUCKET of its stage functions)`, `none found for stage queue ${queues[0].arn}`);
  return { job, table: table ?? stateTableName(job, flags.queuePrefix), bucket, stateMachineArn, queues, ...(parallelism ? { parallelism } : {}) };
}

/** The environment of the function a stage queue's event source mapping invokes. */
async function stageFunctionEnvironment(lambda: LambdaClient, queue: StageQueueRef): Promise<Record<string, string>> {
  const { ListEventSourceMappingsCommand, GetFunctionConfigurationCommand } = await import('@aws-sdk/client-lambda');
  const mappings = (await lambda.send(new ListEventSourceMappingsCommand({ EventSourceArn: queue.arn }))).EventSourceMappings ?? [];
  const fn = mappings.find((m) => m.FunctionArn)?.FunctionArn;
  if (!fn) throw new ConfigError('<job>', `a deployed job: a Lambda function reading ${queue.arn} (its environment names the bucket, state machine and parallelism)`, 'no event source mapping on the queue');
  return (await lambda.send(new GetFunctionConfigurationCommand({ FunctionName: fn }))).Environment?.Variables ?? {};
}
