/**
 * The projected AWS cost per million events of a job running on the embedded runtime: what
 * the same traffic would bill on the AWS path, from the run's measured shape (events in,
 * records crossing a shuffle, state keys) and the one price table; checkpoints apart, per hour. A model,
 * not a measurement: `sluice run --target local-aws` and bench/aws-cost.ts count the real
 * requests. Its assumptions travel with the figure.
 */
import { PRICES } from '../aws/cost/prices.ts';

/** Events per ingestion request (`sluice publish`'s default batch). */
export const EVENTS_PER_REQUEST = 500;
/** Bytes of an event or record in an SQS envelope, packed into 64 KB billed chunks. */
export const RECORD_BYTES = 200;
/** Messages per operator Lambda invocation (the FIFO event source's largest batch). */
export const MESSAGES_PER_INVOCATION = 10;
/** Billed duration of an invocation at 1 GB (CPU plus the calls to SQS and DynamoDB). */
export const GB_SECONDS_PER_INVOCATION = 0.05;
/** Step Functions transitions per checkpoint epoch. */
export const TRANSITIONS_PER_EPOCH = 12;

export interface CostInput {
  /** Events taken in by the sources. */
  readonly events: number;
  /** Records taken in by stages fed by another stage (each crossed a shuffle as an SQS message). */
  readonly crossings: number;
  /** Keys in state over every stage. */
  readonly stateKeys: number;
  /** The checkpoint interval (null: checkpoints off), and the partitions that write a snapshot at each. */
  readonly checkpointIntervalMs: number | null;
  readonly partitions: number;
}

export interface CostProjection {
  /** Null until an event arrived. */
  readonly dollarsPerMillionEvents: number | null;
  /** Per service, dollars per million events. */
  readonly byService: Record<string, number>;
  /**
   * Checkpoints bill per epoch, not per event: dollars an hour while input arrives (the
   * coordinator opens no epoch while none does); null with checkpoints off.
   */
  readonly checkpointDollarsPerHour: number | null;
  readonly pricesAsOf: string;
  readonly assumptions: readonly string[];
}

export function projectCost(c: CostInput): CostProjection {
  const assumptions = [
    `${EVENTS_PER_REQUEST} events per ingestion request`,
    `${RECORD_BYTES} bytes per record in 64 KB SQS chunks (send, receive, delete)`,
    `${MESSAGES_PER_INVOCATION} messages per operator invocation, ${GB_SECONDS_PER_INVOCATION} GB-s each`,
    'one DynamoDB transaction per invocation: progress item plus each key it touches (2 write units an item)',
    `${TRANSITIONS_PER_EPOCH} Step Functions transitions and one S3 PUT per partition per checkpoint`,
  ];
  const perEpoch = (c.partitions + 1) * PRICES.s3PerPut + TRANSITIONS_PER_EPOCH * PRICES.stepFunctionsPerTransition;
  const checkpointDollarsPerHour = c.checkpointIntervalMs ? (3_600_000 / c.checkpointIntervalMs) * perEpoch : null;
  if (c.events <= 0) return { dollarsPerMillionEvents: null, byService: {}, checkpointDollarsPerHour, pricesAsOf: PRICES.asOf, assumptions };
  const requests = c.events / EVENTS_PER_REQUEST;
  const chunks = ((c.events + c.crossings) * RECORD_BYTES) / 65_536;
  const operatorInvocations = Math.max(chunks / MESSAGES_PER_INVOCATION, requests);
  // A transaction touches at most the keys there are, and at most its records.
  const recordsPerInvocation = (c.events + c.crossings) / operatorInvocations;
  const keysPerInvocation = Math.min(c.stateKeys, recordsPerInvocation);
  const invocations = requests + operatorInvocations;
  const dollars: Record<string, number> = {
    httpapi: requests * PRICES.httpApiPerRequest,
    lambda: invocations * (PRICES.lambdaPerRequest + GB_SECONDS_PER_INVOCATION * PRICES.lambdaPerGbSecond),
    sqs: Math.max(chunks, requests) * 3 * PRICES.sqsFifoPerRequest,
    dynamodb: operatorInvocations * (1 + keysPerInvocation) * 2 * PRICES.dynamoDbPerWriteUnit,
  };
  const byService: Record<string, number> = {};
  let total = 0;
  for (const [service, d] of Object.entries(dollars)) {
    byService[service] = (d / c.events) * 1e6;
    total += byService[service];
  }
  return { dollarsPerMillionEvents: total, byService, checkpointDollarsPerHour, pricesAsOf: PRICES.asOf, assumptions };
}
