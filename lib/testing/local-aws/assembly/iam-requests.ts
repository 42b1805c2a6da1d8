/**
 * What one AWS API request asks IAM for: the caller (the access key id of its SigV4
 * signature), the service, and per action the resource ARN and the condition keys the
 * request determines. Pure: the proxy (proxy.ts) reads the request and evaluates these
 * with the caller's policies (authorizer.ts).
 *
 * - DynamoDB (JSON, X-Amz-Target DynamoDB_20120810.*): table or index ARN;
 *   `dynamodb:LeadingKeys` from the request's partition key values. Batch requests are
 *   one check per table; transactions one check per item, with the item's own action
 *   (TransactWriteItems is not an IAM action).
 * - SQS (JSON, AmazonSQS.*; or the query protocol): the queue ARN from QueueUrl or
 *   QueueName; batch operations are their single actions.
 * - S3 (REST, path style): GetObject / PutObject / DeleteObject(s) on `arn:aws:s3:::b/k`,
 *   ListBucket on the bucket with `s3:prefix`, CopyObject's source read.
 * - Step Functions (JSON, AWSStepFunctions.*): state machine or execution ARN.
 */
export type Service = 'dynamodb' | 'sqs' | 's3' | 'states' | 'other';

export interface CallerIdentity {
  /** Access key id from the Authorization header or X-Amz-Credential; undefined when unsigned. */
  readonly accessKeyId?: string;
  readonly region?: string;
  /** The service in the credential scope (dynamodb, sqs, s3, states, ...). */
  readonly scopeService?: string;
}

export interface ActionRequest {
  /** The API operation that carried it, e.g. TransactWriteItems. */
  readonly operation: string;
  /** `service:Action`. */
  readonly action: string;
  readonly resource: string;
  readonly context: Readonly<Record<string, string | string[]>>;
}

export interface HttpRequestParts {
  readonly method: string;
  /** Path and query, as sent (`/bucket/key?list-type=2`). */
  readonly url: string;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body: Buffer;
}

export interface MappingContext {
  readonly region: string;
  readonly accountId: string;
  /** A table's partition key attribute, and each index's (by index name). */
  readonly keyOf: (table: string) => { readonly hash?: string; readonly indexes: Readonly<Record<string, string>> } | undefined;
}

export class RequestParseError extends Error {}

const header = (h: HttpRequestParts['headers'], name: string): string | undefined => {
  const v = h[name] ?? h[name.toLowerCase()];
  return Array.isArray(v) ? v.join(',') : v;
};

/** The signer of a request: `Credential=<key>/<date>/<region>/<service>/aws4_request`. */
export function callerOf(req: Pick<HttpRequestParts, 'headers' | 'url'>): CallerIdentity {
  const auth = header(req.headers, 'authorization') ?? '';
  let m = /Credential=([^/\s,]+)\/\d{8}\/([^/]+)\/([^/]+)\/aws4_request/.exec(auth);
  if (!m) {
    const q = new URL(req.url, 'http://local').searchParams.get('X-Amz-Credential') ?? '';
    m = /^([^/]+)\/\d{8}\/([^/]+)\/([^/]+)\/aws4_request$/.exec(q);
  }
  return m ? { accessKeyId: m[1], region: m[2], scopeService: m[3] } : {};
}

/** Which service a request is for: its X-Amz-Target first, then the credential scope. */
export function serviceOf(req: HttpRequestParts, caller: CallerIdentity = callerOf(req)): Service {
  const target = header(req.headers, 'x-amz-target') ?? '';
  if (target.startsWith('DynamoDB_')) return 'dynamodb';
  if (target.startsWith('AmazonSQS.')) return 'sqs';
  if (target.startsWith('AWSStepFunctions.')) return 'states';
  switch (caller.scopeService) {
    case 'dynamodb':
    case 'sqs':
    case 's3':
    case 'states':
      return caller.scopeService;
  }
  if (/x-www-form-urlencoded/.test(header(req.headers, 'content-type') ?? '') && /(^|&)Action=/.test(req.body.toString('utf8'))) return 'sqs';
  return caller.scopeService ? 'other' : 's3';
}

/** Every (action, resource, condition keys) the request needs allowed. */
export function actionsOf(service: Service, req: HttpRequestParts, ctx: MappingContext): ActionRequest[] {
  switch (service) {
    case 'dynamodb':
      return dynamodbActions(targetOp(req), json(req), ctx);
    case 'sqs':
      return sqsActions(req, ctx);
    case 's3':
      return s3Actions(req);
    case 'states':
      return sfnActions(targetOp(req), json(req));
    default:
      return [];
  }
}

export function targetOp(req: HttpRequestParts): string {
  const t = header(req.headers, 'x-amz-target') ?? '';
  return t.slice(t.indexOf('.') + 1);
}

