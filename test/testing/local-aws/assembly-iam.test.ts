/**
 * The assembly runner's IAM checks (lib/testing/local-aws/assembly): which action, resource and
 * condition keys a request carries, taken from the requests the SDK really sends (a
 * capturing endpoint records them); and the proxy in front of DynamoDB Local and fauxqs
 * with a small hand-written template, whose one function may read some keys of its
 * table and send to its queue: allowed calls reach the servers, others are refused with
 * the service's AccessDenied error and recorded with function, action, resource, reason.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BatchWriteItemCommand, DynamoDBClient, GetItemCommand, PutItemCommand, QueryCommand, TransactWriteItemsCommand } from '@aws-sdk/client-dynamodb';
import { CopyObjectCommand, DeleteObjectsCommand, GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { DescribeExecutionCommand, SFNClient, StartExecutionCommand } from '@aws-sdk/client-sfn';
import { GetQueueUrlCommand, ReceiveMessageCommand, SendMessageBatchCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { IamAuthorizer } from '../../../lib/testing/local-aws/assembly/authorizer.ts';
import { AssemblyAccessDeniedError, type DeniedCall } from '../../../lib/testing/local-aws/assembly/errors.ts';
import { actionsOf, callerOf, type HttpRequestParts, serviceOf } from '../../../lib/testing/local-aws/assembly/iam-requests.ts';
import { provision, remove } from '../../../lib/testing/local-aws/assembly/provision.ts';
import { AssemblyProxy } from '../../../lib/testing/local-aws/assembly/proxy.ts';
import { accessKeyOf } from '../../../lib/testing/local-aws/assembly/lambda-environment.ts';
import { readAssembly } from '../../../lib/testing/local-aws/assembly/template.ts';
import { drainQueue, localClients, unique } from '../../aws/helpers.ts';

const REGION = 'us-east-1';
const ACCOUNT = '000000000000';
const credentials = { accessKeyId: 'AKIDTEST', secretAccessKey: 'x' };

/** Records every request and answers 200 `{}`: what the SDK sends, whatever it makes of the answer. */
async function capture() {
  const seen: HttpRequestParts[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(200, { 'content-type': 'application/x-amz-json-1.0' });
      res.end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { seen, endpoint, close: () => new Promise((r) => server.close(r)) };
}

const tables: Record<string, { hash: string; indexes: Record<string, string> }> = { t1: { hash: 'pk', indexes: { byOwner: 'owner' } }, t2: { hash: 'id', indexes: {} } };
const mapping = { region: REGION, accountId: ACCOUNT, keyOf: (t: string) => tables[t] };

describe('requests as IAM sees them', () => {
  let cap: Awaited<ReturnType<typeof capture>>;
  beforeAll(async () => {
    cap = await capture();
  });
  afterAll(() => cap.close());

  /** The actions of the one request `send` makes. */
  async function actions(send: () => Promise<unknown>) {
    cap.seen.length = 0;
    await send().catch(() => undefined);
    expect(cap.seen).toHaveLength(1);
    const req = cap.seen[0];
    expect(callerOf(req).accessKeyId).toBe('AKIDTEST');
    return actionsOf(serviceOf(req), req, mapping).map((a) => [a.operation, a.action, a.resource, a.context]);
  }

  it('DynamoDB: table and index ARNs, partition keys of items, keys and key conditions; one check per transaction item', async () => {
    const db = new DynamoDBClient({ region: REGION, endpoint: cap.endpoint, credentials, maxAttempts: 1 });
    const table = `arn:aws:dynamodb:${REGION}:${ACCOUNT}:table/t1`;
    expect(await actions(() => db.send(new GetItemCommand({ TableName: 't1', Key: { pk: { S: 'job#s#0#1' }, sk: { S: 'x' } } })))).toEqual([['GetItem', 'dynamodb:GetItem', table, { 'dynamodb:LeadingKeys': ['job#s#0#1'] }]]);
    expect(await actions(() => db.send(new PutItemCommand({ TableName: 't1', Item: { pk: { N: '7' }, v: { S: 'a' } }, ReturnValues: 'ALL_OLD' })))).toEqual([['PutItem', 'dynamodb:PutItem', table, { 'dynamodb:LeadingKeys': ['7'], 'dynamodb:ReturnValues': 'ALL_OLD' }]]);
    expect(
      await actions(() => db.send(new QueryCommand({ TableName: 't1', KeyConditionExpression: 'begins_with(sk, :p) AND #k = :v', ExpressionAttributeNames: { '#k': 'pk' }, ExpressionAttributeValues: { ':v': { S: 'job#p#0#3' }, ':p': { S: 'a' } } }))),
    ).toEqual([['Query', 'dynamodb:Query', table, { 'dynamodb:LeadingKeys': ['job#p#0#3'] }]]);
    expect(await actions(() => db.send(new QueryCommand({ TableName: 't1', IndexName: 'byOwner', KeyConditionExpression: 'owner = :o', ExpressionAttributeValues: { ':o': { S: 'me' } } })))).toEqual([['Query', 'dynamodb:Query', `${table}/index/byOwner`, { 'dynamodb:LeadingKeys': ['me'] }]]);
    expect(
      await actions(() =>
        db.send(
          new TransactWriteItemsCommand({
            TransactItems: [
              { Put: { TableName: 't1', Item: { pk: { S: 'a' } } } },
              { Update: { TableName: 't1', Key: { pk: { S: 'b' } }, UpdateExpression: 'SET v = :v', ExpressionAttributeValues: { ':v': { N: '1' } } } },
              { ConditionCheck: { TableName: 't2', Key: { id: { S: 'c' } }, ConditionExpression: 'attribute_exists(id)' } },
              { Delete: { TableName: 't1', Key: { pk: { S: 'd' } } } },
            ],
          }),
        ),
      ),
    ).toEqual([
      ['TransactWriteItems', 'dynamodb:PutItem', table, { 'dynamodb:LeadingKeys': ['a'] }],
      ['TransactWriteItems', 'dynamodb:UpdateItem', table, { 'dynamodb:LeadingKeys': ['b'] }],
      ['TransactWriteItems', 'dynamodb:ConditionCheckItem', `arn:aws:dynamodb:${REGION}:${ACCOUNT}:table/t2`, { 'dynamodb:LeadingKeys': ['c'] }],
      ['TransactWriteItems', 'dynamodb:DeleteItem', table, { 'dynamodb:LeadingKeys': ['d'] }],
    ]);
    expect(await actions(() => db.send(new BatchWriteItemCommand({ RequestItems: { t1: [{ PutRequest: { Item: { pk: { S: 'a' } } } }, { DeleteRequest: { Key: { pk: { S: 'b' } } } }, { PutRequest: { Item: { pk: { S: 'a' } } } }] } })))).toEqual([
      ['BatchWriteItem', 'dynamodb:BatchWriteItem', table, { 'dynamodb:LeadingKeys': ['a', 'b'] }],
    ]);
    db.destroy();
  });

  it('SQS: the queue ARN from the queue URL or name; batches are their single actions', async () => {
    const sqs = new SQSClient({ region: REGION, endpoint: cap.endpoint, credentials, maxAttempts: 1 });
    const url = `${cap.endpoint}/${ACCOUNT}/q1.fifo`;
    const arn = `arn:aws:sqs:${REGION}:${ACCOUNT}:q1.fifo`;
    expect(await actions(() => sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: [{ Id: '1', MessageBody: 'x', MessageGroupId: '0' }] })))).toEqual([['SendMessageBatch', 'sqs:SendMessage', arn, {}]]);
    expect(await actions(() => sqs.send(new ReceiveMessageCommand({ QueueUrl: url, WaitTimeSeconds: 0 })))).toEqual([['ReceiveMessage', 'sqs:ReceiveMessage', arn, {}]]);
    expect(await actions(() => sqs.send(new GetQueueUrlCommand({ QueueName: 'q1.fifo' })))).toEqual([['GetQueueUrl', 'sqs:GetQueueUrl', arn, {}]]);
    sqs.destroy();
  });

  it('S3: object ARNs (keys decoded), ListBucket on the bucket with s3:prefix, a copy reads its source, DeleteObjects per key', async () => {
    const s3 = new S3Client({ region: REGION, endpoint: cap.endpoint, credentials, forcePathStyle: true, maxAttempts: 1 });
    expect(await actions(() => s3.send(new GetObjectCommand({ Bucket: 'b1', Key: 'job/snap shots/a+b.json' })))).toEqual([['GetObject', 's3:GetObject', 'arn:aws:s3:::b1/job/snap shots/a+b.json', {}]]);
    expect(await actions(() => s3.send(new HeadObjectCommand({ Bucket: 'b1', Key: 'k' })))).toEqual([['HeadObject', 's3:GetObject', 'arn:aws:s3:::b1/k', {}]]);
    expect(await actions(() => s3.send(new PutObjectCommand({ Bucket: 'b1', Key: 'job/spill/x', Body: 'abc', IfNoneMatch: '*' })))).toEqual([['PutObject', 's3:PutObject', 'arn:aws:s3:::b1/job/spill/x', {}]]);
    expect(await actions(() => s3.send(new ListObjectsV2Command({ Bucket: 'b1', Prefix: 'job/data/' })))).toEqual([['ListObjectsV2', 's3:ListBucket', 'arn:aws:s3:::b1', { 's3:prefix': 'job/data/' }]]);
    expect(await actions(() => s3.send(new CopyObjectCommand({ Bucket: 'b1', Key: 'to/k', CopySource: 'b2/from/k' })))).toEqual([
      ['CopyObject', 's3:PutObject', 'arn:aws:s3:::b1/to/k', {}],
      ['CopyObject', 's3:GetObject', 'arn:aws:s3:::b2/from/k', {}],
    ]);
    expect(await actions(() => s3.send(new DeleteObjectsCommand({ Bucket: 'b1', Delete: { Objects: [{ Key: 'a/1' }, { Key: 'a/<2>&' }], Quiet: true } })))).toEqual([
      ['DeleteObjects', 's3:DeleteObject', 'arn:aws:s3:::b1/a/1', {}],
      ['DeleteObjects', 's3:DeleteObject', 'arn:aws:s3:::b1/a/<2>&', {}],
    ]);
    s3.destroy();
  });

  it('Step Functions: the state machine or execution ARN', async () => {
    const sfn = new SFNClient({ region: REGION, endpoint: cap.endpoint, credentials, maxAttempts: 1 });
    const sm = `arn:aws:states:${REGION}:${ACCOUNT}:stateMachine:m`;
    expect(await actions(() => sfn.send(new StartExecutionCommand({ stateMachineArn: sm, name: 'e1' })))).toEqual([['StartExecution', 'states:StartExecution', sm, {}]]);
    expect(await actions(() => sfn.send(new DescribeExecutionCommand({ executionArn: `${sm.replace('stateMachine', 'execution')}:e1` })))).toEqual([['DescribeExecution', 'states:DescribeExecution', `arn:aws:states:${REGION}:${ACCOUNT}:execution:m:e1`, {}]]);
    sfn.destroy();
  });
});

