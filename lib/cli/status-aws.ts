/**
 * `sluice status <job> --target local-aws|aws`: what a job on the AWS path is doing, read
 * from where the deployment keeps it: each stage queue's depth (visible and in flight) and
 * its dead-letter queue's, the last completed checkpoint, a pending savepoint request, and
 * whether a coordinator execution holds the lease. The numbers are SQS's approximate
 * counts (GetQueueAttributes), the same ones the deployment's dashboard graphs. Then
 * the scaling advice (status-aws-scaling.ts): on aws from the stages' CloudWatch
 * metrics, on local-aws from the loads the run keeps in its checkpoint directory.
 */
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { LEASE_NAME, type Lease } from '../aws/checkpoint/checkpoint-task.ts';
import { listAwsCheckpoints } from '../aws/restore/savepoints.ts';
import { NamedQueues } from '../aws/sqs/sqs-queues.ts';
import { type AwsTarget, type AwsTargetFlags, type Resolved, withTarget } from './checkpoints-aws.ts';
import { fmt } from './options.ts';
import { applyScalingSteps, type AwsScaling, printAwsScaling, readAwsScaling, readLocalAwsScaling, type ScalingStep, scalingSteps } from './status-aws-scaling.ts';
import { ConfigError } from '../errors.ts';

type Log = (line: string) => void;

/** What `sluice status --target local-aws|aws --json` prints. */
export interface AwsStatus {
  target: AwsTarget;
  job: string;
  /** Where the job's resources are, for people. */
  where: string;
  stages: {
    stage: number;
    name: string;
    partitions: number;
    /** Messages waiting in the stage queue (ApproximateNumberOfMessages). */
    queuedMessages: number;
    /** Messages received and not yet deleted (ApproximateNumberOfMessagesNotVisible). */
    inFlightMessages: number;
    /** Messages in the stage's dead-letter queue. */
    deadLetterMessages: number;
  }[];
  /** The sum of the stages' dead-letter queues. */
  deadLetterMessages: number;
  /** The last completed checkpoint; null before the first. */
  lastCheckpoint: { epoch: number; completedAt: number; bytes: number } | null;
  /** Completed checkpoints still restorable. */
  retainedCheckpoints: number;
  savepoints: string[];
  /** A savepoint requested and not yet taken. */
  pendingSavepoint: string | null;
  /** The coordinator execution holding the lease, while it holds it. */
  coordinator: { owner: string; until: number } | null;
  /** Each stage's true rate and the partitions (and on aws the maximum concurrency) advised: on aws over the metrics span, on local-aws over the run (what it recorded in its checkpoint directory); null without loads. */
  scaling: AwsScaling | null;
  /** With --apply: the changes made. */
  applied?: ScalingStep[];
}

export interface AwsStatusFlags extends AwsTargetFlags {
  /** Source records per second to advise for (default: what arrived over the span, or the local-AWS run). */
  readonly targetRate?: string;
  /** aws: minutes of metrics the rates are measured over (default 15). */
  readonly window?: string;
  /** aws: carry out the advice (status-aws-scaling.ts scalingSteps). */
  readonly apply?: boolean;
}

const DEFAULT_WINDOW_MIN = 15;

export async function awsStatusCommand(jobPath: string, flags: AwsStatusFlags, log: Log, now: () => number = Date.now): Promise<AwsStatus> {
  const targetRate = flags.targetRate === undefined ? undefined : Number(flags.targetRate);
  if (targetRate !== undefined && !(Number.isFinite(targetRate) && targetRate > 0)) throw new ConfigError('--target-rate', 'a positive number of source records per second', JSON.stringify(flags.targetRate));
  const windowMin = Number(flags.window ?? DEFAULT_WINDOW_MIN);
  if (!(Number.isSafeInteger(windowMin) && windowMin >= 1 && windowMin <= 1440)) throw new ConfigError('--window', 'whole minutes from 1 to 1440', JSON.stringify(flags.window));
  if (flags.target !== 'aws' && (flags.window !== undefined || flags.apply)) {
    throw new ConfigError(
      flags.window !== undefined ? '--window' : '--apply',
      flags.window !== undefined ? 'with --target aws (a local-AWS run measures its whole run)' : 'with --target aws (stop the local-AWS run and run the sluice rescale the advice prints)',
      `--target ${flags.target}`,
    );
  }
  const status = await withTarget(jobPath, flags, async (r) => {
    const at = now();
    const s = await readAwsStatus(r, flags.target, at);
    s.scaling = flags.target === 'aws' ? await readAwsScaling(r, windowMin * 60_000, at, targetRate) : readLocalAwsScaling(r, targetRate);
    printAwsStatus(s, log);
    if (s.scaling) printAwsScaling(s.scaling, jobPath, log, flags.target === 'aws' ? { target: 'aws' } : { target: 'local-aws', checkpointDir: r.local!.dir, running: r.running?.() !== undefined });
    else if (flags.target === 'local-aws') log('  scaling: no loads recorded at these partitions yet (a run with --checkpoint-dir records them as it runs)');
    return s;
  });
  if (flags.apply && status.scaling) {
    const steps = scalingSteps(status.scaling);
    if (!steps.length) log('  --apply: nothing to change');
    status.applied = await applyScalingSteps(jobPath, flags, steps, log);
  }
  return status;
}

