/**
 * `sluice rescale <job> --stage S --partitions P --target local-aws|aws`: one stage of a
 * job that runs the AWS handlers at another number of partitions, its keyed state and
 * timers moved by key group (pause-and-restart migration at a savepoint, as Flink does):
 *
 *   aws        take a savepoint (the running coordinator takes it at its next epoch, so
 *              the job stops at an epoch boundary), stop the consumers and coordinator,
 *              restore the savepoint in place at the new parallelism (every partition of
 *              the new plan gets its key groups; inter-stage queues purged and channels
 *              continued, the input logged after the savepoint replayed), give every
 *              function of the job the new plan (SLUICE_PARALLELISM) and the stage's event
 *              source its maximum concurrency, start again;
 *   local-aws  the same, between two runs of `sluice run --target local-aws`: the run is
 *              stopped (one process), so its last committed checkpoint is kept as a
 *              savepoint (`rescale-e<epoch>-<plan>`) and restored; the run's identity records
 *              the parallelism, which `--resume` then runs at.
 *
 * Every step is idempotent, and a rescale that died is run again as it was: on local-aws
 * the identity names the savepoint of an unfinished rescale; on AWS the job stays stopped
 * and `--from <label>` (printed first) restores the same savepoint. Source stages keep
 * their partitions: their input is positioned and logged per partition.
 */
import type { ParallelismOverride } from '../api/logical.ts';
import { defaultMaxConcurrency, encodeParallelism, MAX_CONCURRENCY, MIN_CONCURRENCY } from '../aws/parallelism-env.ts';
import { AwsFunctionConfigPort, setDeployedParallelism } from '../aws/restore/deployed-parallelism.ts';
import { savepointFromCheckpoint } from '../aws/restore/savepoints.ts';
import { fromBytes } from '../checkpoint/codec.ts';
import { POINTER_NAME } from '../checkpoint/driver.ts';
import { planFingerprint } from '../checkpoint/fingerprint.ts';
import type { CommitPointer, Manifest } from '../checkpoint/protocol.ts';
import { describePlan } from '../checkpoint/savepoint.ts';
import { ConfigError } from '../errors.ts';
import { compile, type PhysicalPlan, type StagePlan } from '../graph/compile.ts';
import { writeLocalAwsIdentity } from '../testing/local-aws/checkpointing.ts';
import { type AwsTargetFlags, installRestorePoint, type Resolved, takeSavepoint, withTarget } from './checkpoints-aws.ts';
import { describeParallelism } from './local-aws-parallelism.ts';

type Log = (line: string) => void;

export interface RescaleFlags extends AwsTargetFlags {
  readonly stage: string;
  readonly partitions: string;
  /** A savepoint to restore instead of a new one (aws) or the last checkpoint (local-aws). */
  readonly from?: string;
  readonly label?: string;
  readonly timeout?: string;
  readonly maxConcurrency?: string;
  readonly pollMs?: number;
}

/** What `sluice rescale --json` prints. */
export interface RescaleResult {
  readonly target: 'local-aws' | 'aws';
  readonly job: string;
  readonly stage: { readonly id: number; readonly name: string };
  readonly partitions: { readonly from: number; readonly to: number };
  /** The job's parallelism from now on (what SLUICE_PARALLELISM or the run's identity holds). */
  readonly parallelism: ParallelismOverride;
  /** The savepoint restored, and the epoch the job continues from (null: nothing to do). */
  readonly savepoint: string | null;
  readonly restoreEpoch: number | null;
  /** aws: the stage's event source maximum concurrency. */
  readonly maxConcurrency?: number;
}

function positive(flag: string, raw: string | undefined, min: number, max: number): number {
  const n = Number(raw);
  if (raw === undefined || !Number.isSafeInteger(n) || n < min || n > max) throw new ConfigError(flag, `an integer from ${min} to ${max}`, JSON.stringify(raw));
  return n;
}

const describeStage = (s: StagePlan) => `${s.id} "${s.name}" (${s.parallelism} partition${s.parallelism === 1 ? '' : 's'})`;

/** The stage `--stage` names (its id or its name), one that may be rescaled. */
export function rescalableStage(plan: PhysicalPlan, ref: string): StagePlan {
  const stage = /^\d+$/.test(ref) ? plan.stages[Number(ref)] : plan.stages.find((s) => s.name === ref);
  if (!stage) throw new ConfigError('--stage', `a stage of job "${plan.job.name}", by id or name: ${plan.stages.map(describeStage).join(', ')}`, JSON.stringify(ref));
  const source = stage.inputs.map((e) => plan.edges[e].from).find((f) => f.kind === 'source');
  if (source) {
    throw new ConfigError('--stage', `a stage after the sources (a source stage keeps its partitions: its input is positioned and logged per partition); stages: ${plan.stages.map(describeStage).join(', ')}`, `stage ${describeStage(stage)}, which reads source "${source.source}"`);
  }
  return stage;
}

/** The override that puts `stage` at `partitions`, on top of what the job runs at now. */
export function rescaledParallelism(plan: PhysicalPlan, current: ParallelismOverride | undefined, stage: StagePlan, partitions: number): ParallelismOverride {
  const operators = { ...(current?.operators ?? {}) };
  for (const i of stage.nodes) operators[plan.job.nodes[i].name] = partitions;
  return { ...(current?.default !== undefined ? { default: current.default } : {}), operators };
}

