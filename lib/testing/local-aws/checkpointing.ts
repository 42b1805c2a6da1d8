/**
 * Checkpoints in local-AWS mode: the Step Functions coordinator's state machine in
 * process (checkpoint-state-machine.ts), partitions snapshotting to S3 and acking through DynamoDB, the
 * job's transactional sinks (the CLI's output file, S3 file sinks) prepared and committed
 * with the checkpoints, and restore after a crash.
 *
 * Resources, as a deployment has them: one run id kept in `<dir>/local-aws.json` names
 * them all, for as long as the run is resumed:
 *   table  sluice-<runId>-<job>   partitions' state and input log, coordinator record,
 *                                 commit pointer and lease (`${job}#c`), acks and activity
 *                                 (`${job}#a`), S3 file sink pointers
 *   bucket sluice-<runId>-ckpt    manifests, checkpoint stats, snapshots, input log
 *                                 objects, the job's S3 file sinks
 *   queues <runId>-<job>-s<n>.fifo, bucket sluice-<runId>-spill (envelopes, outboxes)
 *
 * Resume restores in place (lib/aws/restore/restore.ts), in the same table and queues: every
 * partition back to the committed checkpoint (to the empty start when none committed),
 * inter-stage queues emptied, sinks recovered to its epoch, the coordinator continuing
 * above every epoch it saw. Source partitions first replay what the input log holds after
 * the checkpoint's positions (in the operator function); then sources bound to a
 * replayable input (files, items, generators) are fed again, from the record each source
 * partition had consumed on (their queues were emptied: the crashed feeder may have sent
 * part of a chunk); ingestion streams keep their queues, whose accepted, unconsumed input
 * follows the replay.
 */
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { ParallelismOverride } from '../../api/logical.ts';
import type { Job } from '../../api/stream.ts';
import { fromBytes } from '../../checkpoint/codec.ts';
import { POINTER_NAME } from '../../checkpoint/driver.ts';
import { writeFileAtomic } from '../../checkpoint/local-storage.ts';
import type { CommitPointer, Manifest } from '../../checkpoint/protocol.ts';
import { ConfigError } from '../../errors.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import type { TransactionalSink } from '../../api/sinks.ts';
import type { BarrierAck } from '../../transport/envelope.ts';
import type { AwsAccounting } from '../../aws/cost/accounting.ts';
import { createCheckpointHandler } from '../../aws/checkpoint/checkpoint-handler.ts';
import { DynamoDbPointerStore } from '../../aws/dynamodb/dynamodb-pointers.ts';
import { createStateTable } from '../../aws/dynamodb/dynamodb-state.ts';
import { stateTableName } from '../../aws/naming.ts';
import { initialManifest, restoreInPlace, type RestoreInPlaceResult } from '../../aws/restore/restore.ts';
import { createBucket, S3BlobStore } from '../../aws/s3/s3-blob-store.ts';
import type { QueueResolver, StageQueues } from '../../aws/sqs/sqs-queues.ts';
import type { LocalAwsEnvironment } from './endpoints.ts';
import { LocalCheckpointStateMachine } from './checkpoint-state-machine.ts';
import { LocalAwsDeadLetters } from './dead-letter-file.ts';
import { flushAbandonedPolls } from './queues.ts';

export interface LocalAwsCheckpointOptions {
  /** The run's identity file and the transactional sinks' staging live here. */
  readonly dir: string;
  /** Periodic epochs while input arrives (the state machine's WaitInterval). */
  readonly intervalMs: number;
  readonly pollMs?: number;
  readonly timeoutMs?: number;
  readonly start: 'fresh' | 'resume';
  /** A fresh run's parallelism, kept in its identity (a resume keeps the identity's). */
  readonly parallelism?: ParallelismOverride;
  /** Committed with the checkpoints (prepared and committed here, recovered on resume); the runner adds the job's own transactional sinks. */
  readonly sinks?: readonly TransactionalSink[];
  readonly log?: (line: string) => void;
  /** Called once per epoch this run committed. */
  readonly onCommitted?: (epoch: number) => void;
}

/** What the runner passes besides the options. */
export interface LocalAwsCheckpointResources {
  readonly queues: QueueResolver;
  /** Every transactional sink of the run (the options' and the job's, bound to the run's bucket and table). */
  readonly sinks: readonly TransactionalSink[];
  /** Source stages the runner feeds again on resume (replayable inputs): restore empties their queues. */
  readonly refedSourceStages: readonly number[];
  /** Where the restore's requests are counted: a one-off, like setup, not a cost per event. */
  readonly overhead: AwsAccounting;
  /** The stage queues with their DLQs: a resume drains what the killed run parked. */
  readonly stageQueues: readonly StageQueues[];
}

export interface Identity {
  readonly runId: string;
  /** The parallelism the run's job is at (`--parallelism`, or `sluice rescale` since); a resume keeps it. */
  readonly parallelism?: ParallelismOverride;
  /** A `sluice rescale` begun and not finished: running it again finishes it (rescale.ts). */
  readonly rescale?: PendingRescale;
}

