/**
 * A CDK app of one job: the repository's own app (infra/app.ts) and `sluice synth|deploy`
 * both build their stack here. Context switches (`-c key=value`, or `context`):
 *   sluice:endpoint       httpApi (default) | functionUrl
 *   sluice:removalPolicy  retain (default) | destroy
 *   sluice:queuePrefix    default: SluiceJob's (see its `queuePrefix` prop)
 *   sluice:nag            true (default) | false: cdk-nag's AwsSolutions pack at synth
 */
import { App, Aspects, RemovalPolicy } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { JobParams } from '../lib/api/job-module.ts';
import type { ParallelismOverride } from '../lib/api/logical.ts';
import type { Job } from '../lib/api/stream.ts';
import type { CheckpointStateMachineFactory } from './checkpoints.ts';
import { SluiceJobPropsError } from './errors.ts';
import { SluiceJobStack, stackNameFor } from './stack.ts';

export interface JobAppOptions {
  readonly job: Job;
  /** The module that exports `job` (SluiceJob's `jobModule`). */
  readonly jobModule: string;
  readonly jobParams?: JobParams;
  /** SluiceJob's `parallelism`. @default - the job's own */
  readonly parallelism?: ParallelismOverride;
  /** @default stackNameFor(job.name), `Sluice-<job>` */
  readonly stackName?: string;
  /** Context values, as `-c key=value` gives them. @default {} */
  readonly context?: Record<string, unknown>;
  /** @default - no checkpoint state machine */
  readonly checkpoints?: CheckpointStateMachineFactory;
  /** Where the cloud assembly goes. @default - CDK's (CDK_OUTDIR from the CLI, else a temporary directory) */
  readonly outdir?: string;
  /**
   * aws-cdk-lib's built-in CloudFormation schema validation at synth; about 12 s of CPU,
   * so in-process tests turn it off.
   * @default true
   */
  readonly validate?: boolean;
}

function choice<T extends string>(app: App, key: string, allowed: readonly T[], fallback: T): T {
  const v = app.node.tryGetContext(key) as unknown;
  if (v === undefined) return fallback;
  if (!allowed.includes(String(v) as T)) throw new SluiceJobPropsError(`context ${key}`, allowed.join(' or '), JSON.stringify(v));
  return String(v) as T;
}

export function createJobApp(options: JobAppOptions): { app: App; stack: SluiceJobStack } {
  const { job } = options;
  const app = new App({ context: { ...options.context }, outdir: options.outdir, builtinCloudFormationValidation: options.validate ?? true });
  const endpoint = choice(app, 'sluice:endpoint', ['httpApi', 'functionUrl'], 'httpApi');
  const removal = choice(app, 'sluice:removalPolicy', ['retain', 'destroy'], 'retain');
  const stack = new SluiceJobStack(app, options.stackName ?? stackNameFor(job.name), {
    description: `Sluice stream processing job ${job.name}`,
    sluice: {
      job,
      jobModule: options.jobModule,
      jobParams: options.jobParams,
      parallelism: options.parallelism,
      queuePrefix: app.node.tryGetContext('sluice:queuePrefix') as string | undefined,
      ingestion: { kind: endpoint },
      removalPolicy: removal === 'destroy' ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN,
      checkpoints: options.checkpoints,
    },
  });
  if (String(app.node.tryGetContext('sluice:nag') ?? 'true') !== 'false') Aspects.of(app).add(new AwsSolutionsChecks({ verbose: true }));
  return { app, stack };
}
