/**
 * The one loopback endpoint every function's SDK talks to (AWS_ENDPOINT_URL): each
 * request is attributed to its caller by the access key id of its signature, mapped to
 * IAM actions and resources (iam-requests.ts) and evaluated against the caller's role
 * (authorizer.ts). A denied request is answered with the service's AccessDenied error
 * and recorded; an allowed one is forwarded unchanged to DynamoDB Local or fauxqs (SQS,
 * S3), or served by the local Step Functions (step-functions.ts).
 *
 * Queue URLs: the functions see queues at this proxy (`<proxy>/<account>/<name>`); the
 * upstream SQS knows each queue by the URL it gave it, so request QueueUrls are put back
 * to that and response QueueUrls pointed here.
 */
import { createServer, type IncomingMessage, request as httpRequest, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DescribeTableCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { IamAuthorizer } from './authorizer.ts';
import type { DeniedCall } from './errors.ts';
import { type ActionRequest, actionsOf, callerOf, type HttpRequestParts, type MappingContext, queueNameOfUrl, RequestParseError, type Service, serviceOf, targetOp } from './iam-requests.ts';
import type { AssemblyModel, AssemblyRole } from './model.ts';

export interface ProxyCaller {
  /** The function's logical id (or the state machine's): named in denials. */
  readonly label: string;
  readonly role?: AssemblyRole;
  /** The session name in AccessDenied messages (the function name). */
  readonly session: string;
}

/** The local Step Functions endpoint behind the proxy. */
export interface StepFunctionsEndpoint {
  handle(operation: string, input: Record<string, unknown>): Promise<{ status: number; body: unknown }>;
}

export interface ProxyUpstreams {
  readonly dynamodb: string;
  readonly sqs: string;
  readonly s3: string;
  /** For partition keys of tables the template does not define (DescribeTable). */
  readonly dynamodbClient?: DynamoDBClient;
}

export interface ProxyOptions {
  readonly upstreams: ProxyUpstreams;
  /** Called once per denied call (the run fails on the first). */
  readonly onDenied?: (call: DeniedCall) => void;
  /** Requests the proxy cannot serve (an unsupported service) and upstream errors. */
  readonly log?: (line: string) => void;
}

type KeyInfo = { hash?: string; indexes: Record<string, string> };

export class AssemblyProxy {
  readonly denied: DeniedCall[] = [];
  /** Requests forwarded or served, by service. */
  readonly requests: Record<string, number> = {};
  private server?: Server;
  private model?: AssemblyModel;
  private authorizer?: IamAuthorizer;
  private stepFunctions?: StepFunctionsEndpoint;
  private readonly callers = new Map<string, ProxyCaller>();
  private readonly upstreamQueueUrls = new Map<string, string>();
  private readonly keys = new Map<string, KeyInfo | undefined>();
  origin = '';

  constructor(private readonly options: ProxyOptions) {}

  async listen(): Promise<string> {
    this.server = createServer((req, res) => {
      void this.serve(req, res).catch((e) => {
        this.options.log?.(`proxy: ${req.method} ${req.url}: ${(e as Error).message}`);
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ __type: 'InternalFailure', message: (e as Error).message }));
      });
    });
    this.server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(0, '127.0.0.1', () => resolve());
    });
    this.origin = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.origin;
  }

  /** The model (policies, tables) and the evaluator; set once the template is read with this proxy's origin. */
  configure(model: AssemblyModel, authorizer: IamAuthorizer, stepFunctions?: StepFunctionsEndpoint): void {
    this.model = model;
    this.authorizer = authorizer;
    this.stepFunctions = stepFunctions;
    for (const t of model.tables.values()) {
      const hashOf = (schema: readonly { AttributeName: string; KeyType: string }[] | undefined) => schema?.find((k) => k.KeyType === 'HASH')?.AttributeName;
      const indexes: Record<string, string> = {};
      for (const i of [...t.globalSecondaryIndexes, ...t.localSecondaryIndexes] as { IndexName?: string; KeySchema?: { AttributeName: string; KeyType: string }[] }[]) {
        const h = hashOf(i.KeySchema);
        if (i.IndexName && h) indexes[i.IndexName] = h;
      }
      this.keys.set(t.name, { hash: hashOf(t.keySchema), indexes });
    }
  }

  registerCaller(accessKeyId: string, caller: ProxyCaller): void {
    this.callers.set(accessKeyId, caller);
  }

  /** The URL the upstream SQS gave a queue (requests carry it back). */
  registerQueueUrl(name: string, upstreamUrl: string): void {
    this.upstreamQueueUrls.set(name, upstreamUrl);
  }

  async close(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  private mapping(): MappingContext {
    return { region: this.model!.region, accountId: this.model!.accountId, keyOf: (t) => this.keys.get(t) };
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const parts: HttpRequestParts = { method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers, body: Buffer.concat(chunks) };
    const who = callerOf(parts);
    const service = serviceOf(parts, who);
    this.requests[service] = (this.requests[service] ?? 0) + 1;
    if (!this.model || !this.authorizer) return this.fail(res, service, 503, 'ServiceUnavailable', 'the local endpoint is not ready');
    const caller = who.accessKeyId ? this.callers.get(who.accessKeyId) : undefined;
    const label = caller?.label ?? `(unknown caller ${who.accessKeyId ?? 'unsigned'})`;
    if (service === 'other') {
      this.options.log?.(`proxy: ${label} called ${who.scopeService} (${req.method} ${req.url}), which runs nowhere locally`);
      return this.fail(res, service, 400, 'UnknownOperationException', `service ${who.scopeService} is not served locally (only DynamoDB, SQS, S3 and Step Functions)`);
    }
    if (service === 'dynamodb') await this.learnKeys(parts);
    let actions: ActionRequest[];
    try {
      actions = actionsOf(service, parts, this.mapping());
    } catch (e) {
      if (!(e instanceof RequestParseError)) throw e;
      return this.fail(res, service, 400, 'SerializationException', e.message);
    }
    for (const a of actions) {
      const d = await this.authorizer.decide(caller?.role, a);
      if (d.allowed) continue;
      const call: DeniedCall = { function: label, action: a.action, resource: a.resource, reason: d.reason, operation: a.operation };
      this.denied.push(call);
      this.options.onDenied?.(call);
      const principal = caller?.role ? `arn:aws:sts::${this.model.accountId}:assumed-role/${caller.role.name}/${caller.session}` : label;
      const because = d.reason === 'no statement allows it' ? `because no identity-based policy allows the ${a.action} action` : `because ${d.reason}`;
      return this.denyResponse(res, service, parts, `User: ${principal} is not authorized to perform: ${a.action} on resource: ${a.resource} ${because}`);
    }
    if (service === 'states') return this.serveStepFunctions(parts, res);
    return this.forward(service, parts, req, res);
  }

  /** Partition key names of tables the template does not define. */
  private async learnKeys(parts: HttpRequestParts): Promise<void> {
    const client = this.options.upstreams.dynamodbClient;
    if (!client || parts.body.length === 0) return;
    let body: Record<string, any>;
    try {
      body = JSON.parse(parts.body.toString('utf8'));
    } catch {
      return;
    }
    const names = new Set<string>();
    if (typeof body.TableName === 'string') names.add(body.TableName);
    for (const t of Object.keys(body.RequestItems ?? {})) names.add(t);
    for (const i of (body.TransactItems ?? []) as Record<string, { TableName?: string }>[]) for (const x of Object.values(i)) if (x?.TableName) names.add(x.TableName);
    for (const raw of names) {
      const name = raw.startsWith('arn:') ? raw.slice(raw.indexOf(':table/') + 7).split('/')[0] : raw;
      if (this.keys.has(name) || targetOp(parts) === 'CreateTable') continue;
      try {
        const t = (await client.send(new DescribeTableCommand({ TableName: name }))).Table;
        const hash = (s?: { AttributeName?: string; KeyType?: string }[]) => s?.find((k) => k.KeyType === 'HASH')?.AttributeName;
        const indexes: Record<string, string> = {};
        for (const i of [...(t?.GlobalSecondaryIndexes ?? []), ...(t?.LocalSecondaryIndexes ?? [])]) if (i.IndexName && hash(i.KeySchema)) indexes[i.IndexName] = hash(i.KeySchema)!;
        this.keys.set(name, { hash: hash(t?.KeySchema), indexes });
      } catch {
        // A missing table: the forwarded request gets DynamoDB's own error.
      }
    }
  }

  private async serveStepFunctions(parts: HttpRequestParts, res: ServerResponse): Promise<void> {
    if (!this.stepFunctions) return this.fail(res, 'states', 400, 'StateMachineDoesNotExist', 'the template has no state machine');
    const input = parts.body.length ? (JSON.parse(parts.body.toString('utf8')) as Record<string, unknown>) : {};
    const out = await this.stepFunctions.handle(targetOp(parts), input);
    res.writeHead(out.status, { 'content-type': 'application/x-amz-json-1.0' });
    res.end(JSON.stringify(out.body));
  }

  private forward(service: Service, parts: HttpRequestParts, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const up = this.options.upstreams;
    const target = new URL(service === 'dynamodb' ? up.dynamodb : service === 'sqs' ? up.sqs : up.s3);
    let body = parts.body;
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined) headers[k] = v;
    headers.host = target.host;
    if (service === 'sqs') {
      body = this.upstreamRequestBody(body);
      headers['content-length'] = String(body.length);
      delete headers['transfer-encoding'];
    }
    return new Promise<void>((resolve) => {
      const upstream = httpRequest({ host: target.hostname, port: target.port, method: parts.method, path: parts.url, headers }, (ures) => {
        if (service !== 'sqs') {
          res.writeHead(ures.statusCode ?? 502, ures.headers);
          ures.pipe(res);
          ures.on('end', resolve);
          ures.on('error', () => resolve());
          return;
        }
        const got: Buffer[] = [];
        ures.on('data', (c: Buffer) => got.push(c));
        ures.on('end', () => {
          const out = this.proxiedResponseBody(Buffer.concat(got));
          const h = { ...ures.headers, 'content-length': String(out.length) };
          delete h['transfer-encoding'];
          res.writeHead(ures.statusCode ?? 502, h);
          res.end(out);
          resolve();
        });
        ures.on('error', () => resolve());
      });
      upstream.on('error', (e) => {
        if (res.destroyed) return resolve(); // the client went away first (an aborted long poll)
        this.options.log?.(`proxy: ${service} upstream ${target.origin}: ${e.message}`);
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ __type: 'ServiceUnavailable', message: `upstream ${service}: ${e.message}` }));
        resolve();
      });
      // A client that gives up (an aborted long poll) ends the upstream request too.
      res.on('close', () => {
        if (!res.writableFinished) upstream.destroy();
      });
      upstream.end(body);
    });
  }

  /** SQS request: QueueUrl back to the URL the upstream knows. */
  private upstreamRequestBody(body: Buffer): Buffer {
    const text = body.toString('utf8');
    if (!text.includes('QueueUrl')) return body;
    const sqsOrigin = new URL(this.options.upstreams.sqs).origin;
    const toUpstream = (url: string) => this.upstreamQueueUrls.get(queueNameOfUrl(url)) ?? `${sqsOrigin}${new URL(url, sqsOrigin).pathname}`;
    if (text.trimStart().startsWith('{')) {
      const json = JSON.parse(text) as { QueueUrl?: string };
      if (typeof json.QueueUrl === 'string') json.QueueUrl = toUpstream(json.QueueUrl);
      return Buffer.from(JSON.stringify(json));
    }
    const form = new URLSearchParams(text);
    const url = form.get('QueueUrl');
    if (url) form.set('QueueUrl', toUpstream(url));
    return Buffer.from(form.toString());
  }

  /** SQS response: queue URLs point at the proxy (and are remembered for requests). */
  private proxiedResponseBody(body: Buffer): Buffer {
    const text = body.toString('utf8');
    if (!text.includes('QueueUrl')) return body;
    const here = (url: string) => {
      const name = queueNameOfUrl(url);
      this.upstreamQueueUrls.set(name, url);
      return `${this.origin}/${url.replace(/\/+$/, '').split('/').at(-2)}/${name}`;
    };
    if (text.trimStart().startsWith('{')) {
      const json = JSON.parse(text) as { QueueUrl?: string; QueueUrls?: string[] };
      if (typeof json.QueueUrl === 'string') json.QueueUrl = here(json.QueueUrl);
      if (Array.isArray(json.QueueUrls)) json.QueueUrls = json.QueueUrls.map(here);
      return Buffer.from(JSON.stringify(json));
    }
    return Buffer.from(text.replace(/<QueueUrl>([^<]+)<\/QueueUrl>/g, (_, u: string) => `<QueueUrl>${here(u)}</QueueUrl>`));
  }

  private denyResponse(res: ServerResponse, service: Service, parts: HttpRequestParts, message: string): void {
    if (service === 's3') {
      res.writeHead(403, { 'content-type': 'application/xml', 'x-amz-request-id': 'local' });
      res.end(parts.method === 'HEAD' ? undefined : `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>${escapeXml(message)}</Message><RequestId>local</RequestId></Error>`);
      return;
    }
    if (service === 'sqs') {
      res.writeHead(403, { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-query-error': 'AccessDenied;Sender' });
      res.end(JSON.stringify({ __type: 'com.amazon.coral.service#AccessDeniedException', message }));
      return;
    }
    const type = service === 'dynamodb' ? 'com.amazonaws.dynamodb.v20120810#AccessDeniedException' : 'AccessDeniedException';
    res.writeHead(400, { 'content-type': 'application/x-amz-json-1.0' });
    res.end(JSON.stringify({ __type: type, message }));
  }

  private fail(res: ServerResponse, service: Service, status: number, type: string, message: string): void {
    if (service === 's3') {
      res.writeHead(status, { 'content-type': 'application/xml' });
      res.end(`<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${type}</Code><Message>${escapeXml(message)}</Message></Error>`);
      return;
    }
    res.writeHead(status, { 'content-type': 'application/x-amz-json-1.0' });
    res.end(JSON.stringify({ __type: type, message }));
  }
}

function escapeXml(s: string): string {
  return s.replace(/[<>&"']/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&apos;' })[c]!);
}
