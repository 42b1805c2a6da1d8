/**
 * What an operator of the job watches: one dashboard (ingestion, each stage's backlog,
 * lag and function, the handlers' own metrics, checkpoints) and the alarms that mean
 * someone must act: a dead letter was parked, a stage falls behind, a partition stalled
 * on infrastructure errors, the endpoint answers 5xx, a checkpoint failed.
 */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import type { Construct } from 'constructs';
import type { Ingestion } from './ingestion.ts';
import type { ResolvedProps } from './props.ts';
import type { StageResources } from './stages.ts';

/** Powertools Metrics namespace and dimension of the handlers (functions/*.ts). */
export const METRICS_NAMESPACE = 'Sluice';

/**
 * A stalled partition (lib/aws/group-backoff.ts) is tried again every 3 hours and emits
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
  const own = (metricName: string, period = MINUTE) => new cloudwatch.Metric({ namespace: METRICS_NAMESPACE, metricName, dimensionsMap: { service: job }, period, statistic: 'Sum' });
  alarm(
    'StalledPartitionsAlarm',
    own('stalledPartitions', STALL_ALARM_PERIOD),
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
  }
  dashboard.addWidgets(
    graph('Records in, duplicates dropped', [own('recordsIn'), own('duplicatesDropped')], 8),
    graph('Dead letters, failed groups', [own('deadLetters'), own('groupFailures')], 8),
    graph('Backoffs, stalled partitions', [own('groupRetries'), own('stalledPartitions')], 8),
  );
  if (stateMachine) {
    const five = { period: Duration.minutes(5), statistic: 'Sum' };
    dashboard.addWidgets(
      graph('Checkpoints', [stateMachine.metricStarted(five), stateMachine.metricSucceeded(five), stateMachine.metricFailed(five), stateMachine.metricTimedOut(five)], 24),
    );
  }
  return { dashboard, alarms };
}