/** One function whose role reads `a#*` keys of its table, sends to its queue and reads its bucket's `in/` prefix; `evil/` is denied explicitly. */
function miniAssembly(names: { table: string; queue: string; bucket: string }): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-asm-iam-'));
  const statement = [
    { Effect: 'Allow', Action: ['dynamodb:GetItem', 'dynamodb:PutItem'], Resource: { 'Fn::GetAtt': ['Table', 'Arn'] }, Condition: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['a#*'] } } },
    { Effect: 'Allow', Action: ['sqs:SendMessage', 'sqs:GetQueueUrl'], Resource: { 'Fn::GetAtt': ['Queue', 'Arn'] } },
    { Effect: 'Allow', Action: 's3:GetObject', Resource: { 'Fn::Join': ['', [{ 'Fn::GetAtt': ['Bucket', 'Arn'] }, '/*']] } },
    { Sid: 'NoEvil', Effect: 'Deny', Action: 's3:*', Resource: { 'Fn::Sub': 'arn:${AWS::Partition}:s3:::${Bucket}/evil/*' } },
  ];
  const template = {
    Resources: {
      Table: { Type: 'AWS::DynamoDB::Table', Properties: { TableName: names.table, KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }], AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }], BillingMode: 'PAY_PER_REQUEST' } },
      Queue: { Type: 'AWS::SQS::Queue', Properties: { QueueName: names.queue } },
      Bucket: { Type: 'AWS::S3::Bucket', Properties: { BucketName: names.bucket } },
      Role: { Type: 'AWS::IAM::Role', Properties: { AssumeRolePolicyDocument: { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Principal: { Service: 'lambda.amazonaws.com' }, Action: 'sts:AssumeRole' }] } } },
      RolePolicy: { Type: 'AWS::IAM::Policy', Properties: { PolicyName: 'RolePolicy', Roles: [{ Ref: 'Role' }], PolicyDocument: { Version: '2012-10-17', Statement: statement } } },
      Fn: { Type: 'AWS::Lambda::Function', Properties: { Handler: 'index.handler', Runtime: 'nodejs22.x', Role: { 'Fn::GetAtt': ['Role', 'Arn'] }, Code: { ZipFile: 'exports.handler = async () => {}' }, Environment: { Variables: { TABLE: { Ref: 'Table' }, QUEUE: { Ref: 'Queue' } } } } },
    },
  };
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'Mini.template.json'), JSON.stringify(template));
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ version: '55.0.0', artifacts: { Mini: { type: 'aws:cloudformation:stack', properties: { templateFile: 'Mini.template.json' } } } }));
  return dir;
}

