/**
 * SluiceJob.grantOperate: the calls `sluice checkpoints|savepoint|restore|rescale --target aws`
 * make (lib/cli/checkpoints-aws.ts, rescale.ts, lib/aws/deployment.ts, savepoints.ts,
 * savepoint-remap.ts, restore.ts, restore-partition.ts, job-control.ts, deployed-parallelism.ts), evaluated with
 * @cloud-copilot/iam-simulate against the synthesised policies (intrinsics resolved to
 * the ARNs a deployment would have): the granted role may make each call; a role without
 * the grant (one that may publish and read results) may make none; and the granted role
 * is refused what the commands never do.
 */
import { runSimulation } from '@cloud-copilot/iam-simulate';
import * as iam from 'aws-cdk-lib/aws-iam';
import { describe, expect, it } from 'vitest';
import { job as q5 } from '../../examples/nexmark/q5.ts';
import { checkpointStateMachine } from '../../infra/checkpoint-state-machine.ts';
import { IntrinsicResolver, type Physical } from '../../lib/testing/local-aws/assembly/intrinsics.ts';
import { stageQueueName, stateTableName } from '../../lib/aws/naming.ts';
import { type CfnResource, jobStack, logicalId, nagFindings, roleStatements } from './support/stacks.ts';

const REGION = 'us-east-1';
const ACCOUNT = '123456789012';
const PREFIX = 'Test-';
const job = q5.name;
const { stack, job: sluice, resources } = jobStack({ checkpoints: checkpointStateMachine }, {
  nag: true,
  configure: (s, j) => {
    j.grantOperate(new iam.Role(s, 'Operator', { assumedBy: new iam.AccountRootPrincipal() }));
    const other = new iam.Role(s, 'Bystander', { assumedBy: new iam.AccountRootPrincipal() });
    j.grantPublish(other);
    j.grantReadResults(other);
  },
});

/** What Ref and Fn::GetAtt give for each resource in a deployment to REGION/ACCOUNT. */
function physicalIds(res: Record<string, CfnResource>): Map<string, Physical> {
  const out = new Map<string, Physical>();
  const arn = (service: string, resource: string) => `arn:aws:${service}:${REGION}:${ACCOUNT}:${resource}`;
  for (const [id, r] of Object.entries(res)) {
    const p = r.Properties ?? {};
    switch (r.Type) {
      case 'AWS::DynamoDB::Table':
        out.set(id, { ref: p.TableName, attributes: { Arn: arn('dynamodb', `table/${p.TableName}`) } });
        break;
      case 'AWS::SQS::Queue':
        out.set(id, { ref: `https://sqs.${REGION}.amazonaws.com/${ACCOUNT}/${p.QueueName}`, attributes: { Arn: arn('sqs', p.QueueName), QueueName: p.QueueName } });
        break;
      case 'AWS::S3::Bucket':
        out.set(id, { ref: id.toLowerCase(), attributes: { Arn: `arn:aws:s3:::${id.toLowerCase()}` } });
        break;
      case 'AWS::Lambda::Function':
      case 'AWS::IAM::Role':
      case 'AWS::Logs::LogGroup':
        out.set(id, { ref: id, attributes: { Arn: arn(r.Type === 'AWS::IAM::Role' ? 'iam' : r.Type === 'AWS::Logs::LogGroup' ? 'logs' : 'lambda', r.Type === 'AWS::Logs::LogGroup' ? `log-group:${id}:*` : `function:${id}`) } });
        break;
      case 'AWS::StepFunctions::StateMachine':
        out.set(id, { ref: arn('states', `stateMachine:${id}`), attributes: { Name: id } });
        break;
      default:
        out.set(id, { ref: id, attributes: {} });
    }
  }
  return out;
}

const resolver = new IntrinsicResolver({ region: REGION, accountId: ACCOUNT, partition: 'aws', urlSuffix: 'amazonaws.com', stackName: stack.stackName, stackId: 'stack', physical: physicalIds(resources), parameters: {}, conditions: {}, mappings: {} });
const policyOf = (roleConstruct: unknown) => ({ Version: '2012-10-17', Statement: resolver.resolve(roleStatements(resources, logicalId(stack, roleConstruct)), 'role policy') });
const physical = physicalIds(resources);
const arnOf = (construct: unknown) => physical.get(logicalId(stack, construct))!.attributes.Arn;
const refOf = (construct: unknown) => physical.get(logicalId(stack, construct))!.ref;

interface Call {
  readonly action: string;
  readonly resource: string;
  readonly context?: Record<string, string | string[]>;
}

