/**
 * The example app's template (infra/app.ts, functions/job.ts = Nexmark Q5: 3 stages of
 * 2 partitions): every resource of issue 5 with its key properties. One synth, shared.
 */
import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { job as q5 } from '../../examples/nexmark/q5.ts';
import { deadLetterQueueName, stageOfQueue, stageQueueName, stateTableName } from '../../lib/aws/naming.ts';
import { DEFAULT_MAX_MESSAGE_BYTES } from '../../lib/aws/sqs/sqs-codec.ts';
import { compile } from '../../lib/graph/compile.ts';
import { HANDLER_ENV } from '../../infra/handler-environment.ts';
import { MAX_RECEIVE_COUNT, VISIBILITY_FACTOR } from '../../infra/stages.ts';
import { METRICS_NAMESPACE } from '../../infra/monitoring.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { DEFAULT_MAX_RECEIVE_COUNT } from '../../lib/aws/operator/group-backoff.ts';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { SQSClient } from '@aws-sdk/client-sqs';
import { exampleApp, logicalId } from './support/stacks.ts';

const { stack, job, template, resources } = exampleApp();
const plan = compile(q5.graph);
const of = (type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);

describe('SluiceJob template (example job)', () => {
  it('has the shape of the compiled job: a queue, a DLQ and a function per stage, plus ingest', () => {
    expect(plan.stages.length).toBe(3);
    template.resourceCountIs('AWS::SQS::Queue', 2 * plan.stages.length);
    template.resourceCountIs('AWS::Lambda::EventSourceMapping', plan.stages.length);
    template.resourceCountIs('AWS::Lambda::Function', plan.stages.length + 1);
    template.resourceCountIs('AWS::DynamoDB::Table', 1);
    template.resourceCountIs('AWS::S3::Bucket', 2);
    template.resourceCountIs('AWS::ApiGatewayV2::Api', 1);
    template.resourceCountIs('AWS::CloudWatch::Dashboard', 1);
  });

  it('names queues as lib/aws/naming.ts does, so the handlers find them and their stage', () => {
    for (const stage of plan.stages) {
      const name = stageQueueName(q5.name, stage.id);
      template.hasResourceProperties('AWS::SQS::Queue', {
        QueueName: name,
        FifoQueue: true,
        ContentBasedDeduplication: false,
        MaximumMessageSize: DEFAULT_MAX_MESSAGE_BYTES,
        MessageRetentionPeriod: 4 * 24 * 3600,
        SqsManagedSseEnabled: true,
        RedrivePolicy: { deadLetterTargetArn: { 'Fn::GetAtt': [logicalId(stack, job.stages[stage.id].deadLetterQueue), 'Arn'] }, maxReceiveCount: MAX_RECEIVE_COUNT },
      });
      template.hasResourceProperties('AWS::SQS::Queue', {
        QueueName: deadLetterQueueName(q5.name, stage.id),
        FifoQueue: true,
        MessageRetentionPeriod: 14 * 24 * 3600,
        SqsManagedSseEnabled: true,
      });
      expect(stageOfQueue(q5.name, `arn:aws:sqs:us-east-1:123456789012:${name}`)).toBe(stage.id);
    }
  });

  it('redrives after 100 receives, the operator handler\'s own limit: for undecodable messages, far above a record\'s attempts', () => {
    expect(MAX_RECEIVE_COUNT).toBe(100);
    expect(MAX_RECEIVE_COUNT).toBe(DEFAULT_MAX_RECEIVE_COUNT);
    for (const [, q] of of('AWS::SQS::Queue')) {
      if (q.Properties!.RedrivePolicy) expect(q.Properties!.RedrivePolicy.maxReceiveCount).toBe(100);
    }
    // The handler parks a failing record after maxAttempts (at most maxReceiveCount - 1): its defaults agree with the queue.
    const clients = { sqs: new SQSClient({ region: 'us-east-1' }), dynamodb: new DynamoDBClient({ region: 'us-east-1' }) };
    expect(() => createOperatorHandler({ job: q5, ...clients, maxAttempts: MAX_RECEIVE_COUNT - 1 })).not.toThrow();
    expect(() => createOperatorHandler({ job: q5, ...clients, maxAttempts: MAX_RECEIVE_COUNT })).toThrow(/maxAttempts/);
  });

  it('feeds each stage function from its queue: batch 10, ReportBatchItemFailures, bounded concurrency', () => {
    for (const s of job.stages) {
      template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
        EventSourceArn: { 'Fn::GetAtt': [logicalId(stack, s.queue), 'Arn'] },
        FunctionName: { Ref: logicalId(stack, s.operator.fn) },
        BatchSize: 10,
        FunctionResponseTypes: ['ReportBatchItemFailures'],
        // Q5 has 2 partitions per stage: the default is min(max(2, parallelism), 10).
        ScalingConfig: { MaximumConcurrency: 2 },
      });
      const esm = of('AWS::Lambda::EventSourceMapping').find(([, r]) => r.Properties!.FunctionName.Ref === logicalId(stack, s.operator.fn))![1];
      expect(esm.Properties!.MaximumBatchingWindowInSeconds).toBeUndefined();
    }
  });

  it('sets every stage queue visibility timeout to at least 6x its function timeout', () => {
    for (const [, esm] of of('AWS::Lambda::EventSourceMapping')) {
      const fn = resources[esm.Properties!.FunctionName.Ref]!;
      const queue = resources[esm.Properties!.EventSourceArn['Fn::GetAtt'][0]]!;
      expect(fn.Properties!.Timeout).toBeGreaterThan(0);
      expect(queue.Properties!.VisibilityTimeout).toBeGreaterThanOrEqual(VISIBILITY_FACTOR * fn.Properties!.Timeout);
    }
  });

  it('runs every function on nodejs22.x, arm64, ESM bundle, own log group, source maps on', () => {
    for (const [, fn] of of('AWS::Lambda::Function')) {
      expect(fn.Properties).toMatchObject({ Runtime: 'nodejs22.x', Architectures: ['arm64'], Handler: 'index.handler' });
      expect(fn.Properties!.LoggingConfig.LogGroup).toBeDefined();
      expect(fn.Properties!.Environment.Variables[HANDLER_ENV.nodeOptions]).toBe('--enable-source-maps');
    }
    for (const s of [...job.stages.map((x) => x.operator), job.ingestion.function]) {
      template.hasResourceProperties('AWS::Lambda::Function', {
        Environment: { Variables: { [HANDLER_ENV.bucket]: { Ref: logicalId(stack, job.bucket) }, [HANDLER_ENV.queuePrefix]: '', POWERTOOLS_LOG_LEVEL: 'INFO' } },
        LoggingConfig: { LogGroup: { Ref: logicalId(stack, s.logGroup) } },
      });
    }
    template.resourceCountIs('AWS::Logs::LogGroup', plan.stages.length + 2);
    template.allResourcesProperties('AWS::Logs::LogGroup', { RetentionInDays: 30 });
  });

  it('creates the state table: on demand, PITR, TTL, encrypted, retained', () => {
    template.hasResource('AWS::DynamoDB::Table', {
      DeletionPolicy: 'Retain',
      Properties: {
        TableName: stateTableName(q5.name),
        BillingMode: 'PAY_PER_REQUEST',
        KeySchema: [
          { AttributeName: 'pk', KeyType: 'HASH' },
          { AttributeName: 'sk', KeyType: 'RANGE' },
        ],
        PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
        TimeToLiveSpecification: { AttributeName: 'expires', Enabled: true },
        SSESpecification: { SSEEnabled: true },
      },
    });
  });

  it('creates the snapshot bucket: encrypted, private, versioned, access-logged, lifecycle for spills and deleted snapshots', () => {
    template.hasResource('AWS::S3::Bucket', {
      DeletionPolicy: 'Retain',
      Properties: {
        BucketEncryption: { ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }] },
        PublicAccessBlockConfiguration: { BlockPublicAcls: true, BlockPublicPolicy: true, IgnorePublicAcls: true, RestrictPublicBuckets: true },
        VersioningConfiguration: { Status: 'Enabled' },
        LoggingConfiguration: { DestinationBucketName: { Ref: logicalId(stack, job.accessLogBucket) }, LogFilePrefix: 'snapshot-bucket/' },
        LifecycleConfiguration: {
          Rules: Match.arrayWith([
            Match.objectLike({ Id: 'abort-incomplete-uploads', AbortIncompleteMultipartUpload: { DaysAfterInitiation: 1 }, Status: 'Enabled' }),
            Match.objectLike({ Id: 'expire-spilled-envelopes', Prefix: `${q5.name}/spill/`, ExpirationInDays: 19 }),
            Match.objectLike({ Id: 'expire-deleted-snapshots', NoncurrentVersionExpiration: { NoncurrentDays: 7 }, ExpiredObjectDeleteMarker: true }),
          ]),
        },
      },
    });
    template.hasResourceProperties('AWS::S3::Bucket', {
      LifecycleConfiguration: { Rules: [Match.objectLike({ Id: 'expire-access-logs', ExpirationInDays: 90 })] },
      PublicAccessBlockConfiguration: { BlockPublicAcls: true, BlockPublicPolicy: true, IgnorePublicAcls: true, RestrictPublicBuckets: true },
    });
  });

  it('exposes POST /streams/{stream}/events and GET /healthz on an HTTP API, IAM auth on every route', () => {
    const routes = of('AWS::ApiGatewayV2::Route').map(([, r]) => r.Properties!);
    expect(routes.map((r) => r.RouteKey).sort()).toEqual(['GET /healthz', 'POST /streams/{stream}/events']);
    for (const r of routes) expect(r.AuthorizationType).toBe('AWS_IAM');
    template.hasResourceProperties('AWS::ApiGatewayV2::Integration', {
      IntegrationType: 'AWS_PROXY',
      PayloadFormatVersion: '2.0',
      IntegrationUri: { 'Fn::GetAtt': [logicalId(stack, job.ingestion.function.fn), 'Arn'] },
    });
    template.hasResourceProperties('AWS::ApiGatewayV2::Stage', {
      StageName: '$default',
      AutoDeploy: true,
      AccessLogSettings: { DestinationArn: { 'Fn::GetAtt': [logicalId(stack, job.ingestion.accessLogs!), 'Arn'] }, Format: Match.stringLikeRegexp('routeKey') },
    });
    // Nothing anonymous: no route without an authorizer, no Function URL beside the API.
    template.resourceCountIs('AWS::Lambda::Url', 0);
  });

  it('raises alarms for dead letters, lag and ingestion 5xx per the job, none for checkpoints without a state machine', () => {
    const alarms = of('AWS::CloudWatch::Alarm').map(([, r]) => r.Properties!);
    const byMetric = (name: string) => alarms.filter((a) => a.MetricName === name);
    expect(byMetric('ApproximateNumberOfMessagesVisible')).toHaveLength(plan.stages.length);
    for (const a of byMetric('ApproximateNumberOfMessagesVisible')) expect(a).toMatchObject({ Threshold: 1, ComparisonOperator: 'GreaterThanOrEqualToThreshold', TreatMissingData: 'notBreaching' });
    expect(byMetric('ApproximateAgeOfOldestMessage')).toHaveLength(plan.stages.length);
    for (const a of byMetric('ApproximateAgeOfOldestMessage')) expect(a).toMatchObject({ Threshold: 300, Statistic: 'Maximum' });
    expect(byMetric('5xx')).toHaveLength(1);
    expect(byMetric('5xx')[0]).toMatchObject({ Namespace: 'AWS/ApiGateway', Threshold: 1 });
    // A stalled partition (its group near the receive limit on infrastructure errors) is an incident:
    // on while any 5-minute sum of the last 4 hours is one, so it holds between the 3-hourly retries.
    expect(byMetric('stalledPartitions')).toHaveLength(1);
    expect(byMetric('stalledPartitions')[0]).toMatchObject({
      Namespace: METRICS_NAMESPACE,
      Dimensions: [{ Name: 'service', Value: q5.name }],
      Statistic: 'Sum',
      Period: 300,
      EvaluationPeriods: 48,
      DatapointsToAlarm: 1,
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'notBreaching',
    });
    expect(byMetric('stalledPartitions')[0].AlarmDescription).toMatch(/partition stalled/);
    expect(alarms).toHaveLength(2 * plan.stages.length + 2);
    expect(job.stateMachine).toBeUndefined();
  });

  it('builds a dashboard over the stages, the endpoint and the handlers\' own metrics', () => {
    const body = JSON.stringify(of('AWS::CloudWatch::Dashboard')[0][1].Properties!.DashboardBody);
    for (const s of plan.stages) expect(body).toContain(`Stage ${s.id} ${s.name}`);
    for (const m of ['ApproximateAgeOfOldestMessage', 'ConcurrentExecutions', '5xx', 'recordsIn', 'deadLetters', 'groupRetries', 'stalledPartitions']) expect(body).toContain(m);
  });

  it('outputs the endpoint URL, table, bucket and where results land', () => {
    const outputs = template.toJSON().Outputs as Record<string, { Value: unknown }>;
    expect(Object.keys(outputs)).toEqual(expect.arrayContaining(['EndpointUrl', 'StateTableName', 'SnapshotBucketName', 'ResultLogGroups', 'DeadLetterQueueUrls']));
    expect(JSON.stringify(outputs.EndpointUrl.Value)).toContain('execute-api');
    // Q5's sink runs in its last stage.
    expect(outputs.ResultLogGroups.Value).toEqual({ Ref: logicalId(stack, job.stages[2].operator.logGroup) });
  });
});
