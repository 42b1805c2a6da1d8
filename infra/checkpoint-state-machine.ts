/**
 * The checkpoint coordinator on AWS: a Step Functions Standard state machine whose tasks
 * are one Lambda function (functions/checkpoint.ts, an `action` per task). One definition,
 * built from the timing below by lib/aws/checkpoint/state-machine-definition.ts (its loop
 * is drawn there): SluiceJob deploys it (checkpointStateMachine, the hook of
 * infra/checkpoints.ts), local-AWS mode and the tests run the same JSON (checkpointAsl()).
 *
 * Cost: a normal epoch is 8 transitions (WaitInterval, Open, AfterOpen, Inject,
 * WaitForAcks, Decide, AfterDecide, Commit); each further poll for acks adds 3. At the
 * default 60 s interval a busy job pays at most 43,200 epochs x 8 x $0.000025 = $8.64 a
 * month (checkpointPlan().monthlyCostUsd). A job with no input and no event-time timers
 * pending pays nothing: the execution ends at the first idle Open. With timers pending,
 * each wake-up (lib/aws/checkpoint/checkpoint-idle.ts) is WaitTimers, Probe, AfterOpen and an epoch
 * (Inject ... Commit, WaitInterval, Open, AfterOpen): 11 transitions and 5 invocations of
 * the task function, plus one probe message per source partition; the wait between two is
 * the processing time until the earliest timer is due, at least the sources' idle timeout
 * and at most an hour (lib/aws/checkpoint/checkpoint-timers.ts).
 *
 * History: a Lambda task state logs 5 events, a Wait or Choice 2, so a normal epoch logs
 * 28. maxEpochs (epochs per execution before continuing as new) is sized by
 * checkpointPlan() from the worst epoch, which polls for acks until the epoch timeout
 * (ceil(epochTimeout / poll) + 1 rounds of WaitForAcks, Decide, AfterDecide) and has two
 * tasks retried to exhaustion: maxEpochs = floor(HISTORY_BUDGET / worst-epoch events),
 * half the 25,000-event limit. A longer epoch timeout or a shorter poll means fewer
 * epochs per execution; checkpointPlan().eventsPerEpoch reports both figures.
 *
 * Waking up (lib/aws/checkpoint/checkpoint-wakeup.ts): the ingest function touches the activity
 * item (DynamoDbAckStore.touch, at most once per activityGrain per container) and then,
 * when the lease item (`${job}#c` ptr#execution) has no live owner, calls StartExecution
 * named `<job>-<floor(now / grain)>`: duplicates within a bucket are refused by name, and
 * one from another bucket ends at its first step because the lease is taken. An execution
 * ending idle releases the lease and then re-reads the activity item, so input arriving
 * meanwhile is either seen by it or finds the lease free.
 */
