/**
 * SluiceJob's options, validation at synth (typed error naming the prop, what was
 * expected and what was received) and grant helpers.
 */
import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import { Match } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Job, Sinks } from '../../lib/index.ts';
import type { CheckpointStateMachineFactory } from '../../infra/checkpoints.ts';
import { SluiceJobPropsError } from '../../infra/errors.ts';
import { HANDLER_ENV } from '../../infra/handler-environment.ts';
import type { SluiceJobProps } from '../../infra/props.ts';
import { actions, allStatements, jobStack, logicalId, nagFindings, roleStatements } from './support/stacks.ts';

const DIGEST = 'a'.repeat(64);

function propsError(props: Partial<SluiceJobProps>): SluiceJobPropsError {
  try {
    jobStack(props);
  } catch (e) {
    expect(e).toBeInstanceOf(SluiceJobPropsError);
    return e as SluiceJobPropsError;
  }
  throw new Error(`no error for ${JSON.stringify(props)}`);
}

describe('validation at synth', () => {
  it.each([
    [{ maxConcurrency: 1 }, 'maxConcurrency', 'an integer from 2 to 1000', '1'],
    [{ maxConcurrency: 2.5 }, 'maxConcurrency', 'an integer from 2 to 1000', '2.5'],
    [{ operatorTimeout: Duration.minutes(16) }, 'operatorTimeout', 'a duration from 1 s to 900 s', '960 s'],
    [{ operatorMemorySize: 64 }, 'operatorMemorySize', 'an integer from 128 to 10240', '64'],
    [{ queuePrefix: 'bad.prefix' }, 'queuePrefix', 'letters, digits', '"bad.prefix"'],
    [{ ingestion: { kind: 'functionUrl', auth: { kind: 'jwt', issuer: 'https://id.example.com', audience: ['x'] } } }, 'ingestion.auth', "{ kind: 'iam' } for a Function URL", '"jwt"'],
    [{ ingestion: { auth: { kind: 'jwt', issuer: 'http://id.example.com', audience: ['x'] } } }, 'ingestion.auth.issuer', 'an https:// issuer URL', '"http://id.example.com"'],
    [{ ingestion: { auth: { kind: 'apiKey', keySha256: ['not-a-digest'] } } }, 'ingestion.auth.keySha256', 'SHA-256 digests as 64 lowercase hex', '"not-a-digest"'],
    [{ ingestion: { timeout: Duration.seconds(31) } }, 'ingestion.timeout', 'a duration from 1 s to 30 s', '31 s'],
    [{ ingestion: { backPressure: { maxQueueAge: Duration.seconds(30) } } }, 'ingestion.backPressure.maxQueueAge', 'a duration from 60 s to 1209600 s', '30 s'],
    [{ ingestion: { backPressure: { maxQueuedMessages: 0 } } }, 'ingestion.backPressure.maxQueuedMessages', 'an integer from 1 to 1000000000', '0'],
    [{ retention: { spilledEnvelopes: Duration.days(3) } }, 'retention.spilledEnvelopes', 'at least 18', '3 days'],
    [{ logLevel: 'TRACE' as never }, 'logLevel', 'DEBUG, INFO, WARN, ERROR', '"TRACE"'],
    [{ stageMaxConcurrency: { nope: 4 } }, 'stageMaxConcurrency.nope', 'a stage of job "nexmark-q5" (events, bids-per-auction, hot-items)', 'no such stage'],
    [{ stageMaxConcurrency: { 'hot-items': 1 } }, 'stageMaxConcurrency.hot-items', 'an integer from 2 to 1000', '1'],
  ] as [Partial<SluiceJobProps>, string, string, string][])('%j -> %s', (props, field, expected, received) => {
    const e = propsError(props);
    expect(e.field).toBe(field);
    expect(e.expected).toContain(expected);
    expect(e.received).toBe(received);
    expect(e.message).toBe(`${field}: expected ${e.expected}, received ${received}`);
  });

  it('rejects a job whose sources AWS cannot feed (only ingestion streams enter through the endpoint)', () => {
    const job = new Job('items-job');
    job.fromItems('numbers', [1, 2, 3]).sinkTo(Sinks.collect(), 'out');
    const e = propsError({ job });
    expect(e.field).toBe('job source "numbers"');
    expect(e.received).toBe('a items source');
  });

  it('rejects a missing job with the same typed error', () => {
    const e = propsError({ job: undefined as never });
    expect(e.field).toBe('job');
  });
});

