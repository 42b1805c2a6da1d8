/**
 * `sluice checkpoints|savepoint|restore --target local-aws|aws`: the checkpoints of a job
 * whose coordinator runs the AWS checkpoint steps (lib/aws/checkpoint/checkpoint-steps.ts).
 *
 * - local-aws: the control table and bucket of the last `sluice run --target local-aws
 *   --checkpoint-interval` in --checkpoint-dir (its local-aws.json), on the servers the
 *   AWS_ENDPOINT_URL* variables name (servers a run started itself stop with it). A
 *   running run is signalled (SIGUSR2) to take a savepoint at once; otherwise the request
 *   waits for the next `--resume`.
 * - aws: a deployed SluiceJob, found by its name (lib/aws/deployment.ts); a savepoint
 *   starts a coordinator execution when none runs, so a quiet job takes it too; a restore
 *   stops the job's consumers and coordinator around the install (lib/aws/restore/job-control.ts).
 */
import type { Job } from '../api/stream.ts';
import { AwsAccounting } from '../aws/cost/accounting.ts';
import { LEASE_NAME, type Lease } from '../aws/checkpoint/checkpoint-task.ts';
import { awsClients, type AwsClients, type DeployedJob, type DeploymentFlags, findDeployedJob } from '../aws/deployment.ts';
import { DynamoDbPointerStore } from '../aws/dynamodb/dynamodb-pointers.ts';
import { configuredEndpoint } from '../aws/configured-endpoints.ts';
import { type Identity, LOCAL_AWS_PROCESS, localAwsControl, readLocalAwsIdentity } from '../testing/local-aws/checkpointing.ts';
import { atParallelism } from '../aws/parallelism-env.ts';
import { crossFaultSites } from '../testing/local-aws/fault-sites.ts';
import { S3BlobStore } from '../aws/s3/s3-blob-store.ts';
import { AwsJobControlPort, JobControl, restoreLeaseOwner, whileStopped } from '../aws/restore/job-control.ts';
import { NamedQueues } from '../aws/sqs/sqs-queues.ts';
import { DynamoDbTable } from '../aws/dynamodb/dynamodb-table.ts';
import { adoptPlan, remapSavepoint } from '../aws/restore/savepoint-remap.ts';
import { type AwsRestorePoint, installableManifest, listAwsCheckpoints, loadRestorePoint, requestSavepoint, savepointFit, savepointMetaKey, type AwsSavepointMeta } from '../aws/restore/savepoints.ts';
import { fromBytes } from '../checkpoint/codec.ts';
import { ConfigError } from '../errors.ts';
import { compile, type PhysicalPlan } from '../graph/compile.ts';
import { defaultCheckpointDir } from '../local/checkpointing.ts';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadJob, parseParams } from './load-job.ts';
import { printCheckpointList, restoreHint, type SavepointResult } from './checkpoints.ts';
import { fmt } from './options.ts';

type Log = (line: string) => void;

export type AwsTarget = 'local-aws' | 'aws';

export interface AwsTargetFlags extends DeploymentFlags {
  readonly target: AwsTarget;
  readonly checkpointDir?: string;
  readonly param?: string[];
}

export interface Resolved {
  readonly job: Job;
  readonly table: string;
  readonly bucket: string;
  /** The stage queues' name prefix. */
  readonly queuePrefix: string;
  /** local-aws: the pid of a run still going in the checkpoint directory. */
  running?(): number | undefined;
  /** local-aws: the checkpoint directory and the run's identity. */
  readonly local?: { readonly dir: string; readonly identity: Identity };
  readonly plan: PhysicalPlan;
  readonly pointers: DynamoDbPointerStore;
  readonly blobs: S3BlobStore;
  /** For messages: where the checkpoints are. */
  readonly where: string;
  readonly clients: AwsClients;
  readonly deployed?: DeployedJob;
  /** Make the coordinator look at its requests now; returns what it did. */
  wake(): Promise<string>;
}

