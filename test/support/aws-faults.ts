/**
 * Seeded faults on the handlers' DynamoDB, SQS and S3 calls, injected by SDK middleware in
 * front of the real local servers (DynamoDB Local and fauxqs cannot throttle, conflict or
 * lose an answer on demand): test/aws/infra-faults.test.ts and test/aws/store-faults.test.ts.
 *
 * Each call inside a scope (an invocation, AsyncLocalStorage) is numbered per service; a
 * seeded hash of that number (not a period: a retry loop of a fixed number of calls would
 * meet the same fault every time) decides whether it fails and how:
 * - throttled before it reaches the server (each service's throttling errors in turn);
 * - a TransactWriteItems cancelled with CancellationReasons Code TransactionConflict
 *   (another transaction held an item), before it reaches the server;
 * - timed out: a write half the time after the server applied it (the write landed, the
 *   client sees an error), otherwise before.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import { DynamoDBClient, TransactionCanceledException } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';

export type Service = 'dynamodb' | 'sqs' | 's3';
export const SERVICES: readonly Service[] = ['dynamodb', 'sqs', 's3'];

export interface FaultLog {
  /** Calls made inside a scope, per service. */
  readonly calls: Record<string, number>;
  /** Injected faults per service. */
  readonly byService: Record<string, number>;
  /** Injected faults per kind: throttle, conflict, timeout, landed (a timeout after the write was applied). */
  readonly byKind: Record<string, number>;
  /** Faults of the scope's own rule (`FaultOptions.scoped`). */
  scoped: number;
}

export function faultLog(): FaultLog {
  return { calls: {}, byService: {}, byKind: {}, scoped: 0 };
}

/** Calls whose answer is lost after the server applied them leave a landed write; reads would not. */
export const WRITES = new Set(['TransactWriteItems', 'PutItem', 'UpdateItem', 'DeleteItem', 'BatchWriteItem', 'SendMessageBatch', 'SendMessage', 'PutObject', 'DeleteObject', 'DeleteObjects', 'ChangeMessageVisibilityBatch', 'ChangeMessageVisibility']);

export function injected(name: string, status: number, message: string): Error {
  return Object.assign(new Error(`${message} (injected)`), { name, $metadata: { httpStatusCode: status }, $fault: status >= 500 ? 'server' : 'client' });
}

/** Each service's throttling errors, as the SDK raises them. */
export const THROTTLES: Record<Service, readonly (() => Error)[]> = {
  dynamodb: [
    () => injected('ProvisionedThroughputExceededException', 400, 'The level of configured provisioned throughput for the table was exceeded'),
    () => injected('ThrottlingException', 400, 'Rate of requests exceeds the allowed throughput'),
  ],
  sqs: [() => injected('RequestThrottled', 403, 'Request is throttled'), () => injected('ThrottlingException', 400, 'Rate exceeded')],
  s3: [() => injected('SlowDown', 503, 'Please reduce your request rate')],
};

export function transactionConflict(items = 2): Error {
  const reasons = Array.from({ length: items }, (_, i) => (i === 0 ? { Code: 'TransactionConflict', Message: 'Transaction is ongoing for the item' } : { Code: 'None' }));
  return new TransactionCanceledException({
    message: `Transaction cancelled, please refer cancellation reasons for specific reasons [${reasons.map((r) => r.Code).join(', ')}] (injected)`,
    $metadata: { httpStatusCode: 400 },
    CancellationReasons: reasons,
  });
}

export const socketTimeout = (): Error => Object.assign(new Error('socket timed out (injected)'), { name: 'TimeoutError', $metadata: {} });

/** A [0, 1) number from the seed and a string. */
export function seededUnit(seed: number, key: string): number {
  return createHash('sha256').update(`${seed}\u0000${key}`).digest().readUInt32BE(0) / 2 ** 32;
}

export interface FaultOptions<S> {
  readonly seed: number;
  /** Share of calls that fail, 0..1. */
  readonly rate: number;
  /** Calls inside `scope.run(...)` are subject to faults; others pass. */
  readonly scope: AsyncLocalStorage<S>;
  readonly log: FaultLog;
  /** A rule of the scope's own, tried first (a sustained outage): an error to throw, or undefined. */
  readonly scoped?: (service: Service, command: string, store: S) => Error | undefined;
  /** Make the third call of each service fail whatever the hash says, so every service sees a fault. */
  readonly forceThird?: boolean;
  /**
   * Make every kind happen at least once whatever the hash says: the first call of each
   * service is throttled, the first TransactWriteItems cancelled by a conflict, the second
   * times out after it landed, and so does the first SQS SendMessageBatch.
   */
  readonly everyKind?: boolean;
}