describe('options', () => {
  it('applies maxConcurrency to every stage and sizes visibility timeouts from operatorTimeout', () => {
    const { template } = jobStack({ maxConcurrency: 7, operatorTimeout: Duration.seconds(60) });
    template.allResourcesProperties('AWS::Lambda::EventSourceMapping', { ScalingConfig: { MaximumConcurrency: 7 } });
    const queues = Object.values(template.findResources('AWS::SQS::Queue')).filter((q) => q.Properties.RedrivePolicy);
    expect(queues.map((q) => q.Properties.VisibilityTimeout)).toEqual([360, 360, 360]);
  });

  it('deploys at the parallelism it is given: the plan, SLUICE_PARALLELISM, concurrency per stage, the functions a rescale changes', () => {
    const { template, job } = jobStack({ parallelism: { default: 4, operators: { 'hot-items': 12 } }, stageMaxConcurrency: { 'bids-per-auction': 20 } });
    expect(job.plan.stages.map((s) => s.parallelism)).toEqual([4, 4, 12]);
    const mappings = Object.values(template.findResources('AWS::Lambda::EventSourceMapping')).map((m) => m.Properties.ScalingConfig.MaximumConcurrency);
    expect(mappings.sort((a: number, b: number) => a - b)).toEqual([4, 10, 20]);
    const fns = Object.values(template.findResources('AWS::Lambda::Function')).map((f) => f.Properties.Environment?.Variables ?? {});
    const planFns = fns.filter((v) => v[HANDLER_ENV.table] !== undefined);
    expect(planFns.length).toBeGreaterThanOrEqual(4);
    for (const v of planFns) expect(v[HANDLER_ENV.parallelism]).toBe('{"default":4,"operators":{"hot-items":12}}');
    // Stage functions name the ingest and checkpoint functions (sluice rescale gives them the new parallelism too).
    expect(fns.filter((v) => v[HANDLER_ENV.jobFunctions] !== undefined)).toHaveLength(3);
  });

  it('refuses a parallelism for an operator the job does not have', () => {
    expect(() => jobStack({ parallelism: { operators: { nope: 2 } } })).toThrow(/operator "nope": expected a parallelism for an operator of job "nexmark-q5"/);
  });

  it('gives the ingest function its back-pressure bounds; only an age bound (or shedding by lag) lets it read CloudWatch', () => {
    const ingest = (t: ReturnType<typeof jobStack>) => Object.entries(t.resources).find(([, r]) => r.Type === 'AWS::Lambda::Function' && String(r.Properties?.Description).endsWith('ingestion endpoint'))!;
    const plain = jobStack({}, { nag: true });
    const [, plainFn] = ingest(plain);
    expect(plainFn.Properties!.Environment.Variables[HANDLER_ENV.ingestMaxQueuedMessages]).toBeUndefined();
    expect(plainFn.Properties!.Environment.Variables[HANDLER_ENV.ingestMaxQueueAgeSeconds]).toBeUndefined();
    expect(allStatements(plain.resources).filter((s) => actions(s.statement).includes('cloudwatch:GetMetricData'))).toEqual([]);

    const bounded = jobStack({ ingestion: { backPressure: { maxQueuedMessages: 500, maxQueueAge: Duration.minutes(3) } } }, { nag: true });
    const [, fn] = ingest(bounded);
    expect(fn.Properties!.Environment.Variables).toMatchObject({ [HANDLER_ENV.ingestMaxQueuedMessages]: '500', [HANDLER_ENV.ingestMaxQueueAgeSeconds]: '180' });
    const role = fn.Properties!.Role['Fn::GetAtt'][0] as string;
    const reads = roleStatements(bounded.resources, role).filter((s) => actions(s).includes('cloudwatch:GetMetricData'));
    expect(reads).toEqual([expect.objectContaining({ Effect: 'Allow', Action: 'cloudwatch:GetMetricData', Resource: '*' })]);
    // Granted to the ingest function alone, and suppressed for it with its reason.
    expect(allStatements(bounded.resources).filter((s) => actions(s.statement).includes('cloudwatch:GetMetricData'))).toHaveLength(1);
    expect(nagFindings(bounded.stack).errors).toEqual([]);
  });

  it('lets the ingest function read queue ages when a stream sheds by lag', () => {
    const shedding = new Job('shed-by-lag');
    shedding.ingest<{ id: string }>('events', { shed: { whenLagMs: 120_000, drop: 'newest' } }).sinkTo(Sinks.stdout(), 'out');
    const t = jobStack({ job: shedding }, { nag: true });
    const [, fn] = Object.entries(t.resources).find(([, r]) => r.Type === 'AWS::Lambda::Function' && String(r.Properties?.Description).endsWith('ingestion endpoint'))!;
    const reads = roleStatements(t.resources, fn.Properties!.Role['Fn::GetAtt'][0] as string).filter((s) => actions(s).includes('cloudwatch:GetMetricData'));
    expect(reads).toEqual([expect.objectContaining({ Effect: 'Allow', Action: 'cloudwatch:GetMetricData', Resource: '*' })]);
    expect(nagFindings(t.stack).errors).toEqual([]);
  });

  it('prefixes queue names and tells the handlers the prefix', () => {
    const { template } = jobStack({ queuePrefix: 'blue-' });
    template.hasResourceProperties('AWS::SQS::Queue', { QueueName: 'blue-nexmark-q5-s0.fifo' });
    template.hasResourceProperties('AWS::SQS::Queue', { QueueName: 'blue-nexmark-q5-s2-dlq.fifo' });
    template.hasResourceProperties('AWS::Lambda::Function', { Environment: { Variables: { [HANDLER_ENV.queuePrefix]: 'blue-' } } });
  });

  it('turns FIFO high throughput off when asked (queue-wide deduplication and throughput)', () => {
    const { template } = jobStack({ highThroughputFifo: false });
    template.allResourcesProperties('AWS::SQS::Queue', { DeduplicationScope: Match.absent(), FifoThroughputLimit: Match.absent() });
  });

  it('serves a Function URL with AWS_IAM auth, grantable with lambda:InvokeFunctionUrl', () => {
    const { stack, job, template, resources } = jobStack({ ingestion: { kind: 'functionUrl' } }, { nag: true, configure: (s, j) => j.grantPublish(new iam.Role(s, 'Publisher', { assumedBy: new iam.AccountRootPrincipal() })) });
    template.resourceCountIs('AWS::ApiGatewayV2::Api', 0);
    template.hasResourceProperties('AWS::Lambda::Url', { AuthType: 'AWS_IAM', TargetFunctionArn: { 'Fn::GetAtt': [logicalId(stack, job.ingestion.function.fn), 'Arn'] } });
    const publisher = roleStatements(resources, logicalId(stack, stack.node.findChild('Publisher')));
    expect(publisher.flatMap(actions)).toContain('lambda:InvokeFunctionUrl');
    template.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: 'Url5xxCount', Namespace: 'AWS/Lambda' });
    expect(nagFindings(stack).errors).toEqual([]);
  });

  it('grants publishing on the events route of the IAM-authenticated HTTP API only', () => {
    const { stack, resources } = jobStack({}, { configure: (s, j) => j.grantPublish(new iam.Role(s, 'Publisher', { assumedBy: new iam.AccountRootPrincipal() })) });
    const [statement] = roleStatements(resources, logicalId(stack, stack.node.findChild('Publisher')));
    expect(statement.Action).toBe('execute-api:Invoke');
    expect(JSON.stringify(statement.Resource)).toContain('/$default/POST/streams/*/events');
  });

  it('authenticates with a JWT authorizer on every route; grantPublish refuses (IAM cannot grant it)', () => {
    const { job, template, resources } = jobStack({ ingestion: { auth: { kind: 'jwt', issuer: 'https://id.example.com', audience: ['sluice'] } } });
    template.hasResourceProperties('AWS::ApiGatewayV2::Authorizer', { AuthorizerType: 'JWT', JwtConfiguration: { Issuer: 'https://id.example.com', Audience: ['sluice'] } });
    const routes = Object.values(resources).filter((r) => r.Type === 'AWS::ApiGatewayV2::Route');
    expect(routes).toHaveLength(2);
    for (const r of routes) expect(r.Properties).toMatchObject({ AuthorizationType: 'JWT', AuthorizerId: expect.anything() });
    expect(() => job.grantPublish(new iam.AnyPrincipal())).toThrow(SluiceJobPropsError);
  });

  it('checks an x-api-key header with a Lambda authorizer holding digests only', () => {
    const { stack, job, template, resources } = jobStack({ ingestion: { auth: { kind: 'apiKey', keySha256: [DIGEST] } } }, { nag: true });
    template.hasResourceProperties('AWS::ApiGatewayV2::Authorizer', { AuthorizerType: 'REQUEST', IdentitySource: ['$request.header.x-api-key'], EnableSimpleResponses: true, AuthorizerResultTtlInSeconds: 300 });
    for (const r of Object.values(resources).filter((x) => x.Type === 'AWS::ApiGatewayV2::Route')) expect(r.Properties!.AuthorizationType).toBe('CUSTOM');
    template.hasResourceProperties('AWS::Lambda::Function', { Environment: { Variables: { [HANDLER_ENV.apiKeyHashes]: DIGEST } } });
    // The authorizer's role can write its logs and nothing else.
    expect(roleStatements(resources, logicalId(stack, job.ingestion.authorizer!.role)).flatMap(actions)).toEqual(['logs:CreateLogStream', 'logs:PutLogEvents']);
    expect(nagFindings(stack).errors).toEqual([]);
  });

  it('encrypts queues, table and bucket with a customer managed key, still without wildcard actions', () => {
    const { stack, template, resources } = jobStack((s) => ({ encryptionKey: new kms.Key(s, 'Key', { enableKeyRotation: true }) }), { nag: true });
    const key = { 'Fn::GetAtt': [logicalId(stack, stack.node.findChild('Key')), 'Arn'] };
    template.allResourcesProperties('AWS::SQS::Queue', { KmsMasterKeyId: key, KmsDataKeyReusePeriodSeconds: 900 });
    template.hasResourceProperties('AWS::DynamoDB::Table', { SSESpecification: { SSEEnabled: true, SSEType: 'KMS', KMSMasterKeyId: key } });
    template.hasResourceProperties('AWS::S3::Bucket', { BucketEncryption: { ServerSideEncryptionConfiguration: [{ BucketKeyEnabled: true, ServerSideEncryptionByDefault: { SSEAlgorithm: 'aws:kms', KMSMasterKeyID: key } }] } });
    const allows = allStatements(resources).filter(({ statement }) => statement.Effect === 'Allow' && statement.Principal === undefined);
    expect(allows.flatMap(({ statement }) => actions(statement)).filter((a) => a.startsWith('kms:'))).not.toHaveLength(0);
    expect(allows.filter(({ statement }) => actions(statement).some((a) => a.includes('*')))).toEqual([]);
    expect(nagFindings(stack).errors).toEqual([]);
  });

  it('destroys table, buckets (emptied first) and log groups with the stack only when asked (default: retain)', () => {
    const { template, stack } = jobStack({ removalPolicy: RemovalPolicy.DESTROY }, { nag: true });
    template.hasResource('AWS::DynamoDB::Table', { DeletionPolicy: 'Delete' });
    template.allResources('AWS::S3::Bucket', { DeletionPolicy: 'Delete' });
    template.allResources('AWS::Logs::LogGroup', { DeletionPolicy: 'Delete' });
    // Versioned, and receiving access logs: CloudFormation deletes only empty buckets.
    template.resourceCountIs('Custom::S3AutoDeleteObjects', 2);
    expect(nagFindings(stack).errors).toEqual([]);
    const retained = jobStack({});
    retained.template.resourceCountIs('Custom::S3AutoDeleteObjects', 0);
  });
});