async function resolve(jobPath: string, flags: AwsTargetFlags, now: () => number): Promise<Resolved> {
  let job = await loadJob(jobPath, parseParams(flags.param));
  let plan = compile(job.graph);
  const name = plan.job.name;
  const clients = awsClients();
  const accounting = new AwsAccounting();
  try {
    if (flags.target === 'local-aws') {
      const dir = flags.checkpointDir ?? defaultCheckpointDir(name);
      const id = readLocalAwsIdentity(dir);
      if (!id) throw new ConfigError('--checkpoint-dir', 'the directory of a `sluice run --target local-aws --checkpoint-interval` (with its local-aws.json)', `${dir} (no local-aws.json)`);
      for (const service of ['dynamodb', 's3'] as const) {
        if (!configuredEndpoint(service)) throw new ConfigError(`AWS_ENDPOINT_URL_${service.toUpperCase()}`, 'the endpoint of the servers the local-aws run used (servers a run starts itself stop with it)', 'unset');
      }
      const c = localAwsControl(id.runId, name);
      // As a local-AWS run's: every SDK call crosses its fault site (SLUICE_KILL_AT kills between two).
      crossFaultSites({ dynamodb: clients.dynamodb, s3: clients.s3, sqs: clients.sqs });
      // At the run's parallelism (its identity keeps it: local-aws-parallelism.ts).
      job = atParallelism(job, id.parallelism);
      plan = compile(job.graph);
      return {
        job,
        local: { dir, identity: id },
        plan,
        clients,
        table: c.table,
        bucket: c.bucket,
        queuePrefix: `${id.runId}-`,
        running: () => runningPid(join(dir, LOCAL_AWS_PROCESS)),
        where: `local-aws run ${id.runId} (${dir}; table ${c.table}, bucket ${c.bucket})`,
        pointers: new DynamoDbPointerStore({ client: clients.dynamodb, tableName: c.table, job: name, accounting }),
        blobs: new S3BlobStore({ s3: clients.s3, bucket: c.bucket, accounting }),
        wake: async () => {
          const pid = runningPid(join(dir, LOCAL_AWS_PROCESS));
          if (pid === undefined) return `no local-aws run is running in ${dir}: the savepoint is taken when it runs again (sluice run ... --target local-aws --resume)`;
          process.kill(pid, 'SIGUSR2');
          return `signalled the local-aws run (pid ${pid})`;
        },
      };
    }
    const deployed = await findDeployedJob(clients, plan, flags);
    // At the deployment's parallelism (SLUICE_PARALLELISM: what SluiceJob was given or sluice rescale set).
    job = atParallelism(job, deployed.parallelism);
    plan = compile(job.graph);
    const pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: deployed.table, job: name, accounting });
    return {
      job,
      plan,
      clients,
      deployed,
      table: deployed.table,
      bucket: deployed.bucket,
      queuePrefix: flags.queuePrefix ?? '',
      where: `deployed job ${name} (table ${deployed.table}, bucket ${deployed.bucket})`,
      pointers,
      blobs: new S3BlobStore({ s3: clients.s3, bucket: deployed.bucket, accounting }),
      wake: async () => {
        if (!deployed.stateMachineArn) throw new ConfigError('--state-machine', 'the checkpoint state machine of the job (deployed with checkpoints)', 'none found');
        const lease = (await pointers.read<Lease>(LEASE_NAME))?.value;
        if (lease?.owner && lease.until > now()) return `coordinator execution ${lease.owner} takes it at its next epoch`;
        const { StartExecutionCommand } = await import('@aws-sdk/client-sfn');
        const exec = `${name.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 60)}-savepoint-${now()}`;
        await clients.sfn.send(new StartExecutionCommand({ stateMachineArn: deployed.stateMachineArn, name: exec, input: '{}' }));
        return `started coordinator execution ${exec}`;
      },
    };
  } catch (e) {
    clients.destroy();
    throw e;
  }
}