describe('the IAM-checking proxy in front of DynamoDB Local and fauxqs', () => {
  const direct = localClients();
  const names = { table: unique('asm-iam'), queue: unique('asm-iam'), bucket: unique('asm-iam').toLowerCase() };
  const denied: DeniedCall[] = [];
  const proxy = new AssemblyProxy({ upstreams: { dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint'), dynamodbClient: direct.dynamodb }, onDenied: (c) => denied.push(c) });
  let clients: { dynamodb: DynamoDBClient; sqs: SQSClient; s3: S3Client };
  let model: ReturnType<typeof readAssembly>;

  beforeAll(async () => {
    const origin = await proxy.listen();
    model = readAssembly(miniAssembly(names), { region: REGION, queueOrigin: origin });
    proxy.configure(model, new IamAuthorizer(model));
    const fn = model.functions.get('Fn')!;
    expect(fn.environment).toEqual({ TABLE: names.table, QUEUE: `${origin}/${ACCOUNT}/${names.queue}` });
    proxy.registerCaller(accessKeyOf(fn), { label: 'Fn', role: model.roles.get(fn.roleLogicalId!), session: fn.name });
    const { queueUrls } = await provision(model, direct);
    proxy.registerQueueUrl(names.queue, queueUrls.get('Queue')!);
    const common = { region: REGION, endpoint: origin, credentials: { accessKeyId: accessKeyOf(fn), secretAccessKey: 'x' }, maxAttempts: 1 };
    clients = { dynamodb: new DynamoDBClient(common), sqs: new SQSClient(common), s3: new S3Client({ ...common, forcePathStyle: true }) };
    await direct.s3.send(new PutObjectCommand({ Bucket: names.bucket, Key: 'in/x', Body: 'hello' }));
  });
  afterAll(async () => {
    Object.values(clients ?? {}).forEach((c) => c.destroy());
    await remove(model, direct).catch(() => undefined);
    await proxy.close();
    Object.values(direct).forEach((c) => c.destroy());
  });

  it('forwards allowed calls unchanged: an item under an allowed key, a message through the proxy queue URL, an object', async () => {
    await clients.dynamodb.send(new PutItemCommand({ TableName: names.table, Item: { pk: { S: 'a#1' }, v: { N: '5' } } }));
    const got = await clients.dynamodb.send(new GetItemCommand({ TableName: names.table, Key: { pk: { S: 'a#1' } } }));
    expect(got.Item?.v).toEqual({ N: '5' });
    const url = (await clients.sqs.send(new GetQueueUrlCommand({ QueueName: names.queue }))).QueueUrl!;
    expect(url).toBe(`${proxy.origin}/${ACCOUNT}/${names.queue}`);
    await clients.sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: 'via proxy' }));
    const messages = await drainQueue(direct.sqs, (await direct.sqs.send(new GetQueueUrlCommand({ QueueName: names.queue }))).QueueUrl!);
    expect(messages.map((m) => m.Body)).toEqual(['via proxy']);
    const obj = await clients.s3.send(new GetObjectCommand({ Bucket: names.bucket, Key: 'in/x' }));
    expect(await obj.Body!.transformToString()).toBe('hello');
    expect(denied).toEqual([]);
  });

  it('refuses what no statement allows, with the service\'s AccessDenied error, and records function, action, resource and reason', async () => {
    const table = `arn:aws:dynamodb:${REGION}:${ACCOUNT}:table/${names.table}`;
    // Another partition key than the condition allows: nothing is written.
    const put = await clients.dynamodb.send(new PutItemCommand({ TableName: names.table, Item: { pk: { S: 'b#1' } } })).catch((e: Error) => e);
    expect((put as Error).name).toBe('AccessDeniedException');
    expect((put as Error).message).toContain(`is not authorized to perform: dynamodb:PutItem on resource: ${table}`);
    expect((await direct.dynamodb.send(new GetItemCommand({ TableName: names.table, Key: { pk: { S: 'b#1' } } }))).Item).toBeUndefined();
    // An action the policy lacks.
    const q = await clients.dynamodb.send(new QueryCommand({ TableName: names.table, KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': { S: 'a#1' } } })).catch((e: Error) => e);
    expect((q as Error).name).toBe('AccessDeniedException');
    const s3put = await clients.s3.send(new PutObjectCommand({ Bucket: names.bucket, Key: 'in/y', Body: 'no' })).catch((e: Error) => e);
    expect((s3put as Error).name).toBe('AccessDenied');
    const receive = await clients.sqs.send(new ReceiveMessageCommand({ QueueUrl: `${proxy.origin}/${ACCOUNT}/${names.queue}`, WaitTimeSeconds: 0 })).catch((e: Error) => e);
    expect(receive).toBeInstanceOf(Error);
    expect(denied).toEqual([
      { function: 'Fn', action: 'dynamodb:PutItem', resource: table, reason: 'no statement allows it', operation: 'PutItem' },
      { function: 'Fn', action: 'dynamodb:Query', resource: table, reason: 'no statement allows it', operation: 'Query' },
      { function: 'Fn', action: 's3:PutObject', resource: `arn:aws:s3:::${names.bucket}/in/y`, reason: 'no statement allows it', operation: 'PutObject' },
      { function: 'Fn', action: 'sqs:ReceiveMessage', resource: `arn:aws:sqs:${REGION}:${ACCOUNT}:${names.queue}`, reason: 'no statement allows it', operation: 'ReceiveMessage' },
    ]);
    const err = new AssemblyAccessDeniedError(denied[0], denied);
    expect(err.message).toBe(`function Fn called dynamodb:PutItem on ${table}: denied by its role's policies (no statement allows it); 3 more denied call(s)`);
  });

  it('names the statement of an explicit deny; an unknown caller is refused', async () => {
    denied.length = 0;
    const evil = await clients.s3.send(new GetObjectCommand({ Bucket: names.bucket, Key: 'evil/x' })).catch((e: Error) => e);
    expect((evil as Error).name).toBe('AccessDenied');
    expect(denied[0]).toMatchObject({ action: 's3:GetObject', resource: `arn:aws:s3:::${names.bucket}/evil/x`, reason: 'statement "NoEvil" of policy RolePolicy denies it' });
    const stranger = new DynamoDBClient({ region: REGION, endpoint: proxy.origin, credentials: { accessKeyId: 'SOMEONEELSE', secretAccessKey: 'x' }, maxAttempts: 1 });
    const e = await stranger.send(new GetItemCommand({ TableName: names.table, Key: { pk: { S: 'a#1' } } })).catch((x: Error) => x);
    stranger.destroy();
    expect((e as Error).name).toBe('AccessDeniedException');
    expect(denied[1]).toMatchObject({ function: '(unknown caller SOMEONEELSE)', action: 'dynamodb:GetItem', reason: 'the caller has no role in the template' });
  });
});