function json(req: HttpRequestParts): Record<string, any> {
  if (req.body.length === 0) return {};
  try {
    return JSON.parse(req.body.toString('utf8')) as Record<string, any>;
  } catch (e) {
    throw new RequestParseError(`request body is not JSON: ${(e as Error).message}`);
  }
}

// ---- DynamoDB

function attributeString(v: Record<string, unknown> | undefined): string | undefined {
  if (!v) return undefined;
  if (typeof v.S === 'string') return v.S;
  if (typeof v.N === 'string') return v.N;
  if (typeof v.B === 'string') return v.B;
  return undefined;
}

function tableArn(table: string, ctx: MappingContext, index?: string): string {
  const base = table.startsWith('arn:') ? table : `arn:aws:dynamodb:${ctx.region}:${ctx.accountId}:table/${table}`;
  return index ? `${base}/index/${index}` : base;
}

const tableNameOf = (t: string) => (t.startsWith('arn:') ? t.slice(t.indexOf(':table/') + 7).split('/')[0] : t);

function leading(ctx: MappingContext, table: string, items: readonly (Record<string, any> | undefined)[], index?: string): Record<string, string[]> {
  const k = ctx.keyOf(tableNameOf(table));
  const attr = index ? k?.indexes[index] : k?.hash;
  if (!attr) return {};
  const values = [...new Set(items.map((i) => attributeString(i?.[attr])).filter((v): v is string => v !== undefined))];
  return values.length ? { 'dynamodb:LeadingKeys': values } : {};
}