function runningPid(file: string): number | undefined {
  if (!existsSync(file)) return undefined;
  try {
    const pid = (JSON.parse(readFileSync(file, 'utf8')) as { pid: number }).pid;
    process.kill(pid, 0);
    return pid;
  } catch {
    return undefined; // Gone (a crashed run leaves its file behind).
  }
}

/** Resolve the target's control table, bucket and clients, run `body`, then close the clients. */
export async function withTarget<T>(jobPath: string, flags: AwsTargetFlags, body: (r: Resolved) => Promise<T>): Promise<T> {
  const r = await resolve(jobPath, flags, Date.now);
  try {
    return await body(r);
  } finally {
    r.clients.destroy();
  }
}

const at = (r: Resolved) => ({ pointers: r.pointers, blobs: r.blobs, job: r.plan.job.name });

export async function checkpointsAwsCommand(jobPath: string, flags: AwsTargetFlags & { json?: boolean }, out: Log): Promise<void> {
  await withTarget(jobPath, flags, async (r) => {
    const l = await listAwsCheckpoints(at(r));
    if (flags.json) return out(JSON.stringify(l, null, 2));
    printCheckpointList(`checkpoints of job "${r.plan.job.name}" in ${r.where}`, l, out);
  });
}

/** Record the request, wake the coordinator, wait until the savepoint's meta object exists. */
export async function savepointAwsCommand(jobPath: string, flags: AwsTargetFlags & { label?: string; timeout?: string; pollMs?: number }, log: Log): Promise<SavepointResult> {
  return withTarget(jobPath, flags, async (r) => {
    const label = flags.label ?? `sp-${new Date().toISOString().replace(/[:.]/g, '-')}`;
    const meta = await takeSavepoint(r, label, flags, log);
    // An s3:// URI: what `sluice restore --from` takes on the embedded runtime too.
    const location = `s3://${r.bucket}/${r.plan.job.name}/savepoints/${label}/`;
    log(`savepoint "${label}" of job "${meta.job}": epoch ${meta.epoch}, ${fmt.int(meta.bytes)} bytes in ${meta.objects} objects, in ${r.where}: ${location}`);
    const restore = restoreHint(jobPath, label, flags);
    log(`restore: ${restore}`);
    return { target: flags.target, job: meta.job, label, epoch: meta.epoch, bytes: meta.bytes, location, restore };
  });
}

/** Request savepoint `label`, wake the coordinator, and wait (`--timeout`, ms) until its meta object exists. */
export async function takeSavepoint(r: Resolved, label: string, flags: { timeout?: string; pollMs?: number }, log: Log): Promise<AwsSavepointMeta> {
  const timeout = Number(flags.timeout ?? 300_000);
  if (!Number.isSafeInteger(timeout) || timeout < 1) throw new ConfigError('--timeout', 'an integer >= 1 (ms)', JSON.stringify(flags.timeout));
  const { created } = await requestSavepoint(at(r), label, Date.now());
  log(`savepoint "${label}" ${created ? 'requested' : 'was already requested'} in ${r.where}; ${await r.wake()}`);
  const deadline = Date.now() + timeout;
  for (;;) {
    const body = await r.blobs.get(savepointMetaKey(r.plan.job.name, label));
    if (body) return fromBytes<AwsSavepointMeta>(body);
    if (Date.now() > deadline) throw new ConfigError('--timeout', `savepoint "${label}" written within ${timeout} ms (it waits for the epoch in flight; the request stays recorded and is taken later)`, 'not written yet');
    await new Promise((res) => setTimeout(res, flags.pollMs ?? 250));
  }
}

/**
 * `sluice restore --target local-aws|aws`: the restore point checked against the job as it
 * is now, then installed in place (lib/aws/restore/restore.ts): a deployed job is stopped
 * around the install (lib/aws/restore/job-control.ts); a local-AWS run must not be running,
 * and continues from it with `sluice run ... --resume`.
 */
