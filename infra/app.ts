/**
 * The CDK app (`npx cdk synth|deploy|destroy`, see cdk.json): deploys the job of
 * functions/job.ts, the module the Lambda bundles import.
 *
 * Context (`-c key=value`), all optional:
 *   sluice:endpoint       httpApi (default) | functionUrl (LocalStack's free tier has no HTTP API v2)
 *   sluice:removalPolicy  retain (default) | destroy (throwaway deployments: tests, LocalStack)
 *   sluice:queuePrefix    default: functions/job.ts `deployment.queuePrefix`, else ''
 *   sluice:nag            true (default) | false: run cdk-nag's AwsSolutions pack at synth
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { App, Aspects, RemovalPolicy } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { deployment, job } from '../functions/job.ts';
import { type CheckpointStateMachineFactory, loadCheckpointStateMachine } from './checkpoints.ts';
import { SluiceJobPropsError } from './errors.ts';
import { REPO_ROOT } from './function.ts';
import { SluiceJobStack, stackNameFor } from './stack.ts';

function choice<T extends string>(app: App, key: string, allowed: readonly T[], fallback: T): T {
  const v = app.node.tryGetContext(key) as unknown;
  if (v === undefined) return fallback;
  if (!allowed.includes(String(v) as T)) throw new SluiceJobPropsError(`context ${key}`, allowed.join(' or '), JSON.stringify(v));
  return String(v) as T;
}

export interface CreateAppOptions {
  /** Merged over cdk.json's context. @default {} */
  readonly context?: Record<string, unknown>;
  /** @default - none (app.ts's main passes loadCheckpointStateMachine()) */
  readonly checkpoints?: CheckpointStateMachineFactory;
  /**
   * aws-cdk-lib's built-in CloudFormation schema validation at synth; about 12 s of CPU,
   * so in-process tests turn it off and the `cdk synth` test keeps it.
   * @default true
   */
  readonly validate?: boolean;
}

/** The app with its one stack. */
export function createApp(options: CreateAppOptions = {}): { app: App; stack: SluiceJobStack } {
  const { checkpoints } = options;
  const cdkJson = JSON.parse(readFileSync(join(REPO_ROOT, 'cdk.json'), 'utf8')) as { context?: Record<string, unknown> };
  const app = new App({ context: { ...cdkJson.context, ...options.context }, builtinCloudFormationValidation: options.validate ?? true });
  const endpoint = choice(app, 'sluice:endpoint', ['httpApi', 'functionUrl'], 'httpApi');
  const removal = choice(app, 'sluice:removalPolicy', ['retain', 'destroy'], 'retain');
  const stack = new SluiceJobStack(app, stackNameFor(job.name), {
    description: `Sluice stream processing job ${job.name}`,
    sluice: {
      job,
      queuePrefix: (app.node.tryGetContext('sluice:queuePrefix') as string | undefined) ?? deployment.queuePrefix,
      ingestion: { kind: endpoint },
      removalPolicy: removal === 'destroy' ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN,
      checkpoints,
    },
  });
  if (String(app.node.tryGetContext('sluice:nag') ?? 'true') !== 'false') Aspects.of(app).add(new AwsSolutionsChecks({ verbose: true }));
  return { app, stack };
}

const main = process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href;
if (main) createApp({ checkpoints: await loadCheckpointStateMachine() }).app.synth();