/** What a rescale installs: the savepoint it restores and the parallelism it restores at. */
export interface PendingRescale {
  readonly from: string;
  readonly parallelism: ParallelismOverride;
}

const IDENTITY = 'local-aws.json';
/** `{pid}` of the process running this checkpoint directory's job: `sluice savepoint --target local-aws` signals it (SIGUSR2). */
export const LOCAL_AWS_PROCESS = 'local-aws.pid.json';
/** The control table and bucket of a local-AWS checkpointed run (what `sluice checkpoints|savepoint --target local-aws` read). */
export function localAwsControl(runId: string, job: string): { table: string; bucket: string } {
  return { table: stateTableName(`${runId}-${job}`), bucket: `sluice-${runId}-ckpt`.toLowerCase() };
}

/** The identity of the last local-AWS checkpointed run in `dir`, or undefined. */
export function readLocalAwsIdentity(dir: string): Identity | undefined {
  const file = join(dir, IDENTITY);
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Identity) : undefined;
}

/** Replace the identity of the run in `dir` (sluice rescale). */
export function writeLocalAwsIdentity(dir: string, id: Identity): void {
  writeFileAtomic(join(dir, IDENTITY), JSON.stringify(id));
}

/** What the runner asks of the checkpoints (runner.ts). */
export class LocalAwsCheckpointing {
  readonly store: S3BlobStore;
  /** The coordinator's executions (what they committed and aborted, where they are). */
  readonly loop: LocalCheckpointStateMachine;
  /** The run's snapshot bucket (also the job's S3 file sinks' default bucket). */
  readonly bucket: string;
  readonly tableName: string;
  /** The epoch the run restored (0: none). */
  restoredEpoch = 0;
  /** What the resume's in-place restore did (undefined: a fresh run). */
  restore?: RestoreInPlaceResult;
  /** The run's dead letters (the checkpoint directory's file), once beforeStart opened it. */
  deadLetters?: LocalAwsDeadLetters;
  private readonly handler: ReturnType<typeof createCheckpointHandler>;
  private readonly pointers: DynamoDbPointerStore;