async function readAwsStatus(r: Resolved, target: AwsTarget, at: number): Promise<AwsStatus> {
  const job = r.plan.job.name;
  const queues = new NamedQueues(r.clients.sqs, job, r.queuePrefix);
  const depth = async (url: Promise<string>) => {
    const out = await r.clients.sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: await url, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }),
    );
    return { visible: Number(out.Attributes?.ApproximateNumberOfMessages ?? 0), inFlight: Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0) };
  };
  const stages = await Promise.all(
    r.plan.stages.map(async (s) => {
      const [q, dlq] = await Promise.all([depth(queues.queueUrl(s.id)), depth(queues.deadLetterQueueUrl(s.id))]);
      return { stage: s.id, name: s.name, partitions: s.parallelism, queuedMessages: q.visible, inFlightMessages: q.inFlight, deadLetterMessages: dlq.visible + dlq.inFlight };
    }),
  );
  const listing = await listAwsCheckpoints({ pointers: r.pointers, blobs: r.blobs, job });
  const latest = listing.checkpoints.find((c) => c.latest);
  const lease = (await r.pointers.read<Lease>(LEASE_NAME))?.value;
  return {
    target,
    job,
    where: r.where,
    stages,
    deadLetterMessages: stages.reduce((n, s) => n + s.deadLetterMessages, 0),
    lastCheckpoint: latest ? { epoch: latest.epoch, completedAt: latest.completedAt, bytes: latest.bytes } : null,
    retainedCheckpoints: listing.checkpoints.length,
    savepoints: listing.savepoints.map((s) => s.label),
    pendingSavepoint: listing.pending?.label ?? null,
    // A local-AWS run's lease outlives the run by its term: no process, no coordinator.
    coordinator: lease?.owner && lease.until > at && (r.running === undefined || r.running() !== undefined) ? { owner: lease.owner, until: lease.until } : null,
    scaling: null,
  };
}

function printAwsStatus(s: AwsStatus, log: Log): void {
  log(`job "${s.job}" in ${s.where}:`);
  for (const st of s.stages) {
    log(`  stage ${st.stage} ${st.name} (${st.partitions} partitions): ${fmt.int(st.queuedMessages)} queued, ${fmt.int(st.inFlightMessages)} in flight, ${fmt.int(st.deadLetterMessages)} dead letters`);
  }
  const ck = s.lastCheckpoint;
  log(`  last checkpoint: ${ck ? `epoch ${ck.epoch} at ${new Date(ck.completedAt).toISOString()} (${fmt.int(ck.bytes)} bytes; ${s.retainedCheckpoints} retained)` : 'none yet'}`);
  if (s.savepoints.length) log(`  savepoints: ${s.savepoints.join(', ')}`);
  if (s.pendingSavepoint) log(`  savepoint requested: "${s.pendingSavepoint}" (taken at the next epoch)`);
  log(`  coordinator: ${s.coordinator ? `execution ${s.coordinator.owner} holds the lease` : 'idle (no execution holds the lease)'}`);
  if (s.deadLetterMessages > 0) log(`  ${fmt.int(s.deadLetterMessages)} messages in dead-letter queues: inspect them in the SQS console or with aws sqs receive-message`);
}