async function allowed(role: unknown, call: Call): Promise<boolean> {
  const result = await runSimulation(
    {
      request: {
        principal: arn('iam', 'role/x'),
        action: call.action,
        resource: { resource: call.resource, accountId: ACCOUNT },
        contextVariables: { 'aws:SecureTransport': 'true', 'aws:PrincipalAccount': ACCOUNT, 'aws:RequestedRegion': REGION, ...call.context },
      },
      identityPolicies: [{ name: 'policy', policy: policyOf(role) }],
      serviceControlPolicies: [],
      resourceControlPolicies: [],
    },
    {},
  );
  if (result.resultType === 'error') throw new Error(`simulator: ${JSON.stringify(result.errors)}`);
  return result.overallResult === 'Allowed';
}
function arn(service: string, resource: string) {
  return `arn:aws:${service}:${REGION}:${ACCOUNT}:${resource}`;
}

const table = arn('dynamodb', `table/${stateTableName(job, PREFIX)}`);
const keys = (...k: string[]) => ({ 'dynamodb:LeadingKeys': k });
const bucket = () => arnOf(sluice.bucket);
const object = (key: string) => `${bucket()}/${key}`;
const queue = (stage: number) => arn('sqs', stageQueueName(job, stage, PREFIX));
const machine = () => refOf(sluice.stateMachine);
/** The event source mapping of a stage's queue: its Ref is the mapping's UUID. */
const mapping = (stage: number) => {
  const id = Object.entries(resources).find(([, r]) => r.Type === 'AWS::Lambda::EventSourceMapping' && r.Properties!.EventSourceArn['Fn::GetAtt'][0] === logicalId(stack, sluice.stages[stage].queue))![0];
  return arn('lambda', `event-source-mapping:${physical.get(id)!.ref}`);
};

/** Every call of the three commands on this job (Q5: stage 0 fed by the source, 1 and 2 by stages). */
const commandCalls = (): Call[] => [
  // Finding the deployed job (deployment.ts).
  ...[0, 1, 2].flatMap((s) => [
    { action: 'sqs:GetQueueUrl', resource: queue(s) },
    { action: 'sqs:GetQueueAttributes', resource: queue(s) },
  ]),
  { action: 'lambda:ListEventSourceMappings', resource: '*' },
  { action: 'lambda:GetFunctionConfiguration', resource: arnOf(sluice.stages[0].operator.fn) },
  // status: the stages' metrics (scaling advice).
  { action: 'cloudwatch:GetMetricData', resource: '*' },
  // Coordinator items: lease, pointer, record, savepoint request (read, compare-and-set).
  { action: 'dynamodb:GetItem', resource: table, context: keys(`${job}#c`) },
  { action: 'dynamodb:PutItem', resource: table, context: keys(`${job}#c`) },
  // Listing checkpoints and savepoints, loading a restore point.
  { action: 's3:ListBucket', resource: bucket() },
  ...['checkpoints/3.json', 'manifests/3.json', 'snapshots/3/0-1.json', 'savepoints/sp/meta.json', 'input-log/0/1/x'].map((k) => ({ action: 's3:GetObject', resource: object(`${job}/${k}`) })),
  // Installable and remapped manifests beside a savepoint's copy.
  { action: 's3:PutObject', resource: object(`${job}/savepoints/sp/manifest.json`) },
  { action: 's3:PutObject', resource: object(`${job}/savepoints/sp/plans/abc/0-1.json`) },
  // Restore: heads, partition rewrite, input log replay, activity touch.
  { action: 'dynamodb:GetItem', resource: table, context: keys(`${job}#p#2#1`) },
  { action: 'dynamodb:Query', resource: table, context: keys(`${job}#p#0#0`) },
  { action: 'dynamodb:Query', resource: table, context: keys(`${job}#s#1#17`) },
  { action: 'dynamodb:BatchWriteItem', resource: table, context: keys(`${job}#s#1#17`, `${job}#p#1#0`) },
  { action: 'dynamodb:PutItem', resource: table, context: keys(`${job}#p#1#0`) },
  { action: 'dynamodb:UpdateItem', resource: table, context: keys(`${job}#a`) },
  { action: 'sqs:PurgeQueue', resource: queue(1) },
  { action: 'sqs:PurgeQueue', resource: queue(2) },
  { action: 'sqs:SendMessage', resource: queue(0) },
  // Stopping and starting consumers and coordinator (job-control.ts).
  ...[0, 1, 2].flatMap((s) => [
    { action: 'lambda:GetEventSourceMapping', resource: mapping(s) },
    { action: 'lambda:UpdateEventSourceMapping', resource: mapping(s) },
  ]),
  { action: 'states:ListExecutions', resource: machine() },
  { action: 'states:StartExecution', resource: machine() },
  { action: 'states:StopExecution', resource: arn('states', `execution:${logicalId(stack, sluice.stateMachine)}:nexmark-q5-savepoint-1`) },
  // Rescale: every function that builds the plan gets the new parallelism (deployed-parallelism.ts).
  ...planFunctions().flatMap((f) => [
    { action: 'lambda:GetFunctionConfiguration', resource: arnOf(f) },
    { action: 'lambda:UpdateFunctionConfiguration', resource: arnOf(f) },
  ]),
];

