/**
 * Two jobs of one project, and one job deployed twice under different stack names, can
 * live in one account and region: no physically named resource (queues, the state table,
 * the state machine, anything else with a literal name) appears in two templates.
 */
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import pageViews from '../../examples/first-job.ts';
import { job as q5 } from '../../examples/nexmark/q5.ts';
import type { Job } from '../../lib/api/stream.ts';
import { checkpointStateMachine } from '../../infra/checkpoint-state-machine.ts';
import { createJobApp } from '../../infra/job-app.ts';
import { physicalNames, sharedNames } from '../support/physical-names.ts';
import { NO_BUNDLING } from './support/stacks.ts';

const EXAMPLES = new URL('../../examples/', import.meta.url).pathname;

function templateNames(job: Job, jobModule: string, stackName?: string): string[] {
  const { stack } = createJobApp({ job, jobModule, stackName, context: { ...NO_BUNDLING, 'sluice:nag': 'false' }, checkpoints: checkpointStateMachine, validate: false });
  return physicalNames(Template.fromStack(stack).toJSON().Resources);
}

describe('physical names across deployments', () => {
  const q5Default = templateNames(q5, `${EXAMPLES}nexmark/q5.ts`);
  const q5Staging = templateNames(q5, `${EXAMPLES}nexmark/q5.ts`, 'Sluice-nexmark-q5-staging');
  const views = templateNames(pageViews, `${EXAMPLES}first-job.ts`);

  it('names the fixed resources (so the handlers find them)', () => {
    expect(q5Default.some((n) => n.startsWith('AWS::StepFunctions::StateMachine.StateMachineName='))).toBe(true);
    expect(q5Default).toContain('AWS::SQS::Queue.QueueName=nexmark-q5-s0.fifo');
    expect(q5Default).toContain('AWS::DynamoDB::Table.TableName=sluice-nexmark-q5');
    expect(q5Staging).toContain('AWS::SQS::Queue.QueueName=Sluice-nexmark-q5-staging-nexmark-q5-s0.fifo');
    expect(q5Staging).toContain('AWS::DynamoDB::Table.TableName=sluice-Sluice-nexmark-q5-staging-nexmark-q5');
  });

  it('two jobs of one project share no name', () => {
    expect(sharedNames(q5Default, views)).toEqual([]);
  });

  it('one job under two stack names shares no name', () => {
    expect(q5Staging.length).toBe(q5Default.length);
    expect(sharedNames(q5Default, q5Staging)).toEqual([]);
  });
});