  private constructor(
    private readonly job: Job,
    private readonly plan: PhysicalPlan,
    private readonly env: LocalAwsEnvironment,
    readonly identity: Identity,
    private readonly o: LocalAwsCheckpointOptions,
    private readonly r: LocalAwsCheckpointResources,
    private readonly accounting: AwsAccounting,
  ) {
    const { clients } = env;
    ({ table: this.tableName, bucket: this.bucket } = localAwsControl(identity.runId, plan.job.name));
    this.store = new S3BlobStore({ s3: clients.s3, bucket: this.bucket, accounting });
    this.pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: this.tableName, job: plan.job.name, accounting });
    const sinks = r.sinks;
    this.handler = createCheckpointHandler({
      job,
      dynamodb: clients.dynamodb,
      sqs: clients.sqs,
      s3: clients.s3,
      bucket: this.bucket,
      tableName: this.tableName,
      queues: r.queues,
      accounting,
      overrides: {
        sinks: {
          prepare: async (e) => {
            for (const s of sinks) await s.prepare(e);
          },
          commit: async (e) => {
            for (const s of sinks) await s.commit(e);
          },
        },
      },
    });
    this.loop = new LocalCheckpointStateMachine({
      handler: this.handler,
      pointers: this.pointers,
      intervalMs: o.intervalMs,
      pollMs: o.pollMs ?? Math.max(5, Math.min(50, o.intervalMs || 50)),
      epochTimeoutMs: o.timeoutMs ?? 60_000,
      execution: `local-${plan.job.name}`.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 80),
      accounting,
      log: o.log,
      ...(o.onCommitted ? { onCommitted: o.onCommitted } : {}),
    });
  }

  /** The identity of this run: a new one, or the one a resumed run had. */
  static identity(o: Pick<LocalAwsCheckpointOptions, 'dir' | 'start' | 'parallelism'>): Identity {
    mkdirSync(o.dir, { recursive: true });
    const file = join(o.dir, IDENTITY);
    if (o.start === 'resume') {
      if (!existsSync(file)) throw new ConfigError('--resume', `a local-aws checkpointed run to continue (${file})`, 'none: run without --resume first');
      return JSON.parse(readFileSync(file, 'utf8')) as Identity;
    }
    for (const d of ['sinks']) rmSync(join(o.dir, d), { recursive: true, force: true });
    const id: Identity = { runId: `r${randomBytes(3).readUIntBE(0, 3).toString(36).padStart(5, '0').slice(0, 5)}`, ...(o.parallelism ? { parallelism: o.parallelism } : {}) };
    writeFileAtomic(file, JSON.stringify(id));
    return id;
  }

  /** The run's one state table. */
  static tableName(id: Identity, plan: PhysicalPlan): string {
    return localAwsControl(id.runId, plan.job.name).table;
  }

  static async create(job: Job, plan: PhysicalPlan, env: LocalAwsEnvironment, identity: Identity, o: LocalAwsCheckpointOptions, r: LocalAwsCheckpointResources, accounting: AwsAccounting): Promise<LocalAwsCheckpointing> {
    const c = new LocalAwsCheckpointing(job, plan, env, identity, o, r, accounting);
    await createStateTable(env.clients.dynamodb, c.tableName);
    await createBucket(env.clients.s3, c.bucket);
    return c;
  }

  /** Operators record their acks here (the coordinator reads them). */
  recordAcks(acks: readonly BarrierAck[]): Promise<void> {
    return this.handler.acks.put(acks);
  }

  /** Input was sent (at `at`, default now): the coordinator's open step looks for it, and an ended execution is followed by a new one. */
  async touch(at = Date.now()): Promise<void> {
    await this.handler.acks.touch(at);
    this.loop.onInput();
  }

  /** Per partition of a source fed again: the records its partitions already consumed (the feeder skips them). */
  skipOf(source: string): readonly number[] {
    const out: number[] = [];
    for (const [key, s] of Object.entries(this.restore?.sources ?? {})) {
      const i = key.lastIndexOf('#');
      if (key.slice(0, i) === source) out[Number(key.slice(i + 1))] = s.consumed;
    }
    return out;
  }

  /** Records the input log replays on this restore (all sources). */
  get replayedRecords(): number {
    return Object.values(this.restore?.sources ?? {}).reduce((n, s) => n + s.replayed, 0);
  }

  /** The restore's epoch (0: a fresh run): part of the feeder's deduplication ids, so what is fed again is not taken for a duplicate. */
  get restoreEpoch(): number {
    return this.restore?.restoreEpoch ?? 0;
  }

  /**
   * Before any partition runs. Resume: restore in place to the committed checkpoint (to
   * the empty start when none committed: the input log holds everything consumed since).
   * Then the coordinator's first execution starts (its resume step).
   */
  async beforeStart(): Promise<void> {
    if (this.o.start === 'resume' && this.identity.rescale) {
      throw new ConfigError('--resume', `a run whose rescale finished (run the same sluice rescale again: it restores savepoint "${this.identity.rescale.from}")`, `a rescale of the run in ${this.o.dir} not finished`);
    }
    if (this.o.start === 'resume') {
      const ptr = (await this.pointers.read<CommitPointer>(POINTER_NAME))?.value;
      let manifest: Manifest;
      if (ptr && ptr.epoch > 0) {
        const bytes = await this.store.get(ptr.manifestKey);
        if (!bytes) throw new ConfigError('--resume', `the manifest the commit pointer names (${ptr.manifestKey})`, 'no such object');
        manifest = fromBytes<Manifest>(bytes);
      } else {
        this.o.log?.('no completed checkpoint to resume from: restoring the start (the input log holds what was consumed)');
        manifest = initialManifest(this.plan);
      }
      const { clients } = this.env;
      // What the killed run parked and the checkpoint covers stays; later letters are parked again by the replay.
      this.deadLetters = LocalAwsDeadLetters.open(this.o.dir, this.plan.job.name, manifest.epoch);
      await this.deadLetters.drain(clients.sqs, this.r.stageQueues, this.r.overhead, manifest.epoch);
      // The crashed process's pollers may still wait on the queues: they would take what the restore sends.
      const flushId = `${this.plan.job.name}/flush/${Date.now()}-${randomBytes(4).toString('hex')}`;
      for (const stage of this.plan.stages) await flushAbandonedPolls(clients.sqs, await this.r.queues.queueUrl(stage.id), `${flushId}/${stage.id}`);
      this.restore = await restoreInPlace({
        job: this.job,
        plan: this.plan,
        clients,
        tableName: this.tableName,
        bucket: this.bucket,
        queues: this.r.queues,
        manifest,
        manifestKey: ptr?.epoch ? ptr.manifestKey : '',
        refedSourceStages: this.r.refedSourceStages,
        sinks: this.r.sinks,
        accounting: this.r.overhead,
        log: this.o.log,
      });
      this.restoredEpoch = manifest.epoch;
    } else {
      this.deadLetters = LocalAwsDeadLetters.open(this.o.dir, this.plan.job.name, 'fresh');
      for (const s of this.r.sinks) await s.recover(0);
    }
    await this.loop.start();
    // A savepoint request (savepoints.ts) is taken at the next open; the signal makes that now.
    process.on('SIGUSR2', this.nudge);
    writeFileAtomic(join(this.o.dir, LOCAL_AWS_PROCESS), JSON.stringify({ pid: process.pid }));
  }

  private readonly nudge = () => this.loop.nudge();

  private released(): void {
    process.off('SIGUSR2', this.nudge);
    rmSync(join(this.o.dir, LOCAL_AWS_PROCESS), { force: true });
  }

  /**
   * After the last input was processed: one more checkpoint, so all output is committed.
   * Any epoch that covers this touch counts, which may open (and commit) before
   * the touch's answer arrives here.
   */
  async finish(): Promise<void> {
    const at = Date.now();
    await this.touch(at);
    await this.loop.finish(at);
    this.released();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
    this.released();
  }
}
