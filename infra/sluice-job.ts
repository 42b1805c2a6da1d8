/**
 * SluiceJob: one Sluice job on AWS, built from its compiled stages.
 *
 *   ingestion endpoint (HTTP API or Function URL, IAM by default)
 *     -> ingest function -> source stage queue (SQS FIFO, MessageGroupId = partition)
 *     -> stage function -> downstream stage queue -> ... -> sinks
 *   every stage queue has a FIFO DLQ; state in one DynamoDB table; snapshots and
 *   spilled envelopes in one S3 bucket; an optional checkpoint state machine;
 *   a dashboard and alarms.
 *
 * Names the handlers look up (queues, table) follow lib/aws/naming.ts; what they
 * cannot derive comes from the environment listed in handler-environment.ts.
 */
import { ArnFormat, Duration, Fn, Stack } from 'aws-cdk-lib';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { ingestStreams } from '../lib/aws/ingest/ingest-handler.ts';
import { stackNameFor, stateTableName } from '../lib/aws/naming.ts';
import { atParallelism } from '../lib/aws/parallelism-env.ts';
import { planFingerprint } from '../lib/checkpoint/fingerprint.ts';
import { compile, type PhysicalPlan } from '../lib/graph/compile.ts';
import { allOf, type CheckpointContext } from './checkpoints.ts';
import { SluiceJobPropsError } from './errors.ts';
import { type SluiceFunction, sluiceFunction } from './function.ts';
import { HANDLER_ENV, runtimeEnvironment } from './handler-environment.ts';
import { createIngestion, type Ingestion } from './ingestion.ts';
import { createMonitoring } from './monitoring.ts';
import { suppressFunctionFindings, suppressOperateFindings, suppressStateMachineFindings } from './nag.ts';
import {
  bucketPrefixes,
  COORDINATOR_TABLE_ACTIONS,
  coordinatorLeadingKeys,
  grantObjects,
  grantSend,
  grantTable,
  grantWakeUp,
  INGEST_KEY_TABLE_ACTIONS,
  ingestKeyLeadingKeys,
  INPUT_LOG_TRUNCATE_ACTIONS,
  OPERATE_MAPPING_ACTIONS,
  OPERATE_TABLE_ACTIONS,
  operateLeadingKeys,
  partitionControlKeys,
} from './permissions.ts';
import { loggingPartitions } from '../lib/aws/operator/input-log.ts';
import { checkSources, type ResolvedProps, resolveProps, type SluiceJobProps } from './props.ts';
import { awsSinksOf, SinkGrants } from './sinks.ts';
import { createStages, type StageResources } from './stages.ts';
import { snapshotBucket, stateTable } from './storage.ts';

export type { SluiceJobProps } from './props.ts';

export class SluiceJob extends Construct {
  readonly plan: PhysicalPlan;
  readonly table: dynamodb.Table;
  readonly bucket: s3.Bucket;
  readonly accessLogBucket: s3.Bucket;
  /** By stage id. */
  readonly stages: readonly StageResources[];
  readonly ingestion: Ingestion;
  /** The endpoint's base URL: publish to `${endpointUrl}streams/<stream>/events`. */
  readonly endpointUrl: string;
  /** Log groups of the stages that run sinks: a stdout sink's results land there. */
  readonly resultLogGroups: readonly logs.ILogGroup[];
  readonly stateMachine?: sfn.IStateMachine;
  readonly checkpointLogGroup?: logs.LogGroup;
  readonly dashboard: cloudwatch.Dashboard;
  readonly alarms: readonly cloudwatch.Alarm[];
  /** Every function the construct created (stages, ingest, authorizer, checkpoint tasks). */
  readonly functions: readonly SluiceFunction[];
  /** The functions that build the job's plan (all but the authorizer). */
  private readonly planFunctions: readonly SluiceFunction[];
  private readonly resolved: ResolvedProps;
  private readonly sinkGrants: SinkGrants;