describe('grants', () => {
  it('grantReadResults reads the sink stages\' log groups and nothing else', () => {
    const { stack, job, resources } = jobStack({}, { configure: (s, j) => j.grantReadResults(new iam.Role(s, 'Reader', { assumedBy: new iam.AccountRootPrincipal() })) });
    const statements = roleStatements(resources, logicalId(stack, stack.node.findChild('Reader')));
    expect(statements).toHaveLength(1);
    expect(actions(statements[0])).toEqual(expect.arrayContaining(['logs:FilterLogEvents', 'logs:GetLogEvents']));
    const group = logicalId(stack, job.stages[2].operator.logGroup);
    const resource = JSON.stringify(statements[0].Resource);
    expect(resource).toContain(group);
    for (const other of Object.keys(resources).filter((id) => resources[id].Type === 'AWS::Logs::LogGroup' && id !== group)) expect(resource).not.toContain(other);
  });
});

describe('checkpoint state machine hook', () => {
  const factory: CheckpointStateMachineFactory = (scope, ctx) => {
    const task = ctx.newFunction('Coordinator', `${import.meta.dirname}/../../infra/functions/api-key-authorizer.ts`);
    ctx.grantCoordinator(task.fn);
    ctx.grantInjectBarriers(task.fn);
    return new sfn.StateMachine(scope, 'StateMachine', {
      definitionBody: sfn.DefinitionBody.fromChainable(new sfn.Pass(scope, 'Epoch')),
      logs: { destination: ctx.logGroup, level: sfn.LogLevel.ALL },
      tracingEnabled: true,
    });
  };

  it('builds the state machine with its log group, alarm and dashboard row; its tasks get checkpoint storage only', () => {
    const { stack, job, template, resources } = jobStack({ checkpoints: factory }, { nag: true });
    expect(job.stateMachine).toBeDefined();
    template.hasResourceProperties('AWS::StepFunctions::StateMachine', {
      LoggingConfiguration: { Level: 'ALL', Destinations: [{ CloudWatchLogsLogGroup: { LogGroupArn: { 'Fn::GetAtt': [logicalId(stack, job.checkpointLogGroup!), 'Arn'] } } }] },
    });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', { Metrics: Match.arrayWith([Match.objectLike({ Expression: 'failed + timedOut + aborted' })]) });
    const task = job.functions.find((f) => f.fn.node.id === 'Coordinator')!;
    const statements = roleStatements(resources, logicalId(stack, task.role));
    const table = statements.find((s) => actions(s).includes('dynamodb:PutItem'))!;
    expect(table.Condition).toEqual({ 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['nexmark-q5#c'] } });
    const objects = statements.find((s) => actions(s).includes('s3:DeleteObject'))!;
    expect(JSON.stringify(objects.Resource)).toMatch(/snapshots\/\*.*manifests\/\*.*checkpoints\/\*/);
    const sends = statements.find((s) => actions(s).includes('sqs:SendMessage'))!;
    expect(sends.Resource).toEqual({ 'Fn::GetAtt': [logicalId(stack, job.stages[0].queue), 'Arn'] });
    // The suppressed Resource "*" of the state machine role covers log delivery and X-Ray only.
    const machineRole = (job.stateMachine as sfn.StateMachine).role;
    const star = roleStatements(resources, logicalId(stack, machineRole)).filter((s) => s.Resource === '*');
    expect(star.flatMap(actions).every((a) => /^(logs|xray):/.test(a))).toBe(true);
    expect(nagFindings(stack).errors).toEqual([]);
  });
});
