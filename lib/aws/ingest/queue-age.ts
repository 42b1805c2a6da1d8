/**
 * The age of the oldest message waiting in each stage queue. SQS answers it only to
 * CloudWatch (ApproximateAgeOfOldestMessage, one data point a minute, a minute or two
 * late; GetQueueAttributes has no such attribute), so the ingest function's age bound
 * reacts to a stage that stays behind, not to a burst: the depth bound does that.
 */
import type { CloudWatchClient, MetricDataQuery } from '@aws-sdk/client-cloudwatch';
import type { AwsAccounting } from '../cost/accounting.ts';

/** Ages of the oldest waiting message, in seconds, by queue name; a queue CloudWatch has no recent point for is absent. */
export interface QueueAgeSource {
  oldestAgeSeconds(queueNames: readonly string[]): Promise<ReadonlyMap<string, number>>;
}

/** Points older than this say nothing about the queue now. */
const LOOKBACK_MS = 5 * 60_000;
const PERIOD_S = 60;

export function queueAgeQueries(queueNames: readonly string[]): MetricDataQuery[] {
  return queueNames.map((q, i) => ({
    Id: `age${i}`,
    MetricStat: { Metric: { Namespace: 'AWS/SQS', MetricName: 'ApproximateAgeOfOldestMessage', Dimensions: [{ Name: 'QueueName', Value: q }] }, Period: PERIOD_S, Stat: 'Maximum' },
  }));
}

/** CloudWatch as the source: one GetMetricData call for all the queues asked, the newest point of each. */
export class CloudWatchQueueAge implements QueueAgeSource {
  constructor(
    private readonly cloudwatch: CloudWatchClient,
    private readonly o: { readonly now?: () => number; readonly accounting?: AwsAccounting } = {},
  ) {}

  async oldestAgeSeconds(queueNames: readonly string[]): Promise<ReadonlyMap<string, number>> {
    const { GetMetricDataCommand } = await import('@aws-sdk/client-cloudwatch');
    const end = (this.o.now ?? Date.now)();
    const ages = new Map<string, number>();
    // A handful of stages: one page (at most 500 queries) always holds them.
    const out = await this.cloudwatch.send(
      new GetMetricDataCommand({ MetricDataQueries: queueAgeQueries(queueNames.slice(0, 500)), StartTime: new Date(end - LOOKBACK_MS), EndTime: new Date(end), ScanBy: 'TimestampDescending' }),
    );
    this.o.accounting?.record('cloudwatch', 'GetMetricData', { requests: 1, items: Math.min(queueNames.length, 500) });
    for (const r of out.MetricDataResults ?? []) {
      const i = Number(r.Id?.slice(3));
      const newest = r.Values?.[0];
      if (Number.isInteger(i) && i < queueNames.length && newest !== undefined) ages.set(queueNames[i], newest);
    }
    return ages;
  }
}
