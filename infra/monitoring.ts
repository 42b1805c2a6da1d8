/**
 * What an operator of the job watches: one dashboard (ingestion, each stage's backlog,
 * lag and function, the handlers' own metrics per stage, backoffs per partition,
 * checkpoints) and the alarms that mean someone must act: a dead letter was parked, a
 * stage falls behind, a partition stalled on infrastructure errors, the endpoint answers
 * 5xx, a checkpoint execution failed, epochs keep being aborted. The handlers' metric
 * names and dimensions are lib/aws/handler-metrics.ts's.
 */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import type { Construct } from 'constructs';
import { ingestStreams } from '../lib/aws/ingest/ingest-handler.ts';
import { COORDINATOR_METRICS, INGEST_METRICS, METRIC_DIMENSIONS, METRICS_NAMESPACE, OPERATOR_METRICS } from '../lib/aws/handler-metrics.ts';
import type { Ingestion } from './ingestion.ts';
import type { ResolvedProps } from './props.ts';
import type { StageResources } from './stages.ts';

export { METRICS_NAMESPACE } from '../lib/aws/handler-metrics.ts';

/**
 * The checkpoint coordinator's count of aborted epochs (namespace METRICS_NAMESPACE,
 * dimension service = the job), as lib/aws/checkpoint/checkpoint-steps.ts emits it.
 */
export const EPOCHS_ABORTED_METRIC = COORDINATOR_METRICS.epochsAborted;
/**
 * An aborted epoch alone needs nobody: a restore, a redeployed stage or a partition slow
 * to acknowledge aborts the epoch in flight, and the next one starts an interval later.
 * An aborting epoch takes at least the interval plus the epoch timeout (60 s + 240 s at
 * the defaults), so three in 15 minutes means nearly every epoch aborts: checkpoints are
 * not completing, so the input log and the outboxes grow and a restore would go further back.
 */
export const ABORTED_EPOCHS_THRESHOLD = 3;
export const ABORTED_EPOCHS_PERIOD = Duration.minutes(15);

/**
 * A stalled partition (lib/aws/operator/group-backoff.ts) is tried again every 3 hours and emits
 * `stalledPartitions` each time; the alarm stays on while any datapoint of the last
 * STALL_ALARM_WINDOW is one, so it does not clear between two tries.
 */
export const STALL_ALARM_PERIOD = Duration.minutes(5);
export const STALL_ALARM_WINDOW = Duration.hours(4);

export interface Monitoring {
  readonly dashboard: cloudwatch.Dashboard;
  readonly alarms: readonly cloudwatch.Alarm[];
}

const MINUTE = Duration.minutes(1);