export async function rescaleCommand(jobPath: string, flags: RescaleFlags, log: Log): Promise<RescaleResult> {
  return withTarget(jobPath, flags, async (r) => {
    const stage = rescalableStage(r.plan, flags.stage);
    const to = positive('--partitions', flags.partitions, 1, r.plan.job.maxParallelism);
    const current = r.local ? r.local.identity.parallelism : r.deployed?.parallelism;
    const pending = r.local?.identity.rescale;
    const parallelism = rescaledParallelism(r.plan, current, stage, to);
    if (pending && encodeParallelism(pending.parallelism) !== encodeParallelism(parallelism)) {
      throw new ConfigError('--partitions', `the unfinished rescale of the run in ${r.local!.dir} again (${describeParallelism(pending.parallelism)}, from savepoint "${pending.from}")`, describeParallelism(parallelism));
    }
    const result = (savepoint: string | null, restoreEpoch: number | null, maxConcurrency?: number): RescaleResult => ({
      target: flags.target,
      job: r.plan.job.name,
      stage: { id: stage.id, name: stage.name },
      partitions: { from: stage.parallelism, to },
      parallelism,
      savepoint,
      restoreEpoch,
      ...(maxConcurrency !== undefined ? { maxConcurrency } : {}),
    });
    if (stage.parallelism === to && !pending && flags.from === undefined) {
      log(`stage ${describeStage(stage)} of job "${r.plan.job.name}" already has ${to} partitions in ${r.where}: nothing to do`);
      return result(null, null);
    }
    // The job as it will run: its plan keeps every stage but this one's partitions.
    const job = r.job.withParallelism({ operators: Object.fromEntries(stage.nodes.map((i) => [r.plan.job.nodes[i].name, to])) });
    const plan = compile(job.graph);
    const after = plan.stages[stage.id];
    if (plan.stages.length !== r.plan.stages.length || after?.parallelism !== to || after.name !== stage.name) {
      throw new ConfigError('--partitions', `a parallelism that keeps the job's stages (${r.plan.stages.map(describeStage).join(', ')})`, `${to}, which compiles to stages ${plan.stages.map(describeStage).join(', ')}`);
    }
    const target: Resolved = { ...r, job, plan };
    log(`rescaling stage ${describeStage(stage)} of job "${r.plan.job.name}" to ${to} partitions in ${r.where}`);

    if (r.local) {
      const { dir, identity } = r.local;
      const from = pending?.from ?? flags.from ?? (await checkpointAsSavepoint(r, log));
      // From here a rerun finishes this rescale, and a --resume refuses until it did.
      writeLocalAwsIdentity(dir, { ...identity, rescale: { from, parallelism } });
      const restored = await installRestorePoint(target, from, log);
      writeLocalAwsIdentity(dir, { runId: identity.runId, ...(encodeParallelism(parallelism) ? { parallelism } : {}) });
      log(`rescaled stage "${stage.name}" ${stage.parallelism} -> ${to} partitions from savepoint "${from}": restore epoch ${restored.restoreEpoch}; the run's parallelism is now ${describeParallelism(parallelism)}`);
      log(`continue with: sluice run ${jobPath} --target local-aws --checkpoint-dir ${dir} --resume ...`);
      return result(from, restored.restoreEpoch);
    }

    const deployed = r.deployed!;
    const maxConcurrency = flags.maxConcurrency === undefined ? defaultMaxConcurrency(to) : positive('--max-concurrency', flags.maxConcurrency, MIN_CONCURRENCY, MAX_CONCURRENCY);
    let from = flags.from;
    if (from === undefined) {
      from = flags.label ?? `rescale-${new Date().toISOString().replace(/[:.]/g, '-')}`;
      log(`savepoint "${from}" first; if this command dies from here, run it again with --from ${from}`);
      await takeSavepoint(r, from, flags, log);
    }
    const queueArn = deployed.queues.find((q) => q.stage === stage.id)!.arn;
    const port = new AwsFunctionConfigPort(await r.clients.lambda());
    const restored = await installRestorePoint(target, from, log, async () => {
      await setDeployedParallelism(port, { stageQueues: deployed.queues.map((q) => q.arn), parallelism, fingerprint: planFingerprint(plan), stage: { queueArn, maxConcurrency } }, log);
    });
    log(`rescaled stage "${stage.name}" of deployed job "${deployed.job}" ${stage.parallelism} -> ${to} partitions (maximum concurrency ${maxConcurrency}) from savepoint "${from}": restore epoch ${restored.restoreEpoch}`);
    log(`keep it on the next deploy: SluiceJob parallelism ${JSON.stringify(parallelism)} (or sluice deploy ... ${describeParallelism(parallelism)})`);
    return result(from, restored.restoreEpoch, maxConcurrency);
  });
}

/** local-aws: the run's last committed checkpoint, kept as savepoint `rescale-e<epoch>-<plan>` (its label). */
async function checkpointAsSavepoint(r: Resolved, log: Log): Promise<string> {
  const ptr = (await r.pointers.read<CommitPointer>(POINTER_NAME))?.value;
  if (!ptr || ptr.epoch === 0) throw new ConfigError('--from', `a savepoint, or a committed checkpoint of the run in ${r.local!.dir} (run it with --checkpoint-interval until one commits)`, 'no committed checkpoint');
  const body = await r.blobs.get(ptr.manifestKey);
  if (!body) throw new ConfigError('--from', `the manifest the commit pointer names (${ptr.manifestKey})`, 'no such object');
  // Named by epoch and plan (a second rescale before a resume finds the same epoch, installed under the first's plan).
  const manifest = fromBytes<Manifest>(body);
  const label = `rescale-e${ptr.epoch}-${manifest.fingerprint.slice(0, 8)}`;
  // Written again the same (a rerun after a kill): its time is the checkpoint's.
  const meta = await savepointFromCheckpoint({ blobs: r.blobs, job: r.plan.job.name, plan: describePlan(r.plan) }, manifest, ptr.manifestKey, label, manifest.createdAt);
  log(`checkpoint ${ptr.epoch} kept as savepoint "${label}" (${meta.objects} objects)`);
  return label;
}