/** The stage, ingest and checkpoint functions (not the authorizer, which does not build the plan). */
const planFunctions = () => sluice.functions.filter((f) => f !== sluice.ingestion.authorizer).map((f) => f.fn);

/** What the commands never do. */
const neverCalls = (): Call[] => [
  { action: 'dynamodb:Scan', resource: table },
  { action: 'dynamodb:GetItem', resource: table, context: keys('other-job#c') },
  { action: 'dynamodb:DeleteTable', resource: table },
  { action: 's3:DeleteObject', resource: object(`${job}/snapshots/3/0-1.json`) },
  { action: 's3:PutObject', resource: object(`${job}/checkpoints/3.json`) },
  { action: 's3:GetObject', resource: object(`other-job/snapshots/3/0-1.json`) },
  { action: 'sqs:PurgeQueue', resource: queue(0) },
  { action: 'sqs:ReceiveMessage', resource: queue(1) },
  { action: 'sqs:SendMessage', resource: queue(1) },
  { action: 'lambda:UpdateFunctionCode', resource: arnOf(sluice.stages[0].operator.fn) },
  { action: 'lambda:UpdateFunctionConfiguration', resource: arn('lambda', 'function:someone-elses') },
  { action: 'lambda:UpdateEventSourceMapping', resource: arn('lambda', 'event-source-mapping:someone-elses') },
  { action: 'states:DeleteStateMachine', resource: machine() },
  { action: 'states:StopExecution', resource: arn('states', 'execution:another-machine:x') },
];

describe('SluiceJob.grantOperate', () => {
  const operator = stack.node.findChild('Operator');
  const bystander = stack.node.findChild('Bystander');

  it('allows every call of sluice checkpoints|savepoint|restore|rescale --target aws', async () => {
    const denied: string[] = [];
    for (const c of commandCalls()) if (!(await allowed(operator, c))) denied.push(`${c.action} ${c.resource} ${JSON.stringify(c.context ?? {})}`);
    expect(denied).toEqual([]);
  });

  it('allows none of them to a role without the grant', async () => {
    const granted: string[] = [];
    for (const c of commandCalls()) if (await allowed(bystander, c)) granted.push(`${c.action} ${c.resource}`);
    expect(granted).toEqual([]);
  });

  it('refuses the granted role what the commands never do', async () => {
    const granted: string[] = [];
    for (const c of neverCalls()) if (await allowed(operator, c)) granted.push(`${c.action} ${c.resource} ${JSON.stringify(c.context ?? {})}`);
    expect(granted).toEqual([]);
  });

  it('has no wildcard action, and `*` only for ListEventSourceMappings and GetMetricData (they have no resource-level permission)', () => {
    const statements = roleStatements(resources, logicalId(stack, operator));
    for (const s of statements) for (const a of [s.Action].flat()) expect(a).not.toContain('*');
    const star = statements.filter((s) => s.Resource === '*' || (Array.isArray(s.Resource) && s.Resource.includes('*')));
    expect(star.map((s) => s.Action)).toEqual([['lambda:ListEventSourceMappings', 'cloudwatch:GetMetricData']]);
  });

  it('leaves cdk-nag no unsuppressed finding on the granted role (its wildcards are the prefixes, the mappings list, the executions)', () => {
    const { errors, warnings } = nagFindings(stack);
    expect([...errors, ...warnings].filter((f) => f.startsWith('/Test/Operator/'))).toEqual([]);
    // The check sees the role's findings: the bystander's publish grant (not this construct's) has one.
    expect(errors.some((f) => f.startsWith('/Test/Bystander/'))).toBe(true);
  });
});

describe("the ingest function's Idempotency-Key items", () => {
  const ingest = sluice.ingestion.function.role;
  const keyPk = `${job}#k#0123456789abcdef0123456789abcdef`;

  it('allows claiming, answering, releasing and reading its key items', async () => {
    const denied: string[] = [];
    for (const action of ['dynamodb:PutItem', 'dynamodb:GetItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem']) {
      if (!(await allowed(ingest, { action, resource: table, context: keys(keyPk) }))) denied.push(action);
    }
    expect(denied).toEqual([]);
  });

  it("refuses it every other item and what it never does on the table", async () => {
    const calls: Call[] = [
      { action: 'dynamodb:PutItem', resource: table, context: keys(`${job}#p#0#0`) },
      { action: 'dynamodb:DeleteItem', resource: table, context: keys(`${job}#s#0#1`) },
      { action: 'dynamodb:UpdateItem', resource: table, context: keys(`other-job#k#0123`) },
      { action: 'dynamodb:GetItem', resource: table, context: keys(`${job}#c`, keyPk) },
      { action: 'dynamodb:Query', resource: table, context: keys(keyPk) },
      { action: 'dynamodb:Scan', resource: table },
    ];
    const granted: string[] = [];
    for (const c of calls) if (await allowed(ingest, c)) granted.push(`${c.action} ${JSON.stringify(c.context ?? {})}`);
    expect(granted).toEqual([]);
  });
});
