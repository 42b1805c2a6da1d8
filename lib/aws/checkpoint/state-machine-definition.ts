/**
 * The checkpoint state machine's definition (Amazon States Language, JSONPath), built
 * from its parameters alone: infra/checkpoint-state-machine.ts deploys it (the task ARN
 * and partition as CloudFormation tokens), and local-AWS mode runs the same JSON with
 * aws-local-stepfunctions (lib/testing/local-aws/checkpoint-state-machine.ts).
 *
 *   Resume -> WaitInterval -> Open -> Inject -> WaitForAcks -> Decide -> Commit | Abort -> WaitInterval ...
 *                              |                    ^------ pending -----'
 *                              +-> idle: Done (nothing runs at zero traffic)
 *                              +-> idle, event-time timers pending: WaitTimers ($.wait s) -> Probe -> AfterOpen
 *                              +-> after maxEpochs: ContinueAsNew (StartExecution of itself) -> Done
 *   any task failing past its retries -> Backoff -> Resume (coordinator resume from the control items)
 *
 * Every Task but ContinueAsNew invokes the one task function (functions/checkpoint.ts)
 * with `{ action, execution, carry, limits }` and routes on the carry's `next`
 * (checkpoint-task.ts).
 */
import { type Action, type Limits, TASK_ERRORS } from './checkpoint-task.ts';

/** The states by role: what a local runner maps its waits and task handlers by. */
export const CHECKPOINT_STATES = {
  resume: 'Resume',
  open: 'Open',
  inject: 'Inject',
  decide: 'Decide',
  commit: 'Commit',
  abort: 'Abort',
  probe: 'Probe',
  afterResume: 'AfterResume',
  afterOpen: 'AfterOpen',
  afterDecide: 'AfterDecide',
  waitInterval: 'WaitInterval',
  waitForAcks: 'WaitForAcks',
  waitTimers: 'WaitTimers',
  backoff: 'Backoff',
  continueAsNew: 'ContinueAsNew',
  done: 'Done',
  failed: 'Failed',
} as const;

/** Attempts of a task before its Catch takes over (the first one and its retries). */
export const TASK_ATTEMPTS = 3;

export interface CheckpointDefinitionParams {
  /** The task function's ARN (a token when deployed). */
  readonly taskArn: string;
  /** The AWS partition of the startExecution integration (a token when deployed). */
  readonly partition: string;
  /** Between the end of one epoch and the opening of the next (WaitInterval). */
  readonly intervalSeconds: number;
  /** Between two looks for acks (WaitForAcks), and before a resume after a failure (Backoff). */
  readonly pollSeconds: number;
  /** Sent to every task. */
  readonly limits: Limits;
}

export type AslState = Record<string, any>;

export interface AslDefinition {
  readonly StartAt: string;
  readonly States: Record<string, AslState>;
}

const S = CHECKPOINT_STATES;

/** Routes on the carry's `next`: the first matching value goes to its state, anything else to `otherwise`. */
function choice(routes: readonly (readonly [string, string])[], otherwise: string): AslState {
  return { Type: 'Choice', Choices: routes.map(([next, state]) => ({ Variable: '$.next', StringEquals: next, Next: state })), Default: otherwise };
}

const wait = (seconds: number, next: string): AslState => ({ Type: 'Wait', Seconds: seconds, Next: next });

/** The definition (pure). */
export function checkpointStateMachineDefinition(p: CheckpointDefinitionParams): AslDefinition {
  const task = (action: Action, next: string, onFailure: string): AslState => ({
    Type: 'Task',
    Resource: p.taskArn,
    Parameters: { action, 'execution.$': '$$.Execution.Name', 'carry.$': '$', limits: { ...p.limits } },
    Next: next,
    Retry: [
      {
        ErrorEquals: ['Lambda.ServiceException', 'Lambda.AWSLambdaException', 'Lambda.SdkClientException', 'Lambda.TooManyRequestsException', TASK_ERRORS.retryable],
        IntervalSeconds: 1,
        MaxAttempts: TASK_ATTEMPTS - 1,
        BackoffRate: 2,
        JitterStrategy: 'FULL',
      },
    ],
    // A failure past the retries resumes the coordinator from its control items; the resume step counts failures.
    Catch: [{ ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: onFailure }],
  });
  return {
    StartAt: S.resume,
    States: {
      [S.resume]: task('resume', S.afterResume, S.failed),
      [S.afterResume]: choice(
        [
          ['fail', S.failed],
          ['end', S.done],
          ['decide', S.waitForAcks],
          ['commit', S.commit],
        ],
        S.waitInterval,
      ),
      [S.waitInterval]: wait(p.intervalSeconds, S.open),
      [S.open]: task('open', S.afterOpen, S.backoff),
      [S.afterOpen]: choice(
        [
          ['inject', S.inject],
          ['end', S.done],
          ['continue', S.continueAsNew],
          ['decide', S.waitForAcks],
          ['commit', S.commit],
          ['timers', S.waitTimers],
        ],
        S.waitInterval,
      ),
      [S.inject]: task('inject', S.waitForAcks, S.backoff),
      [S.waitForAcks]: wait(p.pollSeconds, S.decide),
      [S.decide]: task('decide', S.afterDecide, S.backoff),
      [S.afterDecide]: choice(
        [
          ['commit', S.commit],
          ['abort', S.abort],
          ['pending', S.waitForAcks],
        ],
        S.waitInterval,
      ),
      [S.commit]: task('commit', S.waitInterval, S.backoff),
      [S.abort]: task('abort', S.waitInterval, S.backoff),
      // Idle, but timers wait for the watermark (checkpoint-timers.ts): wait as long as the open step computed, then probe.
      [S.waitTimers]: { Type: 'Wait', SecondsPath: '$.wait', Next: S.probe },
      [S.probe]: task('probe', S.afterOpen, S.backoff),
      [S.continueAsNew]: {
        Type: 'Task',
        Resource: `arn:${p.partition}:states:::states:startExecution`,
        Parameters: { 'StateMachineArn.$': '$$.StateMachine.Id', 'Name.$': '$.child.name', 'Input.$': '$.child.input' },
        ResultPath: null,
        Next: S.done,
        // The first matching retrier decides: ExecutionAlreadyExists (States.TaskFailed would match it
        // too) is never retried, it means the successor already started (a retry whose first
        // attempt got through), which the Catch below takes as done.
        Retry: [
          { ErrorEquals: ['StepFunctions.ExecutionAlreadyExistsException'], MaxAttempts: 0 },
          { ErrorEquals: ['StepFunctions.SdkClientException', 'StepFunctions.StepFunctionsException', 'States.TaskFailed'], IntervalSeconds: 1, BackoffRate: 2, MaxAttempts: 3 },
        ],
        Catch: [{ ErrorEquals: ['StepFunctions.ExecutionAlreadyExistsException'], ResultPath: '$.error', Next: S.done }],
      },
      [S.backoff]: wait(p.pollSeconds, S.resume),
      [S.done]: { Type: 'Succeed' },
      [S.failed]: { Type: 'Fail', Error: 'Sluice.CoordinatorFailed', Cause: 'the checkpoint coordinator failed repeatedly; see the execution history and the task logs' },
    },
  };
}
