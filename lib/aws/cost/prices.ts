/**
 * The one price table of the cost model (us-east-1 list prices, DESIGN.md), and the
 * estimate of what a run's counted requests would cost on AWS. Every dollar figure in
 * Sluice should multiply these numbers; update them here, with the date.
 */
import type { AwsAccounting, OperationRow } from './accounting.ts';

export const PRICES = {
  asOf: '2025-06',
  region: 'us-east-1',
  /** Lambda: per request, and per GB-second of duration on arm64 (what infra/ deploys; x86 is $0.0000166667). */
  lambdaPerRequest: 0.2 / 1e6,
  lambdaPerGbSecond: 0.0000133334,
  /** SQS FIFO: per request, where each started 64 KB of payload is one request. */
  sqsFifoPerRequest: 0.5 / 1e6,
  /** DynamoDB on demand: per write / read request unit (transactional ones count double, already in the units). */
  dynamoDbPerWriteUnit: 0.625 / 1e6,
  dynamoDbPerReadUnit: 0.125 / 1e6,
  /** Step Functions Standard: per state transition. */
  stepFunctionsPerTransition: 0.025 / 1000,
  /** S3 Standard: PUT, COPY, POST, LIST per request; GET and others per request. */
  s3PerPut: 0.005 / 1000,
  s3PerGet: 0.0004 / 1000,
  /** API Gateway HTTP API: per request (first 300 million a month). */
  httpApiPerRequest: 1.0 / 1e6,
  /**
   * Managed Service for Apache Flink (the comparison baseline), from
   * aws.amazon.com/managed-service-apache-flink/pricing (us-east-1, 2025-06): $0.11 per
   * KPU-hour; every application is charged one extra KPU for orchestration; each KPU of
   * the application comes with 50 GB of running application storage at $0.10 per GB-month.
   * The smallest application (parallelism 1, one KPU) therefore runs on two billed KPUs.
   */
  managedFlinkPerKpuHour: 0.11,
  managedFlinkOrchestrationKpus: 1,
  managedFlinkStorageGbPerKpu: 50,
  managedFlinkStoragePerGbMonth: 0.1,
  /**
   * CloudWatch, what a deployment costs while no event arrives: a dashboard per month
   * (beyond the free tier's three) and a standard-resolution metric alarm per month.
   * Custom metrics bill only for the hours they receive data, so they cost nothing idle.
   */
  cloudWatchDashboardPerMonth: 3.0,
  cloudWatchAlarmPerMonth: 0.1,
  /** AWS's pricing pages count a month as 730 hours. */
  hoursPerMonth: 730,
} as const;

/** Lambda usage not visible in the SDK accounting: invocations and billed duration. */
export interface LambdaUsage {
  readonly invocations: number;
  /** Sum over invocations of duration (ms, rounded up per invocation) x memory (GB). */
  readonly gbSeconds: number;
}

export interface CostLine {
  readonly service: 'lambda' | 'sqs' | 'dynamodb' | 's3' | 'httpapi' | 'stepfunctions';
  /** What is billed, e.g. "requests", "64 KB requests", "write units". */
  readonly unit: string;
  readonly quantity: number;
  readonly dollars: number;
}

export interface CostEstimate {
  readonly lines: readonly CostLine[];
  readonly dollars: number;
  readonly pricesAsOf: string;
}

/** An HTTP API request is metered per started 512 KB of payload. */
export const HTTP_API_METERED_BYTES = 512 * 1024;

const S3_PUT_CLASS = new Set(['PutObject', 'CopyObject', 'PostObject', 'ListObjectsV2', 'ListObjects', 'CreateMultipartUpload', 'UploadPart', 'CompleteMultipartUpload']);
/** Free: deletes, bucket and queue management are not per-event costs anyway. */
const S3_FREE = new Set(['DeleteObject', 'DeleteObjects', 'CreateBucket', 'PutBucketLifecycleConfiguration']);

