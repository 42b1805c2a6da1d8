/**
 * Stacks for template tests, synthesised in process without the two expensive steps
 * (esbuild bundling, ~3 s per handler, and aws-cdk-lib's CloudFormation schema
 * validation, ~12 s): test/infra/synth-cli.test.ts runs both, once, through `cdk synth`.
 */
import { App, Aspects, Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import type { SynthesisMessage } from 'aws-cdk-lib/cx-api';
import { AwsSolutionsChecks } from 'cdk-nag';
import { createApp, EXAMPLE_JOB_MODULE } from '../../../infra/app.ts';
import type { CheckpointStateMachineFactory } from '../../../infra/checkpoints.ts';
import { SluiceJob, type SluiceJobProps } from '../../../infra/sluice-job.ts';
import { job as exampleJob } from '../../../examples/nexmark/q5.ts';

/** Skip bundling in every stack (the CLI's `--exclusively` mechanism). */
export const NO_BUNDLING = { 'aws:cdk:bundling-stacks': [] as string[] };

/** The app of infra/app.ts (the example job), nag included. */
export function exampleApp(context: Record<string, unknown> = {}, checkpoints?: CheckpointStateMachineFactory) {
  const { app, stack } = createApp({ context: { ...NO_BUNDLING, ...context }, checkpoints, validate: false });
  const template = Template.fromStack(stack);
  return { app, stack, job: stack.sluice, template, resources: template.toJSON().Resources as Record<string, CfnResource> };
}

/** A stack holding one SluiceJob with the given props (default: the example job). */
export function jobStack(props: Partial<SluiceJobProps> | ((stack: Stack) => Partial<SluiceJobProps>) = {}, options: { nag?: boolean; configure?: (stack: Stack, job: SluiceJob) => void } = {}) {
  const app = new App({ context: { ...NO_BUNDLING }, builtinCloudFormationValidation: false });
  const stack = new Stack(app, 'Test');
  const job = new SluiceJob(stack, 'Job', { job: exampleJob, jobModule: EXAMPLE_JOB_MODULE, ...(typeof props === 'function' ? props(stack) : props) });
  options.configure?.(stack, job);
  if (options.nag) Aspects.of(app).add(new AwsSolutionsChecks());
  const template = Template.fromStack(stack);
  return { app, stack, job, template, resources: template.toJSON().Resources as Record<string, CfnResource> };
}

export interface CfnResource {
  readonly Type: string;
  readonly Properties?: Record<string, any>;
}

export interface Statement {
  readonly Effect: 'Allow' | 'Deny';
  readonly Action: string | string[];
  readonly Resource?: unknown;
  readonly Condition?: Record<string, Record<string, unknown>>;
  readonly Principal?: unknown;
}

export function actions(s: Statement): string[] {
  return Array.isArray(s.Action) ? s.Action : [s.Action];
}

/** Every policy statement in the template: identity policies, role inline policies, resource policies. */
export function allStatements(resources: Record<string, CfnResource>): { resource: string; type: string; statement: Statement }[] {
  const out: { resource: string; type: string; statement: Statement }[] = [];
  const add = (resource: string, type: string, doc: { Statement?: Statement[] } | undefined) => {
    for (const statement of doc?.Statement ?? []) out.push({ resource, type, statement });
  };
  for (const [id, r] of Object.entries(resources)) {
    const p = r.Properties ?? {};
    add(id, r.Type, p.PolicyDocument);
    add(id, r.Type, p.AssumeRolePolicyDocument);
    for (const inline of p.Policies ?? []) add(id, r.Type, inline.PolicyDocument);
  }
  return out;
}

/** Statements of the policies attached to the role whose logical id starts with `rolePrefix`. */
export function roleStatements(resources: Record<string, CfnResource>, roleId: string): Statement[] {
  return Object.values(resources)
    .filter((r) => r.Type === 'AWS::IAM::Policy' && (r.Properties?.Roles ?? []).some((x: { Ref?: string }) => x.Ref === roleId))
    .flatMap((r) => r.Properties!.PolicyDocument.Statement as Statement[]);
}

export function logicalId(stack: Stack, construct: { node: { defaultChild?: unknown } } | unknown): string {
  const child = (construct as { node: { defaultChild?: unknown } }).node.defaultChild ?? construct;
  return stack.getLogicalId(child as never);
}

/** Unsuppressed cdk-nag errors and warnings (AwsSolutions-*). */
export function nagFindings(stack: Stack): { errors: string[]; warnings: string[] } {
  const a = Annotations.fromStack(stack);
  const fmt = (m: SynthesisMessage) => `${m.id}: ${String(m.entry.data).split('\n')[0]}`;
  return {
    errors: a.findError('*', Match.stringLikeRegexp('AwsSolutions-.*')).map(fmt),
    warnings: a.findWarning('*', Match.stringLikeRegexp('AwsSolutions-.*')).map(fmt),
  };
}