  constructor(scope: Construct, id: string, props: SluiceJobProps) {
    super(scope, id);
    if (!props || typeof props.job !== 'object' || props.job === null || !(props.job.graph instanceof Object)) {
      throw new SluiceJobPropsError('job', 'a Job (new Job(...), the export of the job module)', props?.job === undefined ? 'undefined' : typeof props.job);
    }
    // JobDefinitionError for an invalid graph: the same checks as `sluice run`.
    // At the parallelism it was given (the handlers build the same from SLUICE_PARALLELISM).
    const job = atParallelism(props.job, props.parallelism);
    this.plan = compile(job.graph);
    checkSources(this.plan);
    // One deployment per job under the conventional stack name keeps the short names; any other stack scopes them.
    const stackName = Stack.of(this).stackName;
    const p = resolveProps({ ...props, job }, this.plan, stackName === stackNameFor(props.job.name) ? '' : `${stackName}-`);
    this.resolved = p;

    const { bucket, accessLogs } = snapshotBucket(this, p);
    this.bucket = bucket;
    this.accessLogBucket = accessLogs;
    this.table = stateTable(this, p);
    const environment = runtimeEnvironment({
      bucketName: bucket.bucketName,
      queuePrefix: p.queuePrefix,
      tableName: stateTableName(p.job.name, p.queuePrefix),
      planFingerprint: planFingerprint(this.plan),
      jobParams: p.jobParams,
      parallelism: props.parallelism,
      logLevel: p.logLevel,
      checkpoints: p.checkpoints !== undefined,
    });

    this.stages = createStages(this, p, { table: this.table, bucket }, environment);
    // AWS sinks (S3 files, DynamoDB upsert): each stage writes the sinks it runs.
    this.sinkGrants = new SinkGrants(this, 'Sinks', { job: p.job.name, sinks: awsSinksOf(this.plan), bucket, table: this.table, encryptionKey: p.encryptionKey, sinkEncryptionKey: p.sinkEncryptionKey });
    for (const s of this.stages) this.sinkGrants.grantWrite(s.operator.fn, s.stage.id);
    const sourceStages = [...new Set([...ingestStreams(this.plan).values()].map((s) => s.stage))];
    this.ingestion = createIngestion(
      this,
      p,
      sourceStages.map((s) => this.stages[s].queue),
      environment,
    );
    this.endpointUrl = this.ingestion.url;
    // A backlog in any stage the sources feed answers 429 (lib/aws/ingest/ingest-handler.ts): the ingest function reads their depth.
    const fed = this.stages.filter((s) => !sourceStages.includes(s.stage.id)).map((s) => s.queue.queueArn);
    if (fed.length) iam.Grant.addToPrincipal({ grantee: this.ingestion.function.fn, actions: ['sqs:GetQueueUrl', 'sqs:GetQueueAttributes'], resourceArns: fed });
    // Idempotency-Keys are claimed in the state table (lib/aws/ingest/idempotency-store.ts).
    grantTable(this.ingestion.function.fn, this.table, INGEST_KEY_TABLE_ACTIONS, ingestKeyLeadingKeys(p.job.name), p.encryptionKey);
    const sinkStages = new Set(this.plan.job.sinks().map((n) => this.plan.stageOfNode[n.id]));
    this.resultLogGroups = this.stages.filter((s) => sinkStages.has(s.stage.id)).map((s) => s.operator.logGroup);

    const functions: SluiceFunction[] = [...this.stages.map((s) => s.operator), this.ingestion.function];
    if (this.ingestion.authorizer) functions.push(this.ingestion.authorizer);

    if (p.checkpoints) {
      const scope = new Construct(this, 'Checkpoints');
      this.checkpointLogGroup = new logs.LogGroup(scope, 'ExecutionLogs', {
        // Under /aws/vendedlogs/, Step Functions' log delivery needs no resource policy entry (the account's policy size is limited).
        logGroupName: `/aws/vendedlogs/states/sluice-${p.queuePrefix}${p.job.name}-checkpoints`,
        retention: p.retention.logs,
        removalPolicy: p.removalPolicy,
      });
      const context: CheckpointContext = {
        plan: this.plan,
        table: this.table,
        bucket,
        stageQueues: this.stages.map((s) => s.queue),
        logGroup: this.checkpointLogGroup,
        encryptionKey: p.encryptionKey,
        operatorTimeout: p.operatorTimeout,
        environment,
        newFunction: (fid, entry, o = {}) => {
          const f = sluiceFunction(scope, fid, {
            entry,
            description: `Sluice ${p.job.name} checkpoint task ${fid}`,
            timeout: o.timeout ?? Duration.seconds(60),
            memorySize: o.memorySize ?? 512,
            environment: { ...environment, ...o.environment },
            logRetention: p.retention.logs,
            removalPolicy: p.removalPolicy,
            bundle: p.bundle,
          });
          functions.push(f);
          return f;
        },
        grantCoordinator: (grantee) => this.grantCoordinator(grantee),
        grantInjectBarriers: (grantee) => grantSend(grantee, sourceStages.map((s) => this.stages[s].queue), { key: p.encryptionKey }),
      };
      this.stateMachine = p.checkpoints(scope, context);
      suppressStateMachineFindings(this.stateMachine);
      // Input arriving wakes the coordinator (it ends itself at zero traffic): lib/aws/checkpoint/checkpoint-wakeup.ts.
      this.ingestion.function.fn.addEnvironment(HANDLER_ENV.stateMachineArn, this.stateMachine.stateMachineArn);
      // Not read by the stage handlers: `sluice savepoint|restore --target aws` finds the machine through a stage queue's function.
      for (const s of this.stages) s.operator.fn.addEnvironment(HANDLER_ENV.stateMachineArn, this.stateMachine.stateMachineArn);
      grantWakeUp(this.ingestion.function.fn, this.table, this.stateMachine, p.job.name, p.encryptionKey);
    }
    this.functions = functions;
    // The functions besides the stages' that build the plan: `sluice rescale` changes their parallelism too.
    const stageFunctions = new Set(this.stages.map((s) => s.operator));
    this.planFunctions = functions.filter((f) => f !== this.ingestion.authorizer);
    const others = this.planFunctions.filter((f) => !stageFunctions.has(f)).map((f) => f.fn.functionName);
    for (const s of this.stages) s.operator.fn.addEnvironment(HANDLER_ENV.jobFunctions, Fn.join(',', others));

    const monitoring = createMonitoring(this, p, this.stages, this.ingestion, this.stateMachine);
    this.dashboard = monitoring.dashboard;
    this.alarms = monitoring.alarms;
    suppressFunctionFindings(functions);
  }