/** The partition key value a Query's key condition fixes. */
function queryKeyValue(body: Record<string, any>, attr: string): Record<string, unknown> | undefined {
  if (body.KeyConditions?.[attr]?.AttributeValueList?.[0]) return body.KeyConditions[attr].AttributeValueList[0];
  const expr = String(body.KeyConditionExpression ?? '');
  const names = (body.ExpressionAttributeNames ?? {}) as Record<string, string>;
  const re = /(#?[A-Za-z0-9_.-]+)\s*=\s*(:[A-Za-z0-9_]+)|(:[A-Za-z0-9_]+)\s*=\s*(#?[A-Za-z0-9_.-]+)/g;
  for (let m = re.exec(expr); m; m = re.exec(expr)) {
    const [name, value] = m[1] ? [m[1], m[2]] : [m[4], m[3]];
    if ((names[name] ?? name) === attr) return body.ExpressionAttributeValues?.[value];
  }
  return undefined;
}

function dynamodbActions(op: string, body: Record<string, any>, ctx: MappingContext): ActionRequest[] {
  const one = (action: string, table: string, context: Record<string, string | string[]>, index?: string): ActionRequest => ({ operation: op, action: `dynamodb:${action}`, resource: tableArn(table, ctx, index), context });
  const extra: Record<string, string> = {};
  if (body.Select) extra['dynamodb:Select'] = String(body.Select);
  if (body.ReturnValues) extra['dynamodb:ReturnValues'] = String(body.ReturnValues);
  switch (op) {
    case 'GetItem':
    case 'DeleteItem':
    case 'UpdateItem':
      return [one(op, body.TableName, { ...leading(ctx, body.TableName, [body.Key]), ...extra })];
    case 'PutItem':
      return [one(op, body.TableName, { ...leading(ctx, body.TableName, [body.Item]), ...extra })];
    case 'Query': {
      const k = ctx.keyOf(tableNameOf(body.TableName));
      const attr = body.IndexName ? k?.indexes[body.IndexName] : k?.hash;
      const v = attr ? attributeString(queryKeyValue(body, attr) as Record<string, unknown> | undefined) : undefined;
      return [one('Query', body.TableName, { ...(v !== undefined ? { 'dynamodb:LeadingKeys': [v] } : {}), ...extra }, body.IndexName)];
    }
    case 'Scan':
      return [one('Scan', body.TableName, extra, body.IndexName)];
    case 'BatchGetItem':
      return Object.entries((body.RequestItems ?? {}) as Record<string, { Keys?: Record<string, any>[] }>).map(([t, r]) => one('BatchGetItem', t, leading(ctx, t, r.Keys ?? [])));
    case 'BatchWriteItem':
      return Object.entries((body.RequestItems ?? {}) as Record<string, { PutRequest?: { Item: Record<string, any> }; DeleteRequest?: { Key: Record<string, any> } }[]>).map(([t, rs]) =>
        one('BatchWriteItem', t, leading(ctx, t, rs.map((r) => r.PutRequest?.Item ?? r.DeleteRequest?.Key))),
      );
    case 'TransactWriteItems':
      return ((body.TransactItems ?? []) as Record<string, any>[]).map((item) => {
        const [kind, x] = Object.entries(item)[0] as [string, Record<string, any>];
        const action = { Put: 'PutItem', Update: 'UpdateItem', Delete: 'DeleteItem', ConditionCheck: 'ConditionCheckItem' }[kind] ?? kind;
        return one(action, x.TableName, leading(ctx, x.TableName, [x.Item ?? x.Key]));
      });
    case 'TransactGetItems':
      return ((body.TransactItems ?? []) as { Get: Record<string, any> }[]).map((i) => one('GetItem', i.Get.TableName, leading(ctx, i.Get.TableName, [i.Get.Key])));
    case 'ListTables':
    case 'DescribeLimits':
    case 'DescribeEndpoints':
      return [{ operation: op, action: `dynamodb:${op}`, resource: '*', context: {} }];
    default:
      return [one(op, String(body.TableName ?? body.ResourceArn ?? '*'), {})];
  }
}

// ---- SQS

const SQS_BATCH: Record<string, string> = { SendMessageBatch: 'SendMessage', DeleteMessageBatch: 'DeleteMessage', ChangeMessageVisibilityBatch: 'ChangeMessageVisibility' };

/** The queue name in a queue URL (its last path segment). */
export const queueNameOfUrl = (url: string) => url.replace(/\/+$/, '').split('/').pop() ?? '';

function sqsActions(req: HttpRequestParts, ctx: MappingContext): ActionRequest[] {
  let op: string;
  let input: Record<string, any>;
  if (header(req.headers, 'x-amz-target')) {
    op = targetOp(req);
    input = json(req);
  } else {
    const form = new URLSearchParams(req.body.toString('utf8'));
    op = form.get('Action') ?? '';
    input = Object.fromEntries(form);
  }
  const account = (url?: string) => (url ? (url.replace(/\/+$/, '').split('/').at(-2) ?? ctx.accountId) : ctx.accountId);
  const name = input.QueueUrl ? queueNameOfUrl(String(input.QueueUrl)) : input.QueueName ? String(input.QueueName) : undefined;
  const acct = input.QueueUrl ? account(String(input.QueueUrl)) : String(input.QueueOwnerAWSAccountId ?? ctx.accountId);
  const resource = name ? `arn:aws:sqs:${ctx.region}:${/^\d{12}$/.test(acct) ? acct : ctx.accountId}:${name}` : '*';
  return [{ operation: op, action: `sqs:${SQS_BATCH[op] ?? op}`, resource: op === 'ListQueues' ? '*' : resource, context: {} }];
}

// ---- S3

const BUCKET_SUBRESOURCES: Record<string, Record<string, string>> = {
  GET: { versions: 'ListBucketVersions', uploads: 'ListBucketMultipartUploads', location: 'GetBucketLocation', versioning: 'GetBucketVersioning', policy: 'GetBucketPolicy', lifecycle: 'GetLifecycleConfiguration', tagging: 'GetBucketTagging', acl: 'GetBucketAcl', cors: 'GetBucketCORS', encryption: 'GetEncryptionConfiguration', notification: 'GetBucketNotification' },
  PUT: { versioning: 'PutBucketVersioning', policy: 'PutBucketPolicy', lifecycle: 'PutLifecycleConfiguration', tagging: 'PutBucketTagging', acl: 'PutBucketAcl', cors: 'PutBucketCORS', encryption: 'PutEncryptionConfiguration', notification: 'PutBucketNotification' },
  DELETE: { policy: 'DeleteBucketPolicy', lifecycle: 'PutLifecycleConfiguration', tagging: 'PutBucketTagging', cors: 'PutBucketCORS' },
};

function s3Actions(req: HttpRequestParts): ActionRequest[] {
  const url = new URL(req.url, 'http://local');
  const q = url.searchParams;
  const path = url.pathname.replace(/^\/+/, '');
  const slash = path.indexOf('/');
  const bucket = decodeURIComponent(slash < 0 ? path : path.slice(0, slash));
  const key = slash < 0 ? '' : decodeURIComponent(path.slice(slash + 1));
  const m = req.method.toUpperCase();
  const act = (operation: string, action: string, resource: string, context: Record<string, string | string[]> = {}): ActionRequest => ({ operation, action: `s3:${action}`, resource, context });
  const bucketArn = `arn:aws:s3:::${bucket}`;
  const objectArn = `${bucketArn}/${key}`;
  if (!bucket) return [act('ListBuckets', 'ListAllMyBuckets', '*')];
  if (!key) {
    if (m === 'POST' && q.has('delete')) return deletedKeys(req.body).map((k) => act('DeleteObjects', k.versionId ? 'DeleteObjectVersion' : 'DeleteObject', `${bucketArn}/${k.key}`));
    const sub = Object.keys(BUCKET_SUBRESOURCES[m] ?? {}).find((s) => q.has(s));
    if (sub) return [act(BUCKET_SUBRESOURCES[m][sub], BUCKET_SUBRESOURCES[m][sub], bucketArn)];
    if (m === 'PUT') return [act('CreateBucket', 'CreateBucket', bucketArn)];
    if (m === 'DELETE') return [act('DeleteBucket', 'DeleteBucket', bucketArn)];
    if (m === 'HEAD') return [act('HeadBucket', 'ListBucket', bucketArn)];
    const context: Record<string, string> = { 's3:prefix': q.get('prefix') ?? '' };
    if (q.has('delimiter')) context['s3:delimiter'] = q.get('delimiter')!;
    if (q.has('max-keys')) context['s3:max-keys'] = q.get('max-keys')!;
    return [act(q.get('list-type') === '2' ? 'ListObjectsV2' : 'ListObjects', 'ListBucket', bucketArn, context)];
  }
  const version = q.get('versionId');
  if (m === 'GET' || m === 'HEAD') {
    if (q.has('tagging')) return [act('GetObjectTagging', version ? 'GetObjectVersionTagging' : 'GetObjectTagging', objectArn)];
    if (q.has('acl')) return [act('GetObjectAcl', version ? 'GetObjectVersionAcl' : 'GetObjectAcl', objectArn)];
    if (q.has('uploadId')) return [act('ListParts', 'ListMultipartUploadParts', objectArn)];
    return [act(m === 'HEAD' ? 'HeadObject' : 'GetObject', version ? 'GetObjectVersion' : 'GetObject', objectArn)];
  }
  if (m === 'DELETE') {
    if (q.has('uploadId')) return [act('AbortMultipartUpload', 'AbortMultipartUpload', objectArn)];
    if (q.has('tagging')) return [act('DeleteObjectTagging', 'DeleteObjectTagging', objectArn)];
    return [act('DeleteObject', version ? 'DeleteObjectVersion' : 'DeleteObject', objectArn)];
  }
  if (m === 'PUT' && q.has('tagging')) return [act('PutObjectTagging', 'PutObjectTagging', objectArn)];
  if (m === 'PUT' && q.has('acl')) return [act('PutObjectAcl', 'PutObjectAcl', objectArn)];
  const operation = m === 'POST' ? (q.has('uploads') ? 'CreateMultipartUpload' : 'CompleteMultipartUpload') : q.has('uploadId') ? 'UploadPart' : 'PutObject';
  const out = [act(operation, 'PutObject', objectArn)];
  const source = header(req.headers, 'x-amz-copy-source');
  if (m === 'PUT' && source) {
    const [src, query] = decodeURIComponent(source).replace(/^\/+/, '').split('?');
    const versioned = new URLSearchParams(query ?? '').has('versionId');
    out[0] = act(operation === 'UploadPart' ? 'UploadPartCopy' : 'CopyObject', 'PutObject', objectArn);
    out.push(act(out[0].operation, versioned ? 'GetObjectVersion' : 'GetObject', `arn:aws:s3:::${src}`));
  }
  return out;
}

/** The keys of a DeleteObjects request body (XML). */
export function deletedKeys(body: Buffer): { key: string; versionId?: string }[] {
  const xml = body.toString('utf8');
  const out: { key: string; versionId?: string }[] = [];
  for (const m of xml.matchAll(/<Object>([\s\S]*?)<\/Object>/g)) {
    const key = /<Key>([\s\S]*?)<\/Key>/.exec(m[1])?.[1];
    if (key === undefined) continue;
    const versionId = /<VersionId>([\s\S]*?)<\/VersionId>/.exec(m[1])?.[1];
    out.push({ key: unescapeXml(key), ...(versionId ? { versionId } : {}) });
  }
  return out;
}

function unescapeXml(s: string): string {
  return s.replace(/&(lt|gt|amp|quot|apos|#x[0-9a-fA-F]+|#\d+);/g, (_, e: string) =>
    e === 'lt' ? '<' : e === 'gt' ? '>' : e === 'amp' ? '&' : e === 'quot' ? '"' : e === 'apos' ? "'" : String.fromCodePoint(e.startsWith('#x') ? parseInt(e.slice(2), 16) : Number(e.slice(1))),
  );
}

// ---- Step Functions

function sfnActions(op: string, body: Record<string, any>): ActionRequest[] {
  const resource = String(body.executionArn ?? body.stateMachineArn ?? body.resourceArn ?? '*');
  const action = op === 'StartSyncExecution' ? 'StartSyncExecution' : op;
  return [{ operation: op, action: `states:${action}`, resource, context: {} }];
}
