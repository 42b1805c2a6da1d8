/**
 * How every Sluice Lambda function is built: esbuild on this machine (no Docker),
 * nodejs22.x on arm64, ESM with source maps, its own log group, and its own role that
 * holds only what the construct grants: no AWS managed policy, not even
 * AWSLambdaBasicExecutionRole (it allows writing to every log group of the account);
 * its equivalent here is scoped to the function's own group.
 *
 * Every entry (functions/*) imports the job as the bare module `sluice-job-module`,
 * which esbuild aliases to the user's job module: the bundle holds that job and no other.
 */
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { type BundlingOptions, NodejsFunction, OutputFormat } from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import { sdkTimeoutEnvironment } from './handler-environment.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
/** `.ts` when running from the sources, `.js` from the built package. */
const EXT = extname(fileURLToPath(import.meta.url));

/** The handler entries shipped with Sluice (functions/, infra/functions/). */
export const ENTRIES = {
  operator: join(HERE, `../functions/operator${EXT}`),
  ingest: join(HERE, `../functions/ingest${EXT}`),
  checkpoint: join(HERE, `../functions/checkpoint${EXT}`),
  apiKeyAuthorizer: join(HERE, `functions/api-key-authorizer${EXT}`),
} as const;

/** The bare specifier the entries import the job by (functions/job.ts). */
export const JOB_MODULE_SPECIFIER = 'sluice-job-module';

/** What a function bundles besides its entry: the user's job, from the user's project. */
export interface JobBundle {
  /** Absolute path of the job module. */
  readonly jobModule: string;
  /** esbuild resolves imports (node_modules) from here. */
  readonly projectRoot: string;
  /** The project's lock file (NodejsFunction hashes it into the asset). */
  readonly depsLockFilePath: string;
}

/**
 * ESM output has no `require`, but bundled CommonJS dependencies call it for Node
 * built-ins. The alias keeps the banner from clashing with a bundled `createRequire`.
 */
export const REQUIRE_BANNER = "import { createRequire as __sluiceCreateRequire } from 'node:module'; const require = __sluiceCreateRequire(import.meta.url);";

export function bundlingOptions(bundle: JobBundle): BundlingOptions {
  return {
    forceDockerBundling: false,
    format: OutputFormat.ESM,
    target: 'node22',
    // ESM builds of the dependencies first, so esbuild can drop what is unused.
    mainFields: ['module', 'main'],
    banner: REQUIRE_BANNER,
    minify: true,
    sourceMap: true,
    // Stack traces need file:line only; the sources would triple the asset.
    sourcesContent: false,
    // Bundle the AWS SDK too: the versions the tests ran, not whichever the runtime ships.
    externalModules: [],
    esbuildArgs: { [`--alias:${JOB_MODULE_SPECIFIER}`]: bundle.jobModule },
  };
}

export interface SluiceFunctionOptions {
  readonly entry: string;
  readonly description: string;
  readonly timeout: Duration;
  readonly memorySize: number;
  readonly environment: Readonly<Record<string, string>>;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: RemovalPolicy;
  /** The job and the project it is bundled from. */
  readonly bundle: JobBundle;
}

export interface SluiceFunction {
  readonly fn: NodejsFunction;
  readonly role: iam.Role;
  readonly logGroup: logs.LogGroup;
}

export function sluiceFunction(scope: Construct, id: string, o: SluiceFunctionOptions): SluiceFunction {
  const logGroup = new logs.LogGroup(scope, `${id}Logs`, { retention: o.logRetention, removalPolicy: o.removalPolicy });
  const role = new iam.Role(scope, `${id}Role`, { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'), description: o.description });
  logGroup.grantWrite(role);
  const fn = new NodejsFunction(scope, id, {
    entry: o.entry,
    handler: 'handler',
    runtime: lambda.Runtime.NODEJS_22_X,
    architecture: lambda.Architecture.ARM_64,
    description: o.description,
    timeout: o.timeout,
    memorySize: o.memorySize,
    // Every function's AWS clients time out within its own timeout (lib/aws/clients.ts).
    environment: { ...sdkTimeoutEnvironment(o.timeout), ...o.environment },
    role,
    logGroup,
    projectRoot: o.bundle.projectRoot,
    depsLockFilePath: o.bundle.depsLockFilePath,
    bundling: bundlingOptions(o.bundle),
  });
  return { fn, role, logGroup };
}