/** What `sluice restore --target local-aws|aws --json` prints. */
export interface AwsRestoreResult {
  target: 'local-aws' | 'aws';
  job: string;
  /** "checkpoint 12" or "savepoint \"v2\"". */
  restored: string;
  /** The epoch of the checkpoint or savepoint. */
  epoch: number;
  /** The epoch the job continues from. */
  restoreEpoch: number;
  /** Whether the job's plan changed since (state names and kinds were checked compatible). */
  plan: 'same' | 'changed';
}

export async function restoreAwsCommand(jobPath: string, flags: AwsTargetFlags & { from: string }, log: Log): Promise<AwsRestoreResult> {
  return withTarget(jobPath, flags, async (r) => {
    const result = await installRestorePoint(r, flags.from, log);
    if (!r.deployed) log(`restored ${result.restored}: restore epoch ${result.restoreEpoch}; continue with: sluice run ${jobPath} --target local-aws --checkpoint-dir ${flags.checkpointDir ?? defaultCheckpointDir(r.plan.job.name)} --resume ...`);
    return result;
  });
}

/**
 * Check restore point `from` against `r`'s job (StateCompatibilityError names each
 * problem) and install it in place; a deployed job is stopped around the install and
 * `whileStopped` (a rescale: the functions' parallelism) runs after it, before the job starts again.
 */
export async function installRestorePoint(r: Resolved, from: string, log: Log, whileStoppedToo?: () => Promise<void>): Promise<AwsRestoreResult> {
  const point: AwsRestorePoint = await loadRestorePoint(at(r), from);
  const fit = savepointFit(point, r.plan);
  log(`${point.what} (epoch ${point.manifest.epoch}) fits job "${r.plan.job.name}" ${fit === 'same' ? 'as it is (same plan)' : 'after its change (state names and kinds compatible)'}`);
  const pid = r.running?.();
  if (pid !== undefined) throw new ConfigError('--checkpoint-dir', 'no local-aws run going on in it (stop it first: the restore rolls its partitions back)', `the run of pid ${pid}`);
  // A savepoint is rewritten as a manifest of the plan as it is now (savepoint-remap.ts: a
  // changed plan, and inter-stage sequences continued above what the job sent since).
  const { manifest, manifestKey } = point.meta
    ? await remapSavepoint({ blobs: r.blobs, db: new DynamoDbTable(r.clients.dynamodb, r.table, new AwsAccounting()), plan: r.plan, point })
    : await installableManifest(r.blobs, point);
  const { restoreInPlace } = await import('../aws/restore/restore.ts');
  const install = async () => {
    const result = await restoreInPlace({
      job: r.job,
      plan: r.plan,
      clients: r.clients,
      tableName: r.table,
      bucket: r.bucket,
      queues: new NamedQueues(r.clients.sqs, r.plan.job.name, r.queuePrefix),
      manifest,
      manifestKey,
      log,
    });
    if (fit === 'changed') await adoptPlan(r.pointers, r.plan);
    await whileStoppedToo?.();
    return result;
  };
  const done = (restoreEpoch: number): AwsRestoreResult => ({ target: r.deployed ? 'aws' : 'local-aws', job: r.plan.job.name, restored: point.what, epoch: point.manifest.epoch, restoreEpoch, plan: fit });
  if (!r.deployed) return done((await install()).restoreEpoch);
  const d = r.deployed;
  const port = new AwsJobControlPort({ lambda: await r.clients.lambda(), sqs: r.clients.sqs, sfn: r.clients.sfn, stateMachineArn: d.stateMachineArn });
  const control = new JobControl({ job: d.job, port, pointers: r.pointers, queues: d.queues, owner: restoreLeaseOwner(Date.now()), log });
  const result = await whileStopped(control, () => install());
  log(`restored ${point.what} in job "${d.job}": restore epoch ${result.restoreEpoch}, ${Object.keys(result.versions).length} partitions, ${Object.values(result.sources).reduce((n, s) => n + s.replayed, 0)} logged records to replay; consumers and coordinator running again`);
  return done(result.restoreEpoch);
}
