/**
 * Changing the parallelism a deployed job runs at (`sluice rescale --target aws`), while
 * its consumers and coordinator are stopped (job-control.ts) and after its state was
 * restored at the new parallelism:
 *
 *   1. every function that builds the job's plan (the stage queues' consumers, and the
 *      ingest and checkpoint functions their SLUICE_JOB_FUNCTIONS names) gets SLUICE_PARALLELISM and the new plan's
 *      SLUICE_PLAN_FINGERPRINT, its other variables kept; each update waited for, so the
 *      containers that start afterwards build the new plan (producers route, consumers own
 *      key groups and the coordinator counts participants by it);
 *   2. the rescaled stage's event source mapping gets its new maximum concurrency.
 *
 * Idempotent: a rescale that died part way sets the same values again.
 */
import type { LambdaClient } from '@aws-sdk/client-lambda';
import type { ParallelismOverride } from '../../api/logical.ts';
import { ConfigError } from '../../errors.ts';
import { encodeParallelism, PARALLELISM_ENV } from '../parallelism-env.ts';

const FINGERPRINT_ENV = 'SLUICE_PLAN_FINGERPRINT';
/** On stage functions: the other functions of the job that build its plan (ingest, checkpoint tasks), comma-separated. */
export const JOB_FUNCTIONS_ENV = 'SLUICE_JOB_FUNCTIONS';

/** The Lambda calls of a rescale. */
export interface FunctionConfigPort {
  /** The functions the event source mappings of a queue invoke (ListEventSourceMappings). */
  consumersOf(queueArn: string): Promise<string[]>;
  environment(fn: string): Promise<Readonly<Record<string, string>>>;
  /** Replace a function's environment and wait until the update is done. */
  setEnvironment(fn: string, environment: Readonly<Record<string, string>>): Promise<void>;
  /** The maximum concurrency of every event source mapping reading `queueArn`. */
  setMaxConcurrency(queueArn: string, max: number): Promise<void>;
}

export interface DeployedParallelism {
  /** Every stage queue's ARN: its consumers are the stage functions. */
  readonly stageQueues: readonly string[];
  readonly parallelism: ParallelismOverride | undefined;
  readonly fingerprint: string;
  /** The rescaled stage's queue and its new maximum concurrency. */
  readonly stage?: { readonly queueArn: string; readonly maxConcurrency: number };
}

/** The environment a function gets for `d` (its own otherwise). */
export function environmentFor(env: Readonly<Record<string, string>>, d: Pick<DeployedParallelism, 'parallelism' | 'fingerprint'>): Record<string, string> {
  const { [PARALLELISM_ENV]: _old, ...rest } = env;
  const value = encodeParallelism(d.parallelism);
  return { ...rest, [FINGERPRINT_ENV]: d.fingerprint, ...(value ? { [PARALLELISM_ENV]: value } : {}) };
}

/** The functions that build the job's plan: each stage queue's consumers and the ones their SLUICE_JOB_FUNCTIONS names. */
export async function jobFunctions(port: FunctionConfigPort, stageQueues: readonly string[]): Promise<string[]> {
  const stages: string[] = [];
  for (const q of stageQueues) {
    const fns = await port.consumersOf(q);
    if (!fns.length) throw new ConfigError('<job>', `a deployed job: a Lambda function reading ${q}`, 'no event source mapping on the queue');
    stages.push(...fns);
  }
  const others = (await port.environment(stages[0]))[JOB_FUNCTIONS_ENV]?.split(',').filter(Boolean) ?? [];
  return [...new Set([...stages, ...others])];
}

/** Apply `d` to the job's functions and the stage's mapping; returns the functions changed. */
export async function setDeployedParallelism(port: FunctionConfigPort, d: DeployedParallelism, log: (line: string) => void): Promise<string[]> {
  const changed: string[] = [];
  for (const fn of await jobFunctions(port, d.stageQueues)) {
    const env = await port.environment(fn);
    const next = environmentFor(env, d);
    if (env[FINGERPRINT_ENV] === next[FINGERPRINT_ENV] && env[PARALLELISM_ENV] === next[PARALLELISM_ENV]) continue;
    await port.setEnvironment(fn, next);
    changed.push(fn);
    log(`function ${fn}: ${PARALLELISM_ENV}=${next[PARALLELISM_ENV] ?? "(the job's own)"}, plan ${d.fingerprint}`);
  }
  if (d.stage) {
    await port.setMaxConcurrency(d.stage.queueArn, d.stage.maxConcurrency);
    log(`event source of ${d.stage.queueArn}: maximum concurrency ${d.stage.maxConcurrency}`);
  }
  return changed;
}

export class AwsFunctionConfigPort implements FunctionConfigPort {
  constructor(private readonly lambda: LambdaClient) {}

  async consumersOf(queueArn: string): Promise<string[]> {
    const { ListEventSourceMappingsCommand } = await import('@aws-sdk/client-lambda');
    const out: string[] = [];
    let marker: string | undefined;
    do {
      const r = await this.lambda.send(new ListEventSourceMappingsCommand({ EventSourceArn: queueArn, Marker: marker }));
      for (const m of r.EventSourceMappings ?? []) if (m.FunctionArn) out.push(m.FunctionArn);
      marker = r.NextMarker;
    } while (marker);
    return out;
  }

  async environment(fn: string): Promise<Readonly<Record<string, string>>> {
    const { GetFunctionConfigurationCommand } = await import('@aws-sdk/client-lambda');
    return (await this.lambda.send(new GetFunctionConfigurationCommand({ FunctionName: fn }))).Environment?.Variables ?? {};
  }

  async setEnvironment(fn: string, environment: Readonly<Record<string, string>>): Promise<void> {
    // waitUntilFunctionUpdated polls GetFunctionConfiguration (what grantOperate allows).
    const { UpdateFunctionConfigurationCommand, waitUntilFunctionUpdated } = await import('@aws-sdk/client-lambda');
    await this.lambda.send(new UpdateFunctionConfigurationCommand({ FunctionName: fn, Environment: { Variables: { ...environment } } }));
    await waitUntilFunctionUpdated({ client: this.lambda, maxWaitTime: 300, minDelay: 1 }, { FunctionName: fn });
  }

  async setMaxConcurrency(queueArn: string, max: number): Promise<void> {
    const { ListEventSourceMappingsCommand, UpdateEventSourceMappingCommand } = await import('@aws-sdk/client-lambda');
    const mappings = (await this.lambda.send(new ListEventSourceMappingsCommand({ EventSourceArn: queueArn }))).EventSourceMappings ?? [];
    for (const m of mappings) await this.lambda.send(new UpdateEventSourceMappingCommand({ UUID: m.UUID!, ScalingConfig: { MaximumConcurrency: max } }));
  }
}