/**
 * Dollars for the requests counted in `accounting` (services 'sqs', 'dynamodb', 's3',
 * 'httpapi', 'stepfunctions'), plus Lambda. SQS: billed chunks as the adapters record
 * them (estimatedWriteUnits for sends, estimatedReadUnits for other calls), at least one
 * per request. DynamoDB: units by AWS's rules (the estimate), or the reported ones when larger.
 */
export function estimateCost(accounting: AwsAccounting, lambda: LambdaUsage = { invocations: 0, gbSeconds: 0 }): CostEstimate {
  const rows = accounting.rows();
  const of = (service: string) => rows.filter((r) => r.service === service);
  const sum = (list: OperationRow[], f: (r: OperationRow) => number) => list.reduce((n, r) => n + f(r), 0);

  const sqsRequests = sum(of('sqs'), (r) => Math.max(r.requests, r.estimatedReadUnits + r.estimatedWriteUnits));
  const ddb = of('dynamodb');
  const writeUnits = sum(ddb, (r) => Math.max(r.estimatedWriteUnits, r.writeUnits));
  const readUnits = sum(ddb, (r) => Math.max(r.estimatedReadUnits, r.readUnits));
  const s3 = of('s3').filter((r) => !S3_FREE.has(r.operation));
  const s3Put = sum(s3.filter((r) => S3_PUT_CLASS.has(r.operation)), (r) => r.requests);
  const s3Get = sum(s3.filter((r) => !S3_PUT_CLASS.has(r.operation)), (r) => r.requests);
  // HTTP APIs meter requests in 512 KB increments (bytes: the request bodies).
  const http = sum(of('httpapi'), (r) => Math.max(r.requests, Math.ceil(r.bytes / HTTP_API_METERED_BYTES)));
  // StartExecution (the ingest path's wake-up) starts `items` executions; a refused duplicate costs nothing.
  const transitions = sum(of('stepfunctions'), (r) => (r.operation === 'StartExecution' ? r.items : r.items || r.requests));

  const lines: CostLine[] = [
    { service: 'lambda', unit: 'requests', quantity: lambda.invocations, dollars: lambda.invocations * PRICES.lambdaPerRequest },
    { service: 'lambda', unit: 'GB-seconds', quantity: lambda.gbSeconds, dollars: lambda.gbSeconds * PRICES.lambdaPerGbSecond },
    { service: 'sqs', unit: '64 KB requests', quantity: sqsRequests, dollars: sqsRequests * PRICES.sqsFifoPerRequest },
    { service: 'dynamodb', unit: 'write units', quantity: writeUnits, dollars: writeUnits * PRICES.dynamoDbPerWriteUnit },
    { service: 'dynamodb', unit: 'read units', quantity: readUnits, dollars: readUnits * PRICES.dynamoDbPerReadUnit },
    { service: 's3', unit: 'PUT/LIST requests', quantity: s3Put, dollars: s3Put * PRICES.s3PerPut },
    { service: 's3', unit: 'GET requests', quantity: s3Get, dollars: s3Get * PRICES.s3PerGet },
    { service: 'httpapi', unit: 'requests', quantity: http, dollars: http * PRICES.httpApiPerRequest },
    { service: 'stepfunctions', unit: 'transitions', quantity: transitions, dollars: transitions * PRICES.stepFunctionsPerTransition },
  ];
  return { lines, dollars: lines.reduce((n, l) => n + l.dollars, 0), pricesAsOf: PRICES.asOf };
}

/** "$1.23" with enough digits for small amounts ("$0.000042"). */
export function formatDollars(d: number): string {
  if (d === 0) return '$0';
  if (d >= 1) return `$${d.toFixed(2)}`;
  // Two significant digits.
  const digits = Math.min(10, Math.max(2, 1 - Math.floor(Math.log10(d))));
  return `$${d.toFixed(digits)}`;
}
