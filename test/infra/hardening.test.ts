/**
 * The template's hardening: high-throughput FIFO on every stage queue, the vended-logs
 * name of the checkpoint log group, SDK timeouts in every handler's environment below its
 * function timeout, the dashboard built from the handlers' per-stage metrics, the
 * aborted-epochs alarm, names decided by props alone (not the synthesizing shell), and a
 * synth in a bare `new App()` with no context and no feature flags.
 */
import { App, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterEach, describe, expect, it } from 'vitest';
import { job as q5 } from '../../examples/nexmark/q5.ts';
import { EXAMPLE_JOB_MODULE } from '../../infra/app.ts';
import { checkpointStateMachine } from '../../infra/checkpoint-state-machine.ts';
import { HANDLER_ENV, sdkTimeouts } from '../../infra/handler-environment.ts';
import { ABORTED_EPOCHS_PERIOD, ABORTED_EPOCHS_THRESHOLD, EPOCHS_ABORTED_METRIC, METRICS_NAMESPACE } from '../../infra/monitoring.ts';
import { SluiceJob } from '../../infra/sluice-job.ts';
import { METRIC_DIMENSIONS, OPERATOR_METRICS } from '../../lib/aws/handler-metrics.ts';
import { idleMonthly } from '../../lib/aws/cost/cost-model.ts';
import { deadLetterQueueName, stageQueueName } from '../../lib/aws/naming.ts';
import { compile } from '../../lib/graph/compile.ts';
import { type CfnResource, exampleApp, jobStack } from './support/stacks.ts';

const plan = compile(q5.graph);
const of = (resources: Record<string, CfnResource>, type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);

describe('high-throughput FIFO', () => {
  const { resources } = exampleApp();

  it('is on for every stage queue and DLQ by default', () => {
    const queues = of(resources, 'AWS::SQS::Queue').map(([, q]) => q.Properties!);
    expect(queues.map((q) => q.QueueName).sort()).toEqual(plan.stages.flatMap((s) => [stageQueueName(q5.name, s.id), deadLetterQueueName(q5.name, s.id)]).sort());
    for (const q of queues) expect(q, q.QueueName).toMatchObject({ FifoQueue: true, DeduplicationScope: 'messageGroup', FifoThroughputLimit: 'perMessageGroupId' });
  });
});

