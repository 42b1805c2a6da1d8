/**
 * The ingestion endpoint: `POST /streams/{stream}/events` and `GET /healthz` ->
 * functions/ingest.ts -> the source stages' queues. An HTTP API (IAM by default, JWT
 * or API key as options, access logs, stage throttling) or a Function URL (IAM only).
 * Every route requires auth: there is no anonymous way in.
 */
import { Duration } from 'aws-cdk-lib';
import { AccessLogFormat } from 'aws-cdk-lib/aws-apigateway';
import * as apigw from 'aws-cdk-lib/aws-apigatewayv2';
import { HttpIamAuthorizer, HttpJwtAuthorizer, HttpLambdaAuthorizer, HttpLambdaResponseType } from 'aws-cdk-lib/aws-apigatewayv2-authorizers';
import { HttpLambdaIntegration } from 'aws-cdk-lib/aws-apigatewayv2-integrations';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { SluiceJobPropsError } from './errors.ts';
import { ENTRIES, type SluiceFunction, sluiceFunction } from './function.ts';
import { HANDLER_ENV } from './handler-environment.ts';
import { suppressQueueAgeFinding } from './nag.ts';
import { shedsByQueueAge } from '../lib/aws/ingest/ingest-shedding.ts';
import { grantSend } from './permissions.ts';
import type { ResolvedProps } from './props.ts';

export const EVENTS_ROUTE = '/streams/{stream}/events';
export const HEALTH_ROUTE = '/healthz';

/** HTTP API context variables (the default format names REST API ones): who called, which route, what came back, why it failed. */
const ACCESS_LOG_FORMAT = AccessLogFormat.custom(
  JSON.stringify({
    requestId: '$context.requestId',
    time: '$context.requestTime',
    sourceIp: '$context.identity.sourceIp',
    caller: '$context.identity.userArn',
    route: '$context.routeKey',
    status: '$context.status',
    responseLength: '$context.responseLength',
    latencyMs: '$context.responseLatency',
    error: '$context.error.message',
    authorizerError: '$context.authorizer.error',
    integrationError: '$context.integrationErrorMessage',
  }),
);

export interface Ingestion {
  readonly function: SluiceFunction;
  /** The endpoint's base URL (routes above are relative to it). */
  readonly url: string;
  readonly httpApi?: apigw.HttpApi;
  readonly functionUrl?: lambda.FunctionUrl;
  readonly accessLogs?: logs.LogGroup;
  readonly authorizer?: SluiceFunction;
  /** Server-side errors (5xx) answered by the endpoint. */
  metricServerErrors(): cloudwatch.IMetric;
  metricRequests(): cloudwatch.IMetric;
  metricClientErrors(): cloudwatch.IMetric;
  grantPublish(grantee: iam.IGrantable): iam.Grant;
}

/** The ingest function's back-pressure bounds (infra/handler-environment.ts). */
function backPressureEnvironment(p: ResolvedProps): Record<string, string> {
  const { maxQueuedMessages, maxQueueAge } = p.ingestion;
  return {
    ...(maxQueuedMessages === undefined ? {} : { [HANDLER_ENV.ingestMaxQueuedMessages]: String(maxQueuedMessages) }),
    ...(maxQueueAge === undefined ? {} : { [HANDLER_ENV.ingestMaxQueueAgeSeconds]: String(maxQueueAge.toSeconds()) }),
  };
}