import { ArnFormat, Names, Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { NagSuppressions } from 'cdk-nag';
import type { Construct } from 'constructs';
import { signalsPk } from '../lib/aws/checkpoint/checkpoint-acks.ts';
import { DEFAULT_ACTIVITY_GRAIN_MS, type Limits } from '../lib/aws/checkpoint/checkpoint-task.ts';
import { type AslDefinition, checkpointStateMachineDefinition, TASK_ATTEMPTS } from '../lib/aws/checkpoint/state-machine-definition.ts';
import type { CheckpointStateMachineFactory } from './checkpoints.ts';
import { SluiceJobPropsError } from './errors.ts';
import { ENTRIES } from './function.ts';
import { grantTable } from './permissions.ts';
import { VISIBILITY_FACTOR } from './stages.ts';

export interface CheckpointTimingProps {
  /** Between the end of one epoch and the opening of the next. @default 60 */
  readonly intervalSeconds?: number;
  /** Between two looks for acks. @default 5 */
  readonly pollSeconds?: number;
  /**
   * An epoch not fully acknowledged by then is aborted. It must outlast one failed batch
   * on the way (minimumEpochTimeoutSeconds): SluiceJob checks it against its
   * operatorTimeout at synth. @default minimumEpochTimeoutSeconds(operatorTimeoutSeconds) rounded up to a whole minute (240 s at the default 30 s)
   */
  readonly epochTimeoutSeconds?: number;
  /** The stage functions' timeout (SluiceJob's operatorTimeout): sizes and checks epochTimeoutSeconds. @default 30 */
  readonly operatorTimeoutSeconds?: number;
  /** Epochs per execution before continuing as new. @default - sized from the history budget */
  readonly maxEpochs?: number;
  /** Failures recovered in a row before the execution fails. @default 5 */
  readonly maxFailures?: number;
  /** The ingest path's activity touch granularity. @default 10 */
  readonly activityGrainSeconds?: number;
}

/** Step Functions' limit, and the share of it one execution may plan to use. */
export const HISTORY_LIMIT = 25_000;
export const HISTORY_BUDGET = HISTORY_LIMIT / 2;
/** History events of one state: a Lambda task (entered, scheduled, started, succeeded, exited), a Wait or Choice (entered, exited). */
const TASK_EVENTS = 5;
const FLOW_EVENTS = 2;
/** A failed attempt adds scheduled, started, failed. */
const RETRY_EVENTS = 3;
/** Tasks per epoch allowed to use every retry in the worst-case estimate. */
const RETRIED_TASKS = 2;
export const TRANSITIONS_PER_EPOCH = 8;
export const PRICE_PER_TRANSITION = 0.000025;

/** The operator handler's first three failure backoffs (lib/aws/operator/group-backoff.ts: 2 s doubling): 2 + 4 + 8. */
const FAILURE_BACKOFF_SECONDS = 2 + 4 + 8;

/**
 * The shortest epoch timeout that outlasts one failed batch: a batch that crashes or times
 * out comes back after the stage queue's visibility timeout (VISIBILITY_FACTOR x the
 * function timeout, counted from its receipt), runs again (one function timeout), and a
 * batch the handler failed cleanly backs off (three steps) instead. A shorter timeout
 * aborts the epoch in flight whenever one batch fails.
 */
export function minimumEpochTimeoutSeconds(operatorTimeoutSeconds: number): number {
  return operatorTimeoutSeconds * VISIBILITY_FACTOR + operatorTimeoutSeconds + FAILURE_BACKOFF_SECONDS;
}

export interface CheckpointPlan {
  readonly intervalSeconds: number;
  readonly pollSeconds: number;
  readonly limits: Limits;
  readonly eventsPerEpoch: { readonly normal: number; readonly worst: number };
  readonly transitionsPerEpoch: number;
  /** A busy job's coordinator for 30 days of back-to-back epochs (upper bound; idle costs 0). */
  readonly monthlyCostUsd: number;
}

/** Timing, limits and the history and cost figures they imply (pure; checked at synth). */
export function checkpointPlan(props: CheckpointTimingProps = {}): CheckpointPlan {
  const intervalSeconds = props.intervalSeconds ?? 60;
  const pollSeconds = props.pollSeconds ?? 5;
  const operatorTimeout = props.operatorTimeoutSeconds ?? 30;
  const floor = minimumEpochTimeoutSeconds(operatorTimeout);
  const timeout = props.epochTimeoutSeconds ?? Math.ceil(floor / 60) * 60;
  const grain = props.activityGrainSeconds ?? DEFAULT_ACTIVITY_GRAIN_MS / 1000;
  for (const [k, v] of Object.entries({ intervalSeconds, pollSeconds, epochTimeoutSeconds: timeout, activityGrainSeconds: grain })) {
    if (!Number.isInteger(v) || v < (k === 'activityGrainSeconds' ? 0 : 1)) throw new SluiceJobPropsError(`checkpoints.${k}`, 'a whole number of seconds >= 1', String(v));
  }
  if (props.operatorTimeoutSeconds !== undefined && timeout < floor) {
    throw new SluiceJobPropsError(
      'checkpoints.epochTimeoutSeconds',
      `at least ${floor} s: the stage queues' visibility timeout (${VISIBILITY_FACTOR} x operatorTimeout ${operatorTimeout} s) + one more operatorTimeout + the failure backoffs ${FAILURE_BACKOFF_SECONDS} s, so that one failed batch does not abort the epoch in flight`,
      `${timeout} s`,
    );
  }
  const maxPolls = Math.ceil(timeout / pollSeconds) + 1;
  const normal = FLOW_EVENTS + TASK_EVENTS + FLOW_EVENTS + TASK_EVENTS + FLOW_EVENTS + TASK_EVENTS + FLOW_EVENTS + TASK_EVENTS;
  const worst = FLOW_EVENTS + TASK_EVENTS + FLOW_EVENTS + TASK_EVENTS + maxPolls * (2 * FLOW_EVENTS + TASK_EVENTS) + TASK_EVENTS + RETRIED_TASKS * (TASK_ATTEMPTS - 1) * RETRY_EVENTS;
  const fit = Math.floor(HISTORY_BUDGET / worst);
  const maxEpochs = props.maxEpochs ?? fit;
  if (!Number.isInteger(maxEpochs) || maxEpochs < 1 || maxEpochs > fit) throw new SluiceJobPropsError('checkpoints.maxEpochs', `an integer from 1 to ${fit} (history budget ${HISTORY_BUDGET} / ${worst} events per worst epoch)`, String(maxEpochs));
  const maxFailures = props.maxFailures ?? 5;
  // The lease outlives the longest gap between two renewals: an interval, a whole epoch, a recovery.
  const leaseMs = (intervalSeconds + timeout + 2 * pollSeconds + 120) * 1000;
  const epochs = (30 * 24 * 3600) / intervalSeconds;
  return {
    intervalSeconds,
    pollSeconds,
    limits: { maxEpochs, maxFailures, leaseMs, activityGrainMs: grain * 1000, epochTimeoutMs: timeout * 1000 },
    eventsPerEpoch: { normal, worst },
    transitionsPerEpoch: TRANSITIONS_PER_EPOCH,
    monthlyCostUsd: Math.round(epochs * TRANSITIONS_PER_EPOCH * PRICE_PER_TRANSITION * 100) / 100,
  };
}

/** The definition as ASL JSON (what the local runners execute), with the task at `taskArn`. */
export function checkpointAsl(props: CheckpointTimingProps = {}, taskArn = 'arn:aws:lambda:us-east-1:123456789012:function:sluice-checkpoint'): Record<string, any> {
  return definitionOf(checkpointPlan(props), taskArn, 'aws');
}

function definitionOf(plan: CheckpointPlan, taskArn: string, partition: string): AslDefinition {
  return checkpointStateMachineDefinition({ taskArn, partition, intervalSeconds: plan.intervalSeconds, pollSeconds: plan.pollSeconds, limits: plan.limits });
}

/** The SluiceJob hook (infra/checkpoints.ts): the task function, its grants, the state machine, at the default timing. */
export const checkpointStateMachine: CheckpointStateMachineFactory = (scope, ctx) => checkpointStateMachineWith({})(scope, ctx);

/** The hook with its own timing, checked at synth against the job's operatorTimeout (checkpointPlan). */
export function checkpointStateMachineWith(timing: CheckpointTimingProps): CheckpointStateMachineFactory {
  return (scope, ctx) => buildCheckpointStateMachine(scope, ctx, { ...timing, operatorTimeoutSeconds: ctx.operatorTimeout.toSeconds() });
}

function buildCheckpointStateMachine(scope: Construct, ctx: Parameters<CheckpointStateMachineFactory>[1], timing: CheckpointTimingProps): sfn.IStateMachine {
  const job = ctx.plan.job.name;
  const task = ctx.newFunction('Coordinator', ENTRIES.checkpoint);
  ctx.grantCoordinator(task.fn);
  ctx.grantInjectBarriers(task.fn);
  // Ack and activity items, which the data path writes (checkpoint-acks.ts).
  grantTable(task.fn, ctx.table, ['dynamodb:GetItem'], [signalsPk(job)], ctx.encryptionKey);
  const stateMachineName = Names.uniqueResourceName(scope, { maxLength: 80, separator: '-' });
  const machine = new sfn.StateMachine(scope, 'StateMachine', {
    stateMachineName,
    stateMachineType: sfn.StateMachineType.STANDARD,
    definitionBody: sfn.DefinitionBody.fromString(Stack.of(scope).toJsonString(definitionOf(checkpointPlan(timing), task.fn.functionArn, Stack.of(scope).partition))),
    logs: { destination: ctx.logGroup, level: sfn.LogLevel.ALL },
    tracingEnabled: true,
  });
  // Its Task states invoke the task function, by ARN or qualified ARN (a version or alias).
  machine.addToRolePolicy(new iam.PolicyStatement({ actions: ['lambda:InvokeFunction'], resources: [task.fn.functionArn, `${task.fn.functionArn}:*`] }));
  // Continue as new: StartExecution of itself, by its fixed name (its ARN would be a cycle).
  const self = Stack.of(scope).formatArn({ service: 'states', resource: 'stateMachine', resourceName: stateMachineName, arnFormat: ArnFormat.COLON_RESOURCE_NAME });
  iam.Grant.addToPrincipal({ grantee: machine, actions: ['states:StartExecution'], resourceArns: [self] });
  NagSuppressions.addResourceSuppressions(
    machine.role,
    [
      {
        id: 'AwsSolutions-IAM5',
        reason: 'Step Functions invokes the task function by ARN or qualified ARN (`<function arn>:*`, any version or alias); it is this one function only.',
        appliesTo: [{ regex: '/^Resource::<[A-Za-z0-9]+\\.Arn>:\\*$/g' }],
      },
    ],
    true,
  );
  return machine;
}
