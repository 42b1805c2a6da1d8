/**
 * Sluice's CDK constructs (`sluice/cdk`): `SluiceJob` deploys one job (its queues,
 * functions, state table, snapshot bucket, ingestion endpoint, dashboard and alarms),
 * `checkpointStateMachine` adds the checkpoint coordinator, `SluiceJobStack` wraps a
 * job in a stack with the outputs a user needs, and `createJobApp` builds the app
 * `sluice synth|deploy` runs.
 */
export { SluiceJob, type SluiceJobProps } from './sluice-job.ts';
export type { LogLevel } from './handler-environment.ts';
export type { PhysicalPlan, StagePlan, StageEdge, EdgeSource } from '../lib/graph/compile.ts';
export type { EndpointAuth, IngestionBackPressureOptions, IngestionEndpointOptions, SluiceJobAlarmOptions, SluiceJobRetention } from './props.ts';
export { SluiceJobStack, type SluiceJobStackProps, stackNameFor } from './stack.ts';
export { checkpointStateMachine, type CheckpointTimingProps } from './checkpoint-state-machine.ts';
export type { CheckpointContext, CheckpointFunctionOptions, CheckpointStateMachineFactory } from './checkpoints.ts';
export { createJobApp, type JobAppOptions } from './job-app.ts';
export type { StageResources } from './stages.ts';
export type { Ingestion } from './ingestion.ts';
export type { SluiceFunction } from './function.ts';
export { SluiceJobPropsError } from './errors.ts';