export function createMonitoring(scope: Construct, p: ResolvedProps, stages: readonly StageResources[], ingestion: Ingestion, stateMachine?: sfn.IStateMachine): Monitoring {
  const job = p.job.name;
  const alarms: cloudwatch.Alarm[] = [];
  const alarm = (id: string, metric: cloudwatch.IMetric, threshold: number, description: string, evaluationPeriods = 1, datapointsToAlarm?: number) => {
    const a = new cloudwatch.Alarm(scope, id, {
      metric,
      threshold,
      evaluationPeriods,
      ...(datapointsToAlarm === undefined ? {} : { datapointsToAlarm }),
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      // No data means an idle job, which is healthy.
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      alarmDescription: `Sluice ${job}: ${description}`,
    });
    for (const action of p.alarms.actions) a.addAlarmAction(action);
    alarms.push(a);
    return a;
  };

  const oldest = p.alarms.oldestMessageAge.toSeconds();
  for (const { stage, queue, deadLetterQueue } of stages) {
    alarm(
      `Stage${stage.id}DeadLettersAlarm`,
      deadLetterQueue.metricApproximateNumberOfMessagesVisible({ statistic: 'Maximum', period: MINUTE }),
      1,
      `stage ${stage.id} (${stage.name}) has messages in its dead-letter queue: parked records or undeliverable messages`,
    );
    alarm(
      `Stage${stage.id}OldestMessageAlarm`,
      queue.metricApproximateAgeOfOldestMessage({ statistic: 'Maximum', period: MINUTE }),
      oldest,
      `stage ${stage.id} (${stage.name}) has had a message waiting ${oldest} s or more for 3 minutes: it falls behind or is stuck`,
      3,
    );
  }
  // The handlers' metrics: per job (incidents), per stage (everything), per partition (incidents, by search).
  const own = (metricName: string, period = MINUTE) => new cloudwatch.Metric({ namespace: METRICS_NAMESPACE, metricName, dimensionsMap: { [METRIC_DIMENSIONS.service]: job }, period, statistic: 'Sum' });
  const ofStage = (metricName: string, stage: number, statistic = 'Sum') =>
    new cloudwatch.Metric({ namespace: METRICS_NAMESPACE, metricName, dimensionsMap: { [METRIC_DIMENSIONS.service]: job, [METRIC_DIMENSIONS.stage]: String(stage) }, period: MINUTE, statistic, label: `${metricName} stage ${stage}` });
  const byPartition = (metricName: string) =>
    new cloudwatch.MathExpression({
      expression: `SEARCH('{${METRICS_NAMESPACE},${METRIC_DIMENSIONS.partition},${METRIC_DIMENSIONS.service},${METRIC_DIMENSIONS.stage}} MetricName="${metricName}" ${METRIC_DIMENSIONS.service}="${job}"', 'Sum', 300)`,
      label: metricName,
      period: Duration.minutes(5),
    });
  alarm(
    'StalledPartitionsAlarm',
    own(OPERATOR_METRICS.stalledPartitions, STALL_ALARM_PERIOD),
    1,
    'a partition stalled: its message group kept failing on DynamoDB, SQS or S3 (throttling, timeouts) until it neared the queue\'s receive limit; it waits in its queue and is retried every 3 hours. Find the cause in the stage function\'s "partition stalled" log; unresolved, SQS moves the group to the DLQ after maxReceiveCount receives',
    STALL_ALARM_WINDOW.toMinutes() / STALL_ALARM_PERIOD.toMinutes(),
    1,
  );
  alarm('IngestServerErrorsAlarm', ingestion.metricServerErrors(), 1, 'the ingestion endpoint answered 5xx');
  if (stateMachine) {
    const five = { period: Duration.minutes(5), statistic: 'Sum' };
    alarm(
      'CheckpointFailuresAlarm',
      new cloudwatch.MathExpression({
        expression: 'failed + timedOut + aborted',
        usingMetrics: { failed: stateMachine.metricFailed(five), timedOut: stateMachine.metricTimedOut(five), aborted: stateMachine.metricAborted(five) },
        period: five.period,
        label: 'failed checkpoint executions',
      }),
      1,
      'a checkpoint coordinator execution failed, timed out or was aborted',
    );
    alarm(
      'AbortedEpochsAlarm',
      own(EPOCHS_ABORTED_METRIC, ABORTED_EPOCHS_PERIOD),
      ABORTED_EPOCHS_THRESHOLD,
      `${ABORTED_EPOCHS_THRESHOLD} or more checkpoint epochs were aborted within ${ABORTED_EPOCHS_PERIOD.toMinutes()} minutes: checkpoints are not completing (a partition does not acknowledge its barriers in time); the input log and the outboxes grow until one does. Find the stage in the coordinator's execution history and the stage function's logs`,
    );
  }

  const dashboard = new cloudwatch.Dashboard(scope, 'Dashboard', { defaultInterval: Duration.hours(3) });
  const graph = (title: string, left: cloudwatch.IMetric[], width = 6) => new cloudwatch.GraphWidget({ title, left, width, height: 6 });
  dashboard.addWidgets(
    new cloudwatch.TextWidget({
      markdown: `# Sluice ${job}\n${stages.length} stages: ${stages.map((s) => `${s.stage.id} ${s.stage.name} (${s.stage.parallelism})`).join(', ')}`,
      width: 12,
      height: 3,
    }),
    new cloudwatch.AlarmStatusWidget({ title: 'Alarms', alarms, width: 12, height: 3 }),
  );
  const ingest = ingestion.function.fn;
  dashboard.addWidgets(
    graph('Ingestion: requests, 4xx, 5xx', [ingestion.metricRequests(), ingestion.metricClientErrors(), ingestion.metricServerErrors()], 8),
    graph('Ingest function', [ingest.metricInvocations({ period: MINUTE }), ingest.metricErrors({ period: MINUTE }), ingest.metricThrottles({ period: MINUTE })], 8),
    graph('Ingest duration p99', [ingest.metricDuration({ period: MINUTE, statistic: 'p99' })], 8),
  );
  const sourceStages = [...new Set([...ingestStreams(p.plan).values()].map((s) => s.stage))];
  dashboard.addWidgets(graph('Events accepted, rejected, shed (by source stage)', sourceStages.flatMap((s) => [ofStage(INGEST_METRICS.eventsAccepted, s), ofStage(INGEST_METRICS.eventsRejected, s), ofStage(INGEST_METRICS.eventsShed, s)]), 24));
  const M = OPERATOR_METRICS;
  for (const { stage, queue, deadLetterQueue, operator } of stages) {
    const fn = operator.fn;
    const name = `Stage ${stage.id} ${stage.name}`;
    dashboard.addWidgets(
      graph(`${name}: backlog`, [queue.metricApproximateNumberOfMessagesVisible({ period: MINUTE }), queue.metricApproximateNumberOfMessagesNotVisible({ period: MINUTE })], 5),
      graph(`${name}: oldest message (s)`, [queue.metricApproximateAgeOfOldestMessage({ period: MINUTE, statistic: 'Maximum' })], 5),
      graph(`${name}: function`, [fn.metricInvocations({ period: MINUTE }), fn.metricErrors({ period: MINUTE }), fn.metricThrottles({ period: MINUTE })], 5),
      graph(`${name}: concurrency`, [fn.metric('ConcurrentExecutions', { period: MINUTE, statistic: 'Maximum' })], 4),
      graph(`${name}: DLQ`, [deadLetterQueue.metricApproximateNumberOfMessagesVisible({ period: MINUTE, statistic: 'Maximum' })], 5),
    );
    dashboard.addWidgets(
      graph(`${name}: records in, duplicates dropped, late dropped`, [ofStage(M.recordsIn, stage.id), ofStage(M.duplicatesDropped, stage.id), ofStage(M.lateDropped, stage.id)], 8),
      graph(`${name}: lag (ms, max)`, [ofStage(M.lag, stage.id, 'Maximum')], 8),
      graph(`${name}: dead letters, failed groups, backoffs, stalls`, [ofStage(M.deadLetters, stage.id), ofStage(M.groupFailures, stage.id), ofStage(M.groupRetries, stage.id), ofStage(M.stalledPartitions, stage.id)], 8),
    );
  }
  dashboard.addWidgets(
    graph('Backoffs by partition', [byPartition(M.groupRetries)], 12),
    graph('Stalled partitions by partition', [byPartition(M.stalledPartitions)], 12),
  );
  if (stateMachine) {
    const five = { period: Duration.minutes(5), statistic: 'Sum' };
    dashboard.addWidgets(
      graph('Checkpoint executions', [stateMachine.metricStarted(five), stateMachine.metricSucceeded(five), stateMachine.metricFailed(five), stateMachine.metricTimedOut(five)], 12),
      graph('Aborted epochs', [own(EPOCHS_ABORTED_METRIC, Duration.minutes(5))], 12),
    );
  }
  return { dashboard, alarms };
}
