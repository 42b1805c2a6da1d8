/**
 * The checkpoint state machine's definition (infra/checkpoint-state-machine.ts): valid
 * ASL (asl-validator), JSONPath only, the loop shape the cost figures assume, and the
 * history and cost arithmetic. test/aws/checkpoint-sfn.test.ts runs the same definition.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { checkpointAsl, checkpointPlan, HISTORY_BUDGET, HISTORY_LIMIT, TRANSITIONS_PER_EPOCH } from '../../infra/checkpoint-state-machine.ts';
import { SluiceJobPropsError } from '../../infra/errors.ts';

type Validator = (definition: unknown, options?: { checkPaths?: boolean; checkArn?: boolean }) => { isValid: boolean; errors: unknown[] };
const validator = createRequire(import.meta.url)('asl-validator') as Validator;

describe('checkpoint state machine definition', () => {
  const asl = checkpointAsl();

  it('passes asl-validator (paths and ARNs checked) and uses JSONPath only', () => {
    const r = validator(asl, { checkPaths: true, checkArn: true });
    expect(r.errors).toEqual([]);
    expect(r.isValid).toBe(true);
    expect(JSON.stringify(asl)).not.toMatch(/JSONata|\{%/);
  });

  it('loops Wait -> Open -> Inject -> Wait -> Decide -> Commit in 8 transitions, ending on idle', () => {
    const s = asl.States;
    expect(asl.StartAt).toBe('Resume');
    const path = ['WaitInterval', 'Open', 'AfterOpen', 'Inject', 'WaitForAcks', 'Decide', 'AfterDecide', 'Commit'];
    expect(path).toHaveLength(TRANSITIONS_PER_EPOCH);
    expect(s.WaitInterval.Next).toBe('Open');
    expect(s.Open.Next).toBe('AfterOpen');
    expect(s.AfterOpen.Choices).toContainEqual({ Variable: '$.next', StringEquals: 'inject', Next: 'Inject' });
    expect(s.AfterOpen.Choices).toContainEqual({ Variable: '$.next', StringEquals: 'end', Next: 'Done' });
    expect(s.AfterOpen.Choices).toContainEqual({ Variable: '$.next', StringEquals: 'continue', Next: 'ContinueAsNew' });
    expect(s.Inject.Next).toBe('WaitForAcks');
    expect(s.WaitForAcks.Next).toBe('Decide');
    expect(s.AfterDecide.Choices).toContainEqual({ Variable: '$.next', StringEquals: 'pending', Next: 'WaitForAcks' });
    expect(s.AfterDecide.Choices).toContainEqual({ Variable: '$.next', StringEquals: 'abort', Next: 'Abort' });
    expect(s.Commit.Next).toBe('WaitInterval');
    expect(s.Abort.Next).toBe('WaitInterval');
    expect(s.Done.Type).toBe('Succeed');
  });

  it('retries every task with backoff and catches failures into a resume', () => {
    for (const name of ['Resume', 'Open', 'Inject', 'Decide', 'Commit', 'Abort', 'Probe']) {
      const t = asl.States[name];
      expect(t.Type).toBe('Task');
      expect(t.Retry[0].ErrorEquals).toEqual(expect.arrayContaining(['Lambda.ServiceException', 'Lambda.TooManyRequestsException', 'Sluice.Retryable']));
      expect(t.Retry[0].BackoffRate).toBe(2);
      expect(t.Catch[0]).toMatchObject({ ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: name === 'Resume' ? 'Failed' : 'Backoff' });
      // Payloads carry ids and counters only; the coordinator lives in DynamoDB.
      expect(Object.keys(t.Parameters).sort()).toEqual(['action', 'carry.$', 'execution.$', 'limits']);
    }
    expect(asl.States.Backoff.Next).toBe('Resume');
    // ExecutionAlreadyExists is matched first and never retried: the successor already started.
    expect(asl.States.ContinueAsNew.Retry[0]).toEqual({ ErrorEquals: ['StepFunctions.ExecutionAlreadyExistsException'], MaxAttempts: 0 });
    expect(asl.States.ContinueAsNew.Catch[0]).toMatchObject({ ErrorEquals: ['StepFunctions.ExecutionAlreadyExistsException'], Next: 'Done' });
    // Idle with event-time timers pending: wait the computed seconds, probe, then on as after Open.
    expect(asl.States.AfterOpen.Choices).toContainEqual({ Variable: '$.next', StringEquals: 'timers', Next: 'WaitTimers' });
    expect(asl.States.WaitTimers).toMatchObject({ Type: 'Wait', SecondsPath: '$.wait', Next: 'Probe' });
    expect(asl.States.Probe.Next).toBe('AfterOpen');
    expect(asl.States.ContinueAsNew).toMatchObject({ Resource: 'arn:aws:states:::states:startExecution', Parameters: { 'StateMachineArn.$': '$$.StateMachine.Id' }, Next: 'Done' });
  });

  it('sizes continue-as-new from the worst epoch against half the history limit', () => {
    const plan = checkpointPlan();
    expect(plan.eventsPerEpoch.normal).toBe(28);
    expect(plan.limits.maxEpochs).toBe(Math.floor(HISTORY_BUDGET / plan.eventsPerEpoch.worst));
    expect(plan.limits.maxEpochs * plan.eventsPerEpoch.worst).toBeLessThanOrEqual(HISTORY_LIMIT / 2);
    expect(plan.limits.epochTimeoutMs).toBe(240_000); // outlasts one failed batch at the default 30 s operator timeout
    expect(plan.limits.maxEpochs).toBe(26);
    expect(() => checkpointPlan({ operatorTimeoutSeconds: 30, epochTimeoutSeconds: 60 })).toThrow(/checkpoints.epochTimeoutSeconds: expected at least 224 s/);
    expect(plan.monthlyCostUsd).toBe(8.64);
    // Shorter polls mean more polls per worst epoch, so fewer epochs per execution.
    expect(checkpointPlan({ pollSeconds: 1 }).limits.maxEpochs).toBeLessThan(plan.limits.maxEpochs);
    expect(checkpointAsl({ maxEpochs: 2 }).States.Open.Parameters.limits.maxEpochs).toBe(2);
    expect(() => checkpointPlan({ maxEpochs: 10_000 })).toThrow(SluiceJobPropsError);
    expect(() => checkpointPlan({ intervalSeconds: 0.5 })).toThrow(/checkpoints.intervalSeconds: expected a whole number of seconds/);
  });
});
