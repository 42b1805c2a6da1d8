/**
 * The handlers' own CloudWatch metrics (Powertools Metrics, embedded metric format): one
 * namespace, the names and the dimensions infra/monitoring.ts builds the dashboard and
 * the alarms from.
 *
 * Dimensions, weighed against CloudWatch's price of $0.30 per metric (name and dimension
 * values) and month, prorated by the hour a metric is published in:
 * - every metric carries `service` (the job) and `stage`: one metric per name and stage
 *   while the job has traffic, none at zero traffic;
 * - the incident metrics (groupRetries, stalledPartitions) are also published per
 *   partition (`service`, `stage`, `partition`), to name the partition that fails, and
 *   per job (`service`), which the stalled-partitions alarm watches. They are published
 *   only while a group fails, so a healthy job pays nothing for them;
 * - lag is per stage, not per partition: it is published on every batch, so per partition
 *   it would cost $0.30 per partition and stage each month (a 3-stage job with 32
 *   partitions: $28.80), and the partition that lags is the one with the group retries,
 *   or shows in the stage queue's age of the oldest message.
 * The ingest function's metrics carry the stage its stream feeds; a request that names no
 * stream of the job counts under `service` alone.
 */
import { type Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';

/** The Powertools Metrics namespace of every handler (functions/*.ts). */
export const METRICS_NAMESPACE = 'Sluice';

export const METRIC_DIMENSIONS = { service: 'service', stage: 'stage', partition: 'partition', stream: 'stream', reason: 'reason' } as const;

/** The operator function's metrics, all Count but lag. */
export const OPERATOR_METRICS = {
  messages: 'messages',
  recordsIn: 'recordsIn',
  /** Records its batches sent to the stages downstream: with recordsIn, the stage's selectivity (scaling advice). */
  recordsOut: 'recordsOut',
  duplicatesDropped: 'duplicatesDropped',
  /** Records windows and joins dropped as late (no late-data side output); published only when some were. */
  lateDropped: 'lateDropped',
  deadLetters: 'deadLetters',
  groupFailures: 'groupFailures',
  groupRetries: 'groupRetries',
  stalledPartitions: 'stalledPartitions',
  /** Milliseconds from SQS accepting a group's oldest message to the handler taking it (Maximum per stage). */
  lag: 'lag',
} as const;

/** The ingest function's metrics (Count). */
export const INGEST_METRICS = {
  requests: 'requests',
  eventsAccepted: 'eventsAccepted',
  eventsRejected: 'eventsRejected',
  /** Events the stream's opt-in load shedding dropped (SourceOptions.shed). */
  eventsShed: 'eventsShed',
  wakeUpFailures: 'wakeUpFailures',
} as const;

/** The checkpoint coordinator's metrics (functions/checkpoint.ts, dimension service only; Count). */
export const COORDINATOR_METRICS = {
  /** Epochs aborted (timed out, or interrupted by a crash the resume step repaired): the aborted-epochs alarm's metric. */
  epochsAborted: 'epochsAborted',
} as const;

/**
 * What the handlers use of Powertools Metrics. A deployment passes `Metrics` itself; the
 * local-AWS runtime passes a tally (lib/testing/local-aws/metric-tally.ts), so its live
 * table reads the numbers CloudWatch would get.
 */
export interface HandlerMetrics {
  addMetric(name: string, unit: Parameters<Metrics['addMetric']>[1], value: number): void;
  addDimension(name: string, value: string): void;
  /** A metric published at once, with dimensions of its own. */
  singleMetric(): Pick<HandlerMetrics, 'addMetric'> & { addDimensions(dimensions: Record<string, string>): void };
  publishStoredMetrics(): void;
}

/** Give the invocation's stored metrics the stage dimension (cleared by publishStoredMetrics). */
export function stageDimension(metrics: HandlerMetrics | undefined, stage: number): void {
  metrics?.addDimension(METRIC_DIMENSIONS.stage, String(stage));
}

/**
 * Count an incident of a partition: in the invocation's metrics (service, stage), and at
 * once per job (service) and per partition (service, stage, partition).
 */
export function countIncident(metrics: HandlerMetrics | undefined, name: string, stage: number, partition: string): void {
  if (!metrics) return;
  metrics.addMetric(name, MetricUnit.Count, 1);
  metrics.singleMetric().addMetric(name, MetricUnit.Count, 1);
  const perPartition = metrics.singleMetric();
  perPartition.addDimensions({ [METRIC_DIMENSIONS.stage]: String(stage), [METRIC_DIMENSIONS.partition]: partition });
  perPartition.addMetric(name, MetricUnit.Count, 1);
}

/**
 * Count what load shedding dropped from one request: eventsShed in the invocation's
 * metrics (service, stage), and at once per stream and reason (service, stage, stream,
 * reason), as `sluice dev --metrics` counts it.
 */
export function countShed(metrics: HandlerMetrics | undefined, stage: number, stream: string, shed: readonly { readonly reason: string }[]): void {
  if (!metrics || shed.length === 0) return;
  metrics.addMetric(INGEST_METRICS.eventsShed, MetricUnit.Count, shed.length);
  const byReason = new Map<string, number>();
  for (const e of shed) byReason.set(e.reason, (byReason.get(e.reason) ?? 0) + 1);
  for (const [reason, n] of byReason) {
    const one = metrics.singleMetric();
    one.addDimensions({ [METRIC_DIMENSIONS.stage]: String(stage), [METRIC_DIMENSIONS.stream]: stream, [METRIC_DIMENSIONS.reason]: reason });
    one.addMetric(INGEST_METRICS.eventsShed, MetricUnit.Count, n);
  }
}

/** The age of a group's oldest message when the handler takes it (SQS's SentTimestamp). */
export function groupLag(records: readonly { readonly attributes: { readonly SentTimestamp?: string } }[], now: number): number | undefined {
  let oldest = Number.POSITIVE_INFINITY;
  for (const r of records) {
    const sent = Number(r.attributes.SentTimestamp);
    if (Number.isFinite(sent) && sent < oldest) oldest = sent;
  }
  return Number.isFinite(oldest) ? Math.max(0, now - oldest) : undefined;
}
