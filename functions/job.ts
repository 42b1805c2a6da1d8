/**
 * The job this deployment runs, and where its resources are. The Lambda bundles import
 * this module (no environment variable names the job): the deploy step writes it, or
 * edit it by hand. Queue and table names follow lib/aws/naming.ts. The two
 * deployment-specific values come from the variables SluiceJob sets (the one list:
 * infra/handler-environment.ts); this is the one place that reads them.
 */
export { job } from '../examples/nexmark/q5.ts';

export const deployment: {
  /** Bucket for envelopes too large for one SQS message (claim check); none: they fail with EnvelopeTooLargeError. */
  readonly bucket?: string;
  /** Prefix of the stage queue names (naming.ts). */
  readonly queuePrefix?: string;
  /** The checkpoint state machine is deployed: operators snapshot and acknowledge barriers. */
  readonly checkpoints: boolean;
  /** The checkpoint state machine the ingest function wakes up when input arrives. */
  readonly stateMachineArn?: string;
} = {
  bucket: process.env.SLUICE_BUCKET || undefined,
  queuePrefix: process.env.SLUICE_QUEUE_PREFIX || undefined,
  checkpoints: process.env.SLUICE_CHECKPOINTS === '1',
  stateMachineArn: process.env.SLUICE_STATE_MACHINE_ARN || undefined,
};