  /**
   * Publish events to the ingestion endpoint (`execute-api:Invoke` on the events route,
   * or `lambda:InvokeFunctionUrl`). Throws SluiceJobPropsError for JWT or API-key
   * endpoints, whose callers IAM cannot authorise.
   */
  grantPublish(grantee: iam.IGrantable): iam.Grant {
    return this.ingestion.grantPublish(grantee);
  }

  /**
   * Read the job's results: the sink stages' log groups (stdout sinks), S3 file sinks'
   * objects and commit pointers, DynamoDB upsert sinks' tables.
   */
  grantReadResults(grantee: iam.IGrantable): iam.Grant {
    const logs = allOf(this.resultLogGroups.map((g) => g.grantRead(grantee)));
    const sinks = this.sinkGrants.grantRead(grantee);
    return sinks ? logs.combine(sinks) : logs;
  }

  /**
   * What `sluice checkpoints|savepoint|restore --target aws` call, and no more:
   * - find the job: the stage queues' URLs and attributes (ARN, messages in flight), the
   *   stage functions' configuration (SLUICE_BUCKET, SLUICE_STATE_MACHINE_ARN) through
   *   the queues' event source mappings (ListEventSourceMappings has no resource-level
   *   permission: `*`);
   * - read the checkpoints, manifests, snapshots, savepoints and the logged input in the
   *   bucket; write an installable manifest beside a savepoint's copy;
   * - the table: the coordinator's items (lease, pointer, record, savepoint request), the
   *   activity item, every partition's control and state items (a restore rewrites them);
   * - the S3 file sinks a restore rolls back (as the coordinator's commit step);
   * - stop and start the consumers (disable and enable each stage's event source mapping),
   *   purge the inter-stage queues, wake the source partitions that replay (SendMessage);
   * - the coordinator: list and stop its running executions, start one (a savepoint of a
   *   quiet job, the restart after a restore);
   * - `sluice status`: the stage queues' depths and the stages' metrics (GetMetricData has
   *   no resource-level permission: `*`).
   */
  grantOperate(grantee: iam.IGrantable): iam.Grant {
    const p = this.resolved;
    const job = p.job.name;
    const prefixes = bucketPrefixes(job);
    const stack = Stack.of(this);
    const fedByStages = this.stages.filter((s) => s.stage.inputs.some((e) => this.plan.edges[e].from.kind !== 'source'));
    const sourceQueues = [...new Set([...ingestStreams(this.plan).values()].map((s) => s.stage))].map((s) => this.stages[s].queue);
    const allow = (actions: readonly string[], resourceArns: string[]) => iam.Grant.addToPrincipal({ grantee, actions: [...actions], resourceArns });
    let grant = grantTable(grantee, this.table, OPERATE_TABLE_ACTIONS, operateLeadingKeys(job), p.encryptionKey)
      .combine(grantObjects(grantee, this.bucket, [prefixes.checkpoints, prefixes.manifests, prefixes.snapshots, prefixes.inputLog], { read: true }, p.encryptionKey))
      .combine(grantObjects(grantee, this.bucket, [prefixes.savepoints], { read: true, write: true }, p.encryptionKey))
      .combine(allow(['sqs:GetQueueUrl', 'sqs:GetQueueAttributes'], this.stages.map((s) => s.queue.queueArn)))
      .combine(grantSend(grantee, sourceQueues, { key: p.encryptionKey }))
      .combine(allow(['lambda:ListEventSourceMappings', 'cloudwatch:GetMetricData'], ['*']))
      .combine(allow(OPERATE_MAPPING_ACTIONS, this.stages.map((s) => s.eventSource.eventSourceMappingArn)))
      .combine(allow(['lambda:GetFunctionConfiguration', 'lambda:UpdateFunctionConfiguration'], this.planFunctions.map((f) => f.fn.functionArn)));
    if (fedByStages.length) grant = grant.combine(allow(['sqs:PurgeQueue'], fedByStages.map((s) => s.queue.queueArn)));
    const sinks = this.sinkGrants.grantCommit(grantee);
    if (sinks) grant = grant.combine(sinks);
    if (this.stateMachine) {
      const machine = this.stateMachine;
      const executions = stack.formatArn({ service: 'states', resource: 'execution', resourceName: `${stack.splitArn(machine.stateMachineArn, ArnFormat.COLON_RESOURCE_NAME).resourceName}:*`, arnFormat: ArnFormat.COLON_RESOURCE_NAME });
      grant = grant
        .combine(allow(['states:ListExecutions'], [machine.stateMachineArn]))
        .combine(machine.grantStartExecution(grantee))
        .combine(allow(['states:StopExecution'], [executions]));
    }
    suppressOperateFindings(grantee);
    return grant;
  }

