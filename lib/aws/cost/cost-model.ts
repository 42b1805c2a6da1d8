/**
 * The cost model's arithmetic (pure): a run's priced usage (prices.ts estimateCost) per
 * 1,000 events and per million, the coordinator's share at an epoch interval, the naive
 * baseline, the smallest Managed Service for Apache Flink application per month and the
 * volume at which the two cost the same. Every price comes from the one table (PRICES).
 */
import { ConfigError } from '../../errors.ts';
import { type CostEstimate, type CostLine, PRICES } from './prices.ts';

export type Prices = typeof PRICES;

/** One priced usage line scaled to the events of the run. */
export interface UsageRate {
  readonly service: CostLine['service'];
  readonly unit: string;
  /** Billed units per 1,000 events. */
  readonly perThousandEvents: number;
  readonly dollarsPerMillionEvents: number;
}

function positiveNumber(field: string, v: number, allowZero = false): number {
  if (!Number.isFinite(v) || v < 0 || (!allowZero && v === 0)) throw new ConfigError(field, allowZero ? 'a finite number >= 0' : 'a finite number > 0', String(v));
  return v;
}

/** Each line of `lines` per 1,000 events and in dollars per million events. */
export function ratesOf(lines: readonly CostLine[], events: number): UsageRate[] {
  positiveNumber('events', events);
  return lines.map((l) => ({ service: l.service, unit: l.unit, perThousandEvents: (l.quantity / events) * 1000, dollarsPerMillionEvents: (l.dollars / events) * 1e6 }));
}

/** Dollars per million events of a whole estimate. */
export function dollarsPerMillion(cost: Pick<CostEstimate, 'dollars'>, events: number): number {
  return (cost.dollars / positiveNumber('events', events)) * 1e6;
}

/**
 * The naive baseline of issue 3: every event is one DynamoDB update (one write unit:
 * an item under 1 KB, outside a transaction) and one SQS message (one request).
 */
export function naiveBaselinePerMillion(prices: Prices = PRICES): number {
  return 1e6 * (prices.dynamoDbPerWriteUnit + prices.sqsFifoPerRequest);
}

export interface FlinkMonthly {
  /** KPUs billed: the application's plus the orchestration KPU. */
  readonly kpus: number;
  readonly kpuHours: number;
  readonly computeDollars: number;
  readonly storageDollars: number;
  readonly dollars: number;
}

/**
 * A Managed Flink application running for a month on `applicationKpus` KPUs (1: the
 * smallest application). Billed: (KPUs + the orchestration KPU) x hours x price, plus
 * the running application storage that comes with each application KPU.
 */
export function managedFlinkMonthly(applicationKpus = 1, prices: Prices = PRICES): FlinkMonthly {
  if (!Number.isInteger(applicationKpus) || applicationKpus < 1) throw new ConfigError('applicationKpus', 'an integer >= 1', String(applicationKpus));
  const kpus = applicationKpus + prices.managedFlinkOrchestrationKpus;
  const kpuHours = kpus * prices.hoursPerMonth;
  const computeDollars = kpuHours * prices.managedFlinkPerKpuHour;
  const storageDollars = applicationKpus * prices.managedFlinkStorageGbPerKpu * prices.managedFlinkStoragePerGbMonth;
  return { kpus, kpuHours, computeDollars, storageDollars, dollars: computeDollars + storageDollars };
}

/**
 * Events per month below which Sluice (pay per event) costs less than a fixed monthly
 * bill. Sluice's own fixed part is `idleMonthly` (dashboard and alarms); pass it in
 * `fixedMonthlyDollars` as a difference when it matters (the coordinator runs only while
 * input arrives, and its busy-time share is already in `sluicePerMillion`).
 */
export function breakEvenEventsPerMonth(fixedMonthlyDollars: number, sluicePerMillion: number): number {
  positiveNumber('fixedMonthlyDollars', fixedMonthlyDollars, true);
  positiveNumber('sluicePerMillion', sluicePerMillion);
  return (fixedMonthlyDollars / sluicePerMillion) * 1e6;
}

/** What a deployed job bills per month at zero traffic, besides storage. */
export interface IdleMonthly {
  readonly dashboards: number;
  readonly alarms: number;
  readonly dollars: number;
}

/**
 * The fixed monthly part of a deployment, from its template's resource types: the
 * CloudWatch dashboard and alarms. Everything else is billed per request (functions,
 * queues, the on-demand table, the HTTP API, the state machine, which ends itself when
 * input stops) or per byte stored.
 */
export function idleMonthly(resourceTypes: Readonly<Record<string, number>>, prices: Prices = PRICES): IdleMonthly {
  const dashboards = resourceTypes['AWS::CloudWatch::Dashboard'] ?? 0;
  const alarms = resourceTypes['AWS::CloudWatch::Alarm'] ?? 0;
  return { dashboards, alarms, dollars: dashboards * prices.cloudWatchDashboardPerMonth + alarms * prices.cloudWatchAlarmPerMonth };
}

