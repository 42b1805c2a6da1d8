/**
 * The job this deployment runs, and where its resources are. The entries import the
 * job as `sluice-job-module`, which the bundler aliases to the job module SluiceJob was
 * given (infra/function.ts), so a bundle holds that job and no other. The values a
 * handler cannot derive from the job come from the variables SluiceJob sets (the one
 * list: infra/handler-environment.ts); this is the one place that reads them.
 */
import * as jobModule from 'sluice-job-module';
import { jobFromModule, type JobParams } from '../lib/api/job-module.ts';
import { stateTableName } from '../lib/aws/naming.ts';
import { atParallelism, decodeParallelism, PARALLELISM_ENV } from '../lib/aws/parallelism-env.ts';
import { planFingerprint } from '../lib/checkpoint/fingerprint.ts';
import { ConfigError } from '../lib/errors.ts';
import { compile } from '../lib/graph/compile.ts';

const env = process.env;

function params(): JobParams {
  const raw = env.SLUICE_JOB_PARAMS;
  if (!raw) return {};
  try {
    return JSON.parse(raw) as JobParams;
  } catch {
    throw new ConfigError('SLUICE_JOB_PARAMS', 'a JSON object of job parameters', JSON.stringify(raw));
  }
}

// At the deployment's parallelism (SluiceJob's `parallelism`, or what `sluice rescale` set since).
export const job = atParallelism(await jobFromModule(jobModule as Record<string, unknown>, params(), 'the bundled job module'), decodeParallelism(env[PARALLELISM_ENV]));

// A bundle of another job (or of this job's older code) must not touch this deployment's queues and state.
const expected = env.SLUICE_PLAN_FINGERPRINT;
if (expected) {
  const actual = planFingerprint(compile(job.graph));
  if (actual !== expected) {
    throw new ConfigError(
      'the bundled job',
      `the plan this function was deployed for (fingerprint ${expected}; SluiceJob's \`jobModule\` must be the module that exports its \`job\`)`,
      `job "${job.name}" with plan fingerprint ${actual}`,
    );
  }
}

const queuePrefix = env.SLUICE_QUEUE_PREFIX || undefined;

export const deployment: {
  /** Bucket for envelopes too large for one SQS message (claim check); none: they fail with EnvelopeTooLargeError. */
  readonly bucket?: string;
  /** Prefix of the stage queue names (naming.ts). */
  readonly queuePrefix?: string;
  /** The state table (naming.ts: from the job name and the prefix, unless SluiceJob set it). */
  readonly table: string;
  /** The checkpoint state machine is deployed: operators snapshot and acknowledge barriers. */
  readonly checkpoints: boolean;
  /** The checkpoint state machine the ingest function wakes up when input arrives. */
  readonly stateMachineArn?: string;
  /** The ingest function's back-pressure bounds (SluiceJob's ingestion.backPressure). */
  readonly ingestMaxQueuedMessages?: number;
  readonly ingestMaxQueueAgeMs?: number;
} = {
  bucket: env.SLUICE_BUCKET || undefined,
  queuePrefix,
  table: env.SLUICE_TABLE || stateTableName(job.name, queuePrefix),
  checkpoints: env.SLUICE_CHECKPOINTS === '1',
  stateMachineArn: env.SLUICE_STATE_MACHINE_ARN || undefined,
  ingestMaxQueuedMessages: positive('SLUICE_INGEST_MAX_QUEUED_MESSAGES'),
  ingestMaxQueueAgeMs: seconds('SLUICE_INGEST_MAX_QUEUE_AGE_S'),
};

function positive(name: string): number | undefined {
  const raw = env[name];
  if (!raw) return undefined;
  const n = Number(raw);
  if (!(Number.isFinite(n) && n > 0)) throw new ConfigError(name, 'a positive number', JSON.stringify(raw));
  return n;
}

function seconds(name: string): number | undefined {
  const s = positive(name);
  return s === undefined ? undefined : s * 1000;
}