export interface ServerConfig {
  readonly region: string;
  readonly credentials: { accessKeyId: string; secretAccessKey: string };
  readonly dynamodb: string;
  /** fauxqs serves SQS and S3. */
  readonly sqs: string;
}

/** The fault for a call's hash `x` (< rate): which kind, by the share of the rate it falls in. */
function faultFor(service: Service, command: string, x: number, rate: number, n: number): { kind: string; error: () => Error; after: boolean } {
  const f = x / rate;
  if (service === 'dynamodb' && command === 'TransactWriteItems' && f < 0.3) return { kind: 'conflict', error: () => transactionConflict(), after: false };
  if (f < 0.6) {
    const throttles = THROTTLES[service];
    return { kind: 'throttle', error: throttles[n % throttles.length], after: false };
  }
  const after = WRITES.has(command) && f >= 0.8;
  return { kind: after ? 'landed' : 'timeout', error: socketTimeout, after };
}

/** Clients on the local servers (no SDK retries: every fault reaches the code under test) whose calls pass the fault plan. */
export function faultyClients<S>(servers: ServerConfig, o: FaultOptions<S>) {
  const seen: Record<string, number> = {};
  const firstOfKind = (service: Service, command: string, n: number) => {
    const k = (seen[`${service}/${command}`] = (seen[`${service}/${command}`] ?? 0) + 1);
    if (n === 1) return { kind: 'throttle', error: THROTTLES[service][0], after: false };
    if (service === 'dynamodb' && command === 'TransactWriteItems' && k === 1) return { kind: 'conflict', error: () => transactionConflict(), after: false };
    if ((service === 'dynamodb' && command === 'TransactWriteItems' && k === 2) || (service === 'sqs' && command === 'SendMessageBatch' && k === 1)) return { kind: 'landed', error: socketTimeout, after: true };
    return undefined;
  };
  const wrap = <T extends DynamoDBClient | SQSClient | S3Client>(service: Service, c: T): T => {
    (c.middlewareStack as DynamoDBClient['middlewareStack']).add(
      (next, context) => async (args) => {
        const store = o.scope.getStore();
        if (store === undefined) return next(args);
        const command = (context.commandName ?? '').replace(/Command$/, '');
        const n = (o.log.calls[service] = (o.log.calls[service] ?? 0) + 1);
        const own = o.scoped?.(service, command, store);
        if (own) {
          o.log.scoped++;
          throw own;
        }
        const forced = (o.forceThird && n === 3 ? { kind: 'throttle', error: THROTTLES[service][0], after: false } : undefined) ?? (o.everyKind ? firstOfKind(service, command, n) : undefined);
        const x = forced ? 0 : seededUnit(o.seed, `${service}#${n}`);
        if (x >= o.rate) return next(args);
        const fault = forced ?? faultFor(service, command, x, o.rate, n);
        o.log.byService[service] = (o.log.byService[service] ?? 0) + 1;
        o.log.byKind[fault.kind] = (o.log.byKind[fault.kind] ?? 0) + 1;
        if (fault.after) await next(args);
        throw fault.error();
      },
      { step: 'initialize', name: 'sluiceTestFaults' },
    );
    return c;
  };
  const { region, credentials } = servers;
  return {
    dynamodb: wrap('dynamodb', new DynamoDBClient({ region, credentials, endpoint: servers.dynamodb, maxAttempts: 1 })),
    sqs: wrap('sqs', new SQSClient({ region, credentials, endpoint: servers.sqs, useQueueUrlAsEndpoint: false, maxAttempts: 1 })),
    s3: wrap('s3', new S3Client({ region, credentials, endpoint: servers.sqs, forcePathStyle: true, maxAttempts: 1 })),
  };
}

export function cleanClients(servers: ServerConfig) {
  const { region, credentials } = servers;
  return {
    dynamodb: new DynamoDBClient({ region, credentials, endpoint: servers.dynamodb }),
    sqs: new SQSClient({ region, credentials, endpoint: servers.sqs, useQueueUrlAsEndpoint: false }),
    s3: new S3Client({ region, credentials, endpoint: servers.sqs, forcePathStyle: true }),
  };
}