describe('a job with checkpoints and an API-key endpoint (every kind of function)', () => {
  const { job, resources } = jobStack({ checkpoints: checkpointStateMachine, ingestion: { auth: { kind: 'apiKey', keySha256: ['a'.repeat(64)] } } });
  const functions = of(resources, 'AWS::Lambda::Function').map(([id, r]) => ({ id, p: r.Properties! }));

  it('logs checkpoint executions to a group under /aws/vendedlogs/', () => {
    const groups = of(resources, 'AWS::Logs::LogGroup').map(([, r]) => r.Properties!.LogGroupName).filter((n) => n !== undefined);
    expect(groups).toHaveLength(1);
    expect(groups[0]).toMatch(/^\/aws\/vendedlogs\//);
    expect(job.checkpointLogGroup).toBeDefined();
  });

  it('gives every Lambda function SDK connection and request timeouts below its own timeout', () => {
    // Stages, ingest, authorizer, checkpoint task.
    expect(functions.length).toBe(plan.stages.length + 3);
    for (const { id, p } of functions) {
      const env = p.Environment.Variables as Record<string, string>;
      const connection = Number(env[HANDLER_ENV.sdkConnectionTimeout]);
      const request = Number(env[HANDLER_ENV.sdkRequestTimeout]);
      expect(connection, id).toBeGreaterThan(0);
      expect(request, id).toBeGreaterThan(0);
      // One attempt, connection plus request, within half the function's time: room for a retry and the answer.
      expect(connection + request, id).toBeLessThanOrEqual((p.Timeout * 1000) / 2);
    }
  });

  it('alarms on aborted epochs, the coordinator\'s epochsAborted count', () => {
    const alarm = of(resources, 'AWS::CloudWatch::Alarm').map(([, r]) => r.Properties!).find((a) => a.MetricName === EPOCHS_ABORTED_METRIC);
    expect(alarm).toMatchObject({
      Namespace: METRICS_NAMESPACE,
      Dimensions: [{ Name: 'service', Value: q5.name }],
      Statistic: 'Sum',
      Period: ABORTED_EPOCHS_PERIOD.toSeconds(),
      EvaluationPeriods: 1,
      Threshold: ABORTED_EPOCHS_THRESHOLD,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'notBreaching',
    });
    expect(job.alarms.map((a) => a.node.id)).toContain('AbortedEpochsAlarm');
  });

  it('builds the dashboard from the handlers\' metrics with the stage dimension, and backoffs by partition', () => {
    const body = JSON.parse(of(resources, 'AWS::CloudWatch::Dashboard')[0][1].Properties!.DashboardBody['Fn::Join'][1].map((p: unknown) => (typeof p === 'string' ? p : 'X')).join('')) as {
      widgets: { properties: { metrics?: unknown[][] } }[];
    };
    const own = body.widgets.flatMap((w) => w.properties.metrics ?? []).filter((m) => m[0] === METRICS_NAMESPACE);
    const stageOf = (name: string) => own.filter((m) => m[1] === name).map((m) => m.slice(2, m.length - (typeof m[m.length - 1] === 'object' ? 1 : 0)));
    for (const name of [OPERATOR_METRICS.recordsIn, OPERATOR_METRICS.lag, OPERATOR_METRICS.deadLetters, OPERATOR_METRICS.groupRetries, OPERATOR_METRICS.stalledPartitions]) {
      expect(stageOf(name).map((d) => JSON.stringify(d)).sort(), name).toEqual(plan.stages.map((s) => JSON.stringify([METRIC_DIMENSIONS.service, q5.name, METRIC_DIMENSIONS.stage, String(s.id)])).sort());
    }
    const searches = body.widgets.flatMap((w) => w.properties.metrics ?? []).map((m) => (m[0] as { expression?: string }).expression).filter((e) => e?.startsWith('SEARCH'));
    expect(searches).toEqual(expect.arrayContaining([expect.stringContaining(`MetricName="${OPERATOR_METRICS.groupRetries}"`), expect.stringContaining(`MetricName="${OPERATOR_METRICS.stalledPartitions}"`)]));
    for (const e of searches) expect(e).toContain(`${METRIC_DIMENSIONS.partition},${METRIC_DIMENSIONS.service},${METRIC_DIMENSIONS.stage}`);
  });
});

describe('SDK timeouts for a function timeout', () => {
  it('scale with it and stop at 3 s and 10 s', () => {
    expect(sdkTimeouts(Duration.seconds(1))).toEqual({ connectionTimeoutMs: 100, requestTimeoutMs: 250 });
    expect(sdkTimeouts(Duration.seconds(15))).toEqual({ connectionTimeoutMs: 1_500, requestTimeoutMs: 3_750 });
    expect(sdkTimeouts(Duration.seconds(30))).toEqual({ connectionTimeoutMs: 3_000, requestTimeoutMs: 7_500 });
    expect(sdkTimeouts(Duration.seconds(900))).toEqual({ connectionTimeoutMs: 3_000, requestTimeoutMs: 10_000 });
  });
});

describe('names come from props, not the synthesizing shell', () => {
  const saved = process.env[HANDLER_ENV.queuePrefix];
  afterEach(() => {
    if (saved === undefined) delete process.env[HANDLER_ENV.queuePrefix];
    else process.env[HANDLER_ENV.queuePrefix] = saved;
  });

  it('ignores SLUICE_QUEUE_PREFIX in the environment of the synth', () => {
    process.env[HANDLER_ENV.queuePrefix] = 'shell-';
    const { resources } = jobStack({ queuePrefix: '' });
    const names = of(resources, 'AWS::SQS::Queue').map(([, q]) => q.Properties!.QueueName as string);
    expect(names).toContain(stageQueueName(q5.name, 0));
    expect(names.some((n) => n.startsWith('shell-'))).toBe(false);
    for (const [, f] of of(resources, 'AWS::Lambda::Function')) expect(f.Properties!.Environment.Variables[HANDLER_ENV.queuePrefix]).toBe('');
  });
});

describe('a bare CDK app', () => {
  it('synthesizes the construct with no context and no feature flags (no cdk.json)', () => {
    const app = new App();
    expect(Object.keys(app.node.getAllContext()).filter((k) => k.startsWith('@aws-cdk/'))).toEqual([]);
    const stack = new Stack(app, 'Bare');
    new SluiceJob(stack, 'Job', { job: q5, jobModule: EXAMPLE_JOB_MODULE });
    const template = Template.fromStack(stack);
    template.resourceCountIs('AWS::Lambda::Function', plan.stages.length + 1);
    template.resourceCountIs('AWS::SQS::Queue', 2 * plan.stages.length);
  });
});

describe('the bill at zero traffic', () => {
  // Resource types billed only per request, per byte stored or not at all. A new type with
  // a monthly charge (a KMS key, a NAT gateway, provisioned concurrency) must be priced in
  // idleMonthly, or the README's "costs storage plus the dashboard and alarms" is false.
  const PER_REQUEST_OR_FREE = new Set([
    'AWS::S3::Bucket', 'AWS::S3::BucketPolicy', 'AWS::DynamoDB::Table', 'AWS::SQS::Queue', 'AWS::SQS::QueuePolicy',
    'AWS::Logs::LogGroup', 'AWS::IAM::Role', 'AWS::IAM::Policy', 'AWS::Lambda::Function', 'AWS::Lambda::EventSourceMapping',
    'AWS::Lambda::Permission', 'AWS::ApiGatewayV2::Api', 'AWS::ApiGatewayV2::Integration', 'AWS::ApiGatewayV2::Route',
    'AWS::ApiGatewayV2::Stage', 'AWS::ApiGatewayV2::Authorizer', 'AWS::StepFunctions::StateMachine', 'Custom::S3AutoDeleteObjects',
    'AWS::CDK::Metadata',
  ]);
  const MONTHLY = new Set(['AWS::CloudWatch::Dashboard', 'AWS::CloudWatch::Alarm']);

  it('is the dashboard and the alarms only, as idleMonthly prices them', () => {
    for (const { resources } of [exampleApp(), jobStack({ checkpoints: checkpointStateMachine, removalPolicy: RemovalPolicy.DESTROY, ingestion: { auth: { kind: 'apiKey', keySha256: ['a'.repeat(64)] } } })]) {
      const types: Record<string, number> = {};
      for (const r of Object.values(resources)) types[r.Type] = (types[r.Type] ?? 0) + 1;
      expect(Object.keys(types).filter((t) => !PER_REQUEST_OR_FREE.has(t) && !MONTHLY.has(t)), 'resource types with an unpriced idle cost').toEqual([]);
      const idle = idleMonthly(types);
      expect(idle.dashboards).toBe(1);
      expect(idle.alarms).toBe(types['AWS::CloudWatch::Alarm']);
      expect(idle.dollars).toBeCloseTo(3 + 0.1 * idle.alarms, 10);
    }
  });
});
