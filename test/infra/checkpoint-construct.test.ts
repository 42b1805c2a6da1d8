/**
 * The checkpoint state machine inside SluiceJob (the factory the apps pass): the deployed
 * definition is checkpointAsl()'s (one source of truth), its task and machine roles are
 * least privilege, and cdk-nag's AwsSolutions pack has no unsuppressed finding.
 */
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { describe, expect, it } from 'vitest';
import { checkpointAsl, checkpointStateMachine } from '../../infra/checkpoint-state-machine.ts';
import { actions, jobStack, logicalId, nagFindings, roleStatements } from './support/stacks.ts';

/** CloudFormation's Fn::Join of the definition, with the task ARN and partition put in. */
function definitionOf(resource: { Properties?: Record<string, any> }, taskArn: string): unknown {
  const join = resource.Properties!.DefinitionString['Fn::Join'] as [string, unknown[]];
  const text = join[1].map((p) => (typeof p === 'string' ? p : (p as { Ref?: string }).Ref === 'AWS::Partition' ? 'aws' : taskArn)).join(join[0]);
  return JSON.parse(text);
}

describe('SluiceJob with the checkpoint state machine', () => {
  const { stack, job, resources } = jobStack({ checkpoints: checkpointStateMachine }, { nag: true });
  const machine = job.stateMachine as sfn.StateMachine;
  const task = job.functions.find((f) => f.fn.node.id === 'Coordinator')!;

  it('logs executions to a vended-logs group (no account resource policy entry needed)', () => {
    expect(resources[logicalId(stack, job.checkpointLogGroup)].Properties!.LogGroupName).toBe('/aws/vendedlogs/states/sluice-Test-nexmark-q5-checkpoints');
  });

  it('deploys the definition the local tests run (one source of truth)', () => {
    const sm = resources[logicalId(stack, machine)];
    expect(sm.Properties!.StateMachineType).toBe('STANDARD');
    expect(sm.Properties!.TracingConfiguration).toEqual({ Enabled: true });
    const arn = 'arn:aws:lambda:us-east-1:123456789012:function:sluice-checkpoint';
    expect(definitionOf(sm, arn)).toEqual(checkpointAsl({}, arn));
  });

  it('grants the task its control items, ack items, bucket prefixes and the source queue; the machine only itself and its task', () => {
    const statements = roleStatements(resources, logicalId(stack, task.role));
    const keys = statements.flatMap((s) => (s.Condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys'] as string[] | undefined) ?? []);
    expect(keys.sort()).toEqual(['nexmark-q5#a', 'nexmark-q5#c', 'nexmark-q5#p#0#*']);
    expect(statements.find((s) => s.Condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys']?.toString() === 'nexmark-q5#a')!.Action).toBe('dynamodb:GetItem');
    // Input log truncation: the source stage's segment items, and deleting their objects.
    expect(statements.find((s) => s.Condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys']?.toString() === 'nexmark-q5#p#0#*')!.Action).toEqual(['dynamodb:Query', 'dynamodb:BatchWriteItem']);
    expect(JSON.stringify(statements.find((s) => actions(s).length === 1 && actions(s)[0] === 's3:DeleteObject')!.Resource)).toContain('nexmark-q5/input-log/*');
    // Savepoints are copied out of the chain: written and read, never deleted by the task.
    const savepoints = statements.filter((s) => JSON.stringify(s.Resource).includes('nexmark-q5/savepoints/*'));
    expect(savepoints.flatMap(actions).sort()).toEqual(['s3:GetObject', 's3:PutObject']);
    expect(statements.find((s) => actions(s).includes('sqs:SendMessage'))!.Resource).toEqual({ 'Fn::GetAtt': [logicalId(stack, job.stages[0].queue), 'Arn'] });
    const machineStatements = roleStatements(resources, logicalId(stack, machine.role));
    const start = machineStatements.find((s) => actions(s).includes('states:StartExecution'))!;
    expect(JSON.stringify(start.Resource)).toContain(`:stateMachine:${resources[logicalId(stack, machine)].Properties!.StateMachineName}`);
    expect(machineStatements.flatMap(actions).every((a) => /^(logs|xray|lambda:InvokeFunction|states:StartExecution)/.test(a))).toBe(true);
  });

  it('lets the stages snapshot and acknowledge barriers, and the ingest function wake the machine', () => {
    const stage = roleStatements(resources, logicalId(stack, job.stages[0].operator.role));
    const ack = stage.find((s) => s.Condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys']?.toString() === 'nexmark-q5#a')!;
    expect(ack.Action).toBe('dynamodb:PutItem');
    expect(JSON.stringify(stage.filter((s) => actions(s).includes('s3:PutObject')).map((s) => s.Resource))).toContain('nexmark-q5/snapshots/*');
    // The source stage logs its input; the others do not.
    expect(JSON.stringify(stage.filter((s) => actions(s).includes('s3:PutObject')).map((s) => s.Resource))).toContain('nexmark-q5/input-log/*');
    expect(JSON.stringify(roleStatements(resources, logicalId(stack, job.stages[1].operator.role)))).not.toContain('input-log');
    const fn = (f: { fn: unknown }) => resources[logicalId(stack, f.fn)];
    expect(fn(job.stages[0].operator).Properties!.Environment.Variables.SLUICE_CHECKPOINTS).toBe('1');
    // What `sluice savepoint|restore --target aws` reads from a stage queue's function (lib/aws/deployment.ts).
    expect(fn(job.stages[0].operator).Properties!.Environment.Variables.SLUICE_STATE_MACHINE_ARN).toEqual({ Ref: logicalId(stack, machine) });
    expect(fn(job.stages[0].operator).Properties!.Environment.Variables.SLUICE_BUCKET).toEqual({ Ref: logicalId(stack, job.bucket) });
    const ingest = job.ingestion.function;
    expect(fn(ingest).Properties!.Environment.Variables.SLUICE_STATE_MACHINE_ARN).toEqual({ Ref: logicalId(stack, machine) });
    const wake = roleStatements(resources, logicalId(stack, ingest.role));
    expect(wake.find((s) => actions(s).includes('states:StartExecution'))!.Resource).toEqual({ Ref: logicalId(stack, machine) });
    const byKey = (k: string) => wake.find((s) => s.Condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys']?.toString() === k)!.Action;
    expect(byKey('nexmark-q5#a')).toBe('dynamodb:UpdateItem');
    expect(byKey('nexmark-q5#c')).toBe('dynamodb:GetItem');
  });

  it('without the state machine, stages neither snapshot nor ack and the ingest function wakes nothing', () => {
    const plain = jobStack({});
    const stage = roleStatements(plain.resources, logicalId(plain.stack, plain.job.stages[0].operator.role));
    expect(stage.flatMap((s) => (s.Condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys'] as string[] | undefined) ?? [])).not.toContain('nexmark-q5#a');
    expect(JSON.stringify(stage)).not.toContain('snapshots');
    const vars = (f: { fn: unknown }) => plain.resources[logicalId(plain.stack, f.fn)].Properties!.Environment.Variables;
    expect(vars(plain.job.stages[0].operator).SLUICE_CHECKPOINTS).toBeUndefined();
    expect(vars(plain.job.ingestion.function).SLUICE_STATE_MACHINE_ARN).toBeUndefined();
    expect(roleStatements(plain.resources, logicalId(plain.stack, plain.job.ingestion.function.role)).flatMap(actions)).not.toContain('states:StartExecution');
  });

  it('passes cdk-nag with reasoned suppressions only', () => {
    expect(nagFindings(stack).errors).toEqual([]);
  });
});
