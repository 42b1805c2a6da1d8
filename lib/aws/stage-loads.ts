/**
 * What each stage of a deployed job did over a recent span, read from CloudWatch with one
 * GetMetricData call, as scaling advice (lib/runtime/scaling-advice.ts) reads it:
 * - records in and out: the stage functions' recordsIn and recordsOut (handler-metrics.ts);
 * - busy time: the stage functions' Lambda Duration, summed. That is what Lambda bills and
 *   the time the partitions were in a batch, waiting for nothing but their own calls. An
 *   invocation that takes several partitions' groups at once counts once, so the rate per
 *   second of Duration is per concurrent invocation, which is what a partition can be at
 *   most (Lambda runs one batch per message group at a time);
 * - arrivals: the events the ingest function accepted for each source stage, so a source
 *   stage that falls behind is advised for what arrives, not for what it managed to take.
 * CloudWatch's numbers arrive a minute or two late; a span of several minutes smooths that.
 */
import type { CloudWatchClient, MetricDataQuery } from '@aws-sdk/client-cloudwatch';
import type { LambdaClient } from '@aws-sdk/client-lambda';
import type { StageLoad } from '../runtime/scaling-advice.ts';
import { INGEST_METRICS, METRIC_DIMENSIONS, METRICS_NAMESPACE, OPERATOR_METRICS } from './handler-metrics.ts';

/** A stage as the metrics name it. */
export interface StageMetricsRef {
  readonly stage: number;
  readonly name: string;
  readonly partitions: number;
  /** The Lambda functions reading its queue (names, not ARNs). */
  readonly functions: readonly string[];
  readonly upstream: readonly number[];
  readonly fedBySources: boolean;
}

export interface MeasuredLoads {
  /** The span the sums cover, ms. */
  readonly spanMs: number;
  readonly loads: StageLoad[];
  /** Source records per second arriving over the span (accepted by ingestion, or taken in where no ingest feeds a stage). */
  readonly sourceRate: number;
}

/** The metric sums by query id (GetMetricData, summed over its data points). */
export type MetricSums = ReadonlyMap<string, number>;

const PERIOD_S = 60;

/** The queries for `stages` of `job`, ids `in<s>`, `out<s>`, `acc<s>` and `busy<s>_<i>` (function i). */
export function stageLoadQueries(job: string, stages: readonly StageMetricsRef[]): MetricDataQuery[] {
  const own = (id: string, metricName: string, stage: number): MetricDataQuery => ({
    Id: id,
    MetricStat: {
      Metric: {
        Namespace: METRICS_NAMESPACE,
        MetricName: metricName,
        Dimensions: [
          { Name: METRIC_DIMENSIONS.service, Value: job },
          { Name: METRIC_DIMENSIONS.stage, Value: String(stage) },
        ],
      },
      Period: PERIOD_S,
      Stat: 'Sum',
    },
  });
  return stages.flatMap((s) => [
    own(`in${s.stage}`, OPERATOR_METRICS.recordsIn, s.stage),
    own(`out${s.stage}`, OPERATOR_METRICS.recordsOut, s.stage),
    ...(s.fedBySources ? [own(`acc${s.stage}`, INGEST_METRICS.eventsAccepted, s.stage)] : []),
    ...s.functions.map(
      (fn, i): MetricDataQuery => ({
        Id: `busy${s.stage}_${i}`,
        MetricStat: { Metric: { Namespace: 'AWS/Lambda', MetricName: 'Duration', Dimensions: [{ Name: 'FunctionName', Value: fn }] }, Period: PERIOD_S, Stat: 'Sum' },
      }),
    ),
  ]);
}

/** The loads the sums give; a stage with no metric in the span took in nothing. */
export function loadsFrom(stages: readonly StageMetricsRef[], sums: MetricSums, spanMs: number): MeasuredLoads {
  const sum = (id: string) => sums.get(id) ?? 0;
  let arriving = 0;
  const loads = stages.map((s): StageLoad => {
    const recordsIn = sum(`in${s.stage}`);
    if (s.fedBySources) arriving += Math.max(sum(`acc${s.stage}`), recordsIn);
    return {
      name: s.name,
      partitions: s.partitions,
      recordsIn,
      busyMs: s.functions.reduce((n, _, i) => n + sum(`busy${s.stage}_${i}`), 0),
      recordsOut: sum(`out${s.stage}`),
      upstream: s.upstream,
      fedBySources: s.fedBySources,
    };
  });
  return { spanMs, loads, sourceRate: spanMs > 0 ? arriving / (spanMs / 1000) : 0 };
}

/** Read the stages' loads over the `spanMs` before `endMs` (GetMetricData, every page). */
export async function readStageLoads(cloudwatch: CloudWatchClient, job: string, stages: readonly StageMetricsRef[], spanMs: number, endMs: number): Promise<MeasuredLoads> {
  const { GetMetricDataCommand } = await import('@aws-sdk/client-cloudwatch');
  const queries = stageLoadQueries(job, stages);
  const sums = new Map<string, number>();
  // GetMetricData takes at most 500 queries a call.
  for (let i = 0; i < queries.length; i += 500) {
    let token: string | undefined;
    do {
      const out = await cloudwatch.send(
        new GetMetricDataCommand({ MetricDataQueries: queries.slice(i, i + 500), StartTime: new Date(endMs - spanMs), EndTime: new Date(endMs), NextToken: token }),
      );
      for (const r of out.MetricDataResults ?? []) {
        if (r.Id) sums.set(r.Id, (sums.get(r.Id) ?? 0) + (r.Values ?? []).reduce((n, v) => n + v, 0));
      }
      token = out.NextToken;
    } while (token);
  }
  return loadsFrom(stages, sums, spanMs);
}

/** The name in a Lambda function ARN (arn:aws:lambda:region:account:function:name[:qualifier]); a name stays as it is. */
export function functionNameOf(arnOrName: string): string {
  const parts = arnOrName.split(':');
  return parts.length >= 7 && parts[5] === 'function' ? parts[6] : arnOrName;
}

/** A function reading a stage queue, and the maximum concurrency its event source mapping allows (undefined: not set, the account's limit). */
export interface StageConsumer {
  readonly functionName: string;
  readonly maxConcurrency?: number;
}

/** The event source mappings reading `queueArn` (ListEventSourceMappings, every page). */
export async function stageConsumers(lambda: LambdaClient, queueArn: string): Promise<StageConsumer[]> {
  const { ListEventSourceMappingsCommand } = await import('@aws-sdk/client-lambda');
  const out: StageConsumer[] = [];
  let marker: string | undefined;
  do {
    const r = await lambda.send(new ListEventSourceMappingsCommand({ EventSourceArn: queueArn, Marker: marker }));
    for (const m of r.EventSourceMappings ?? []) {
      if (m.FunctionArn) out.push({ functionName: functionNameOf(m.FunctionArn), ...(m.ScalingConfig?.MaximumConcurrency ? { maxConcurrency: m.ScalingConfig.MaximumConcurrency } : {}) });
    }
    marker = r.NextMarker;
  } while (marker);
  return out;
}