  /**
   * Checkpoint storage: pointer items, snapshots, manifests and stats (read, write,
   * delete), savepoint copies (read, write: never deleted), the S3 file sinks the commit step prepares and commits, and input log
   * truncation (the source partitions' segment items and objects).
   */
  grantCoordinator(grantee: iam.IGrantable): iam.Grant {
    const p = this.resolved;
    const prefixes = bucketPrefixes(p.job.name);
    const sourceStages = loggingPartitions(this.plan).filter((s) => s.partition === 0).map((s) => s.stage);
    const storage = grantTable(grantee, this.table, COORDINATOR_TABLE_ACTIONS, coordinatorLeadingKeys(p.job.name), p.encryptionKey)
      .combine(grantObjects(grantee, this.bucket, [prefixes.snapshots, prefixes.manifests, prefixes.checkpoints], { read: true, write: true, delete: true }, p.encryptionKey))
      .combine(grantObjects(grantee, this.bucket, [prefixes.savepoints], { read: true, write: true }, p.encryptionKey))
      .combine(grantObjects(grantee, this.bucket, [prefixes.inputLog], { delete: true }, p.encryptionKey))
      .combine(grantTable(grantee, this.table, INPUT_LOG_TRUNCATE_ACTIONS, sourceStages.flatMap((s) => partitionControlKeys(p.job.name, s)), p.encryptionKey));
    const sinks = this.sinkGrants.grantCommit(grantee);
    return sinks ? storage.combine(sinks) : storage;
  }
}