export interface CoordinatorShape {
  /** Seconds between epochs (the state machine's default is 60). */
  readonly intervalSeconds: number;
  /** Step Functions transitions per normal epoch. */
  readonly transitionsPerEpoch: number;
  /** Lambda task invocations per epoch, and the GB-seconds each is assumed to bill. */
  readonly taskInvocationsPerEpoch: number;
  readonly gbSecondsPerTask: number;
  /** S3 PUTs per epoch: a snapshot object per stage partition, the manifest, the stats object. */
  readonly s3PutsPerEpoch: number;
  /** DynamoDB write units per epoch: acks, coordinator record, commit pointer (single-item writes). */
  readonly writeUnitsPerEpoch: number;
}

/**
 * The coordinator's bill while `events` arrive at `eventsPerSecond` (wall time equals
 * event time on a live stream): epochs = duration / interval, each priced by its shape.
 */
export function coordinatorLines(shape: CoordinatorShape, events: number, eventsPerSecond: number, prices: Prices = PRICES): CostLine[] {
  positiveNumber('intervalSeconds', shape.intervalSeconds);
  positiveNumber('events', events, true);
  const epochs = events / positiveNumber('eventsPerSecond', eventsPerSecond) / shape.intervalSeconds;
  const transitions = epochs * positiveNumber('transitionsPerEpoch', shape.transitionsPerEpoch, true);
  const tasks = epochs * positiveNumber('taskInvocationsPerEpoch', shape.taskInvocationsPerEpoch, true);
  const gbs = tasks * positiveNumber('gbSecondsPerTask', shape.gbSecondsPerTask, true);
  const puts = epochs * positiveNumber('s3PutsPerEpoch', shape.s3PutsPerEpoch, true);
  const wcu = epochs * positiveNumber('writeUnitsPerEpoch', shape.writeUnitsPerEpoch, true);
  return [
    { service: 'stepfunctions', unit: 'transitions', quantity: transitions, dollars: transitions * prices.stepFunctionsPerTransition },
    { service: 'lambda', unit: 'requests', quantity: tasks, dollars: tasks * prices.lambdaPerRequest },
    { service: 'lambda', unit: 'GB-seconds', quantity: gbs, dollars: gbs * prices.lambdaPerGbSecond },
    { service: 's3', unit: 'PUT/LIST requests', quantity: puts, dollars: puts * prices.s3PerPut },
    { service: 'dynamodb', unit: 'write units', quantity: wcu, dollars: wcu * prices.dynamoDbPerWriteUnit },
  ];
}

/** Lines with the same service and unit added up, in first-seen order. */
export function mergeLines(...groups: (readonly CostLine[])[]): CostLine[] {
  const out = new Map<string, CostLine>();
  for (const l of groups.flat()) {
    const id = `${l.service}\u0000${l.unit}`;
    const prev = out.get(id);
    out.set(id, prev ? { ...prev, quantity: prev.quantity + l.quantity, dollars: prev.dollars + l.dollars } : { ...l });
  }
  return [...out.values()];
}

/**
 * Typical in-region latency (ms) of the calls a handler waits on, for a model of Lambda
 * duration on AWS: local servers on a shared machine answer far more slowly, so the
 * measured wall time is an upper bound. Calls are taken as sequential (conservative:
 * prefetch queries run 16 at a time). Calls the event source mapping makes (receive,
 * delete, visibility) do not run inside the function and are not counted.
 */
export const AWS_CALL_LATENCY_MS: Readonly<Record<string, Readonly<Record<string, number>>>> = {
  dynamodb: { GetItem: 5, Query: 5, PutItem: 6, UpdateItem: 6, TransactWriteItems: 15, BatchWriteItem: 10 },
  sqs: { SendMessageBatch: 12, GetQueueAttributes: 5, GetQueueUrl: 5 },
  s3: { PutObject: 25, GetObject: 10, DeleteObjects: 15, ListObjectsV2: 15 },
};

export interface RequestCount {
  readonly service: string;
  readonly operation: string;
  readonly requests: number;
}

/** GB-seconds of a run at AWS latencies: the handlers' CPU time plus the time spent waiting on counted calls. */
export function modelledLambdaGbSeconds(requests: readonly RequestCount[], cpuSeconds: number, memoryMb: number): number {
  positiveNumber('cpuSeconds', cpuSeconds, true);
  positiveNumber('memoryMb', memoryMb);
  let waitMs = 0;
  for (const r of requests) waitMs += (AWS_CALL_LATENCY_MS[r.service]?.[r.operation] ?? 0) * r.requests;
  return (cpuSeconds + waitMs / 1000) * (memoryMb / 1024);
}