export function createIngestion(scope: Construct, p: ResolvedProps, sourceQueues: readonly sqs.IQueue[], environment: Record<string, string>): Ingestion {
  const job = p.job.name;
  const fn = sluiceFunction(scope, 'IngestFunction', {
    entry: ENTRIES.ingest,
    description: `Sluice ${job} ingestion endpoint`,
    timeout: p.ingestion.timeout,
    memorySize: p.ingestion.memorySize,
    environment: { ...environment, ...backPressureEnvironment(p) },
    logRetention: p.retention.logs,
    removalPolicy: p.removalPolicy,
    bundle: p.bundle,
  });
  // Send to the source stages; GetQueueAttributes reads the backlog for 429 back-pressure.
  grantSend(fn.fn, sourceQueues, { readAttributes: true, key: p.encryptionKey });
  // The age bound and shedding by lag read ApproximateAgeOfOldestMessage from CloudWatch (GetMetricData has no resource-level permission).
  if (p.ingestion.maxQueueAge || shedsByQueueAge(p.plan)) {
    fn.fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['cloudwatch:GetMetricData'], resources: ['*'] }));
    suppressQueueAgeFinding(fn);
  }

  if (p.ingestion.kind === 'functionUrl') {
    const functionUrl = fn.fn.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.AWS_IAM });
    const metric = (name: string) => fn.fn.metric(name, { statistic: 'Sum', period: Duration.minutes(1) });
    return {
      function: fn,
      url: functionUrl.url,
      functionUrl,
      metricServerErrors: () => metric('Url5xxCount'),
      metricClientErrors: () => metric('Url4xxCount'),
      metricRequests: () => metric('UrlRequestCount'),
      grantPublish: (grantee) => fn.fn.grantInvokeUrl(grantee),
    };
  }

  const httpApi = new apigw.HttpApi(scope, 'IngestApi', {
    apiName: `sluice-${p.queuePrefix}${job}-ingest`,
    description: `Sluice ${job}: POST ${EVENTS_ROUTE}`,
    // Our own $default stage, for access logs and throttling.
    createDefaultStage: false,
  });
  const accessLogs = new logs.LogGroup(scope, 'IngestApiAccessLogs', { retention: p.retention.logs, removalPolicy: p.removalPolicy });
  const stage = new apigw.HttpStage(scope, 'IngestApiStage', {
    httpApi,
    stageName: '$default',
    autoDeploy: true,
    accessLogSettings: { destination: new apigw.LogGroupLogDestination(accessLogs), format: ACCESS_LOG_FORMAT },
    throttle: p.ingestion.throttle,
  });
  const auth = p.ingestion.auth;
  let authorizer: apigw.IHttpRouteAuthorizer;
  let authorizerFn: SluiceFunction | undefined;
  if (auth.kind === 'iam') authorizer = new HttpIamAuthorizer();
  else if (auth.kind === 'jwt') authorizer = new HttpJwtAuthorizer('JwtAuthorizer', auth.issuer, { jwtAudience: [...auth.audience] });
  else {
    authorizerFn = sluiceFunction(scope, 'ApiKeyAuthorizer', {
      entry: ENTRIES.apiKeyAuthorizer,
      description: `Sluice ${job}: x-api-key check for the ingestion endpoint`,
      timeout: Duration.seconds(5),
      memorySize: 256,
      environment: { [HANDLER_ENV.apiKeyHashes]: auth.keySha256.join(','), [HANDLER_ENV.nodeOptions]: '--enable-source-maps' },
      logRetention: p.retention.logs,
      removalPolicy: p.removalPolicy,
      bundle: p.bundle,
    });
    authorizer = new HttpLambdaAuthorizer('ApiKeyAuthorizer', authorizerFn.fn, {
      responseTypes: [HttpLambdaResponseType.SIMPLE],
      // Without the header API Gateway answers 401 and never invokes the authorizer.
      identitySource: ['$request.header.x-api-key'],
      resultsCacheTtl: Duration.minutes(5),
    });
  }
  const integration = new HttpLambdaIntegration('IngestIntegration', fn.fn);
  httpApi.addRoutes({ path: EVENTS_ROUTE, methods: [apigw.HttpMethod.POST], integration, authorizer });
  httpApi.addRoutes({ path: HEALTH_ROUTE, methods: [apigw.HttpMethod.GET], integration, authorizer });

  const period = { period: Duration.minutes(1) };
  return {
    function: fn,
    url: stage.url,
    httpApi,
    accessLogs,
    authorizer: authorizerFn,
    metricServerErrors: () => httpApi.metricServerError({ ...period, statistic: 'Sum' }),
    metricClientErrors: () => httpApi.metricClientError({ ...period, statistic: 'Sum' }),
    metricRequests: () => httpApi.metricCount({ ...period, statistic: 'Sum' }),
    grantPublish: (grantee) => {
      if (auth.kind !== 'iam') {
        throw new SluiceJobPropsError('grantPublish', "an endpoint with IAM auth (ingestion.auth { kind: 'iam' })", `${auth.kind} auth, which IAM cannot grant`);
      }
      return iamGrant(grantee, httpApi);
    },
  };
}

function iamGrant(grantee: iam.IGrantable, api: apigw.HttpApi): iam.Grant {
  // The events route only (any stream); /healthz is left to the account's administrators.
  return iam.Grant.addToPrincipal({ grantee, actions: ['execute-api:Invoke'], resourceArns: [api.arnForExecuteApi('POST', '/streams/*/events', '$default')] });
}
