/**
 * The repository's own CDK app (`npx cdk synth|deploy|destroy`, see cdk.json): deploys
 * the example job, Nexmark Q5 (examples/nexmark/q5.ts), with checkpoints. A project of
 * one's own uses `sluice synth|deploy <job>` (lib/cli/deploy.ts) or its own CDK app.
 *
 * Context (`-c key=value`), all optional:
 *   sluice:endpoint       httpApi (default) | functionUrl (LocalStack's free tier has no HTTP API v2)
 *   sluice:removalPolicy  retain (default) | destroy (throwaway deployments: tests, LocalStack)
 *   sluice:queuePrefix    default ''
 *   sluice:nag            true (default) | false: run cdk-nag's AwsSolutions pack at synth
 */
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { job } from '../examples/nexmark/q5.ts';
import { type CheckpointStateMachineFactory } from './checkpoints.ts';
import { checkpointStateMachine } from './checkpoint-state-machine.ts';
import { createJobApp, type JobAppOptions } from './job-app.ts';
import type { SluiceJobStack } from './stack.ts';
import type { App } from 'aws-cdk-lib';

/** The module the example's functions bundle. */
export const EXAMPLE_JOB_MODULE = fileURLToPath(new URL('../examples/nexmark/q5.ts', import.meta.url));

export interface CreateAppOptions extends Pick<JobAppOptions, 'context' | 'validate'> {
  /** @default - none (the app's main passes checkpointStateMachine) */
  readonly checkpoints?: CheckpointStateMachineFactory;
}

/** The app with its one stack. */
export function createApp(options: CreateAppOptions = {}): { app: App; stack: SluiceJobStack } {
  return createJobApp({ job, jobModule: EXAMPLE_JOB_MODULE, ...options });
}

const main = process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href;
if (main) createApp({ checkpoints: checkpointStateMachine }).app.synth();
