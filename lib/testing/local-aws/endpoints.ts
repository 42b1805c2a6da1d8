/**
 * Where `--target local-aws` finds DynamoDB, SQS and S3. Endpoints come only from the
 * SDK's own variables (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB, ..._SQS, ..._S3);
 * a service with none configured gets a server started here on loopback (DynamoDB Local
 * or fauxqs, which serves both SQS and S3). A configured service is left to the SDK:
 * we pass no endpoint, so the SDK applies its own precedence rules.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { configuredEndpoint, type EndpointService } from '../../aws/configured-endpoints.ts';
import { LOCAL_CREDENTIALS, LOCAL_REGION, type LocalServer, startDynamoDbLocal, startFauxqs } from './servers.ts';

export interface ServiceEndpoint {
  /** Set when we started the server; undefined when the SDK takes it from the environment. */
  readonly endpoint?: string;
  /** For the log: "DynamoDB Local at http://..." or "AWS_ENDPOINT_URL_SQS=...". */
  readonly origin: string;
}

export interface LocalAwsEnvironment {
  readonly region: string;
  readonly dynamodb: ServiceEndpoint;
  readonly sqs: ServiceEndpoint;
  readonly s3: ServiceEndpoint;
  /** SDK clients wired to the endpoints above. */
  readonly clients: { readonly dynamodb: DynamoDBClient; readonly sqs: SQSClient; readonly s3: S3Client };
  /** Destroys the clients and stops the servers started here. */
  close(): Promise<void>;
}

/**
 * Resolve each service's endpoint, starting DynamoDB Local and/or fauxqs where none is
 * configured. Reads process.env, the same variables the SDK reads for configured services.
 */
export async function openLocalAws(): Promise<LocalAwsEnvironment> {
  const env = process.env;
  const region = env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? LOCAL_REGION;
  const started: LocalServer[] = [];
  const need = { dynamodb: !configuredEndpoint('dynamodb', env), fauxqs: !configuredEndpoint('sqs', env) || !configuredEndpoint('s3', env) };
  try {
    // Both at once: the JVM start (a few seconds) dominates.
    const [ddb, fq] = await Promise.all([
      need.dynamodb ? startDynamoDbLocal().then((s) => (started.push(s), s)) : undefined,
      need.fauxqs ? startFauxqs().then((s) => (started.push(s), s)) : undefined,
    ]);
    const pick = (service: EndpointService, server: LocalServer | undefined, name: string): ServiceEndpoint => {
      const conf = configuredEndpoint(service, env);
      if (conf) return { origin: `${conf.variable}=${conf.url}` };
      return { endpoint: server!.endpoint, origin: `${name} at ${server!.endpoint}` };
    };
    const dynamodb = pick('dynamodb', ddb, 'DynamoDB Local');
    const sqs = pick('sqs', fq, 'fauxqs');
    const s3 = pick('s3', fq, 'fauxqs');
    // Servers we started accept any credentials; configured ones get the SDK's default chain.
    const base = (e: ServiceEndpoint) => (e.endpoint ? { region, endpoint: e.endpoint, credentials: LOCAL_CREDENTIALS } : { region });
    const clients = {
      dynamodb: new DynamoDBClient(base(dynamodb)),
      // Queue URLs from local servers may name hosts that do not resolve (fauxqs: sqs.<region>.localhost);
      // every queue lives on the endpoint we talk to, so never switch to the URL's host.
      sqs: new SQSClient({ ...base(sqs), useQueueUrlAsEndpoint: false }),
      // Local S3 servers serve path-style URLs only.
      s3: new S3Client({ ...base(s3), forcePathStyle: true }),
    };
    return {
      region,
      dynamodb,
      sqs,
      s3,
      clients,
      close: async () => {
        for (const c of Object.values(clients)) c.destroy();
        await Promise.allSettled(started.map((s) => s.stop()));
      },
    };
  } catch (e) {
    await Promise.allSettled(started.map((s) => s.stop()));
    throw e;
  }
}

/** Clients for servers someone else runs (the test setup): nothing is started, close() only destroys the clients. */
export function localAwsAt(endpoints: { readonly dynamodb: string; readonly sqs: string; readonly s3: string }, region = LOCAL_REGION, credentials = LOCAL_CREDENTIALS): LocalAwsEnvironment {
  const clients = {
    dynamodb: new DynamoDBClient({ region, endpoint: endpoints.dynamodb, credentials }),
    sqs: new SQSClient({ region, endpoint: endpoints.sqs, credentials, useQueueUrlAsEndpoint: false }),
    s3: new S3Client({ region, endpoint: endpoints.s3, credentials, forcePathStyle: true }),
  };
  const at = (endpoint: string) => ({ endpoint, origin: endpoint });
  return {
    region,
    dynamodb: at(endpoints.dynamodb),
    sqs: at(endpoints.sqs),
    s3: at(endpoints.s3),
    clients,
    close: async () => {
      for (const c of Object.values(clients)) c.destroy();
    },
  };
}
