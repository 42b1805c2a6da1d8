/**
 * Checkpoints in local-AWS mode: the Step Functions coordinator's steps in process
 * (checkpoint-loop.ts), partitions snapshotting to S3 and acking through DynamoDB, a
 * transactional output file, and restore after a crash.
 *
 * Resources. A checkpointed run has an identity kept in `<dir>/local-aws.json`
 * ({runId, generation}); what must outlive a crash is named by the runId alone:
 *   table  sluice-<runId>-<job>    coordinator record, commit pointer, lease (`${job}#c`), acks, activity (`${job}#a`)
 *   bucket sluice-<runId>-ckpt     manifests, checkpoint stats, snapshot objects
 * The data path (state table, stage queues, spill bucket) belongs to one generation
 * (`<runId>g<n>`); `--resume` starts the next one, so nothing the crashed process left
 * in flight (queued messages, uncommitted state past the checkpoint) can leak in.
 *
 * Resume: the coordinator's resume step first finishes or aborts the epoch in flight
 * (it may re-open one at once: its barriers wait in the new queues, in front of
 * everything); then every partition's state, timers and progress are installed from the
 * snapshots the committed manifest names (DynamoDbStateBackend.install), source
 * channels forget their old SQS offsets (new queues number anew) but keep their record
 * counts, and the feeder skips, per source partition, the records the manifest's
 * positions say the checkpoint holds. The output file keeps exactly the committed epochs
 * (CommittedFileSink.recover).
 */
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Job } from '../../api/stream.ts';
import { fromBytes } from '../../checkpoint/codec.ts';
import { POINTER_NAME } from '../../checkpoint/driver.ts';
import { writeFileAtomic } from '../../checkpoint/local-storage.ts';
import type { CommitPointer, Manifest } from '../../checkpoint/protocol.ts';
import { restoreManifest } from '../../checkpoint/snapshot.ts';
import { ConfigError } from '../../errors.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import type { TransactionalSink } from '../../local/committed-sink.ts';
import { positionsBySource } from '../../local/restore.ts';
import type { ChannelProgress, PartitionProgress } from '../../state/backend.ts';
import type { BarrierAck } from '../../transport/envelope.ts';
import type { AwsAccounting } from '../accounting.ts';
import { createCheckpointHandler } from '../checkpoint-handler.ts';
import { DynamoDbPointerStore } from '../dynamodb-pointers.ts';
import { createStateTable, type DynamoDbStateBackend } from '../dynamodb-state.ts';
import { stateTableName } from '../naming.ts';
import { createBucket, S3BlobStore } from '../s3-blob-store.ts';
import type { QueueResolver } from '../sqs-queues.ts';
import type { LocalAwsEnvironment } from './endpoints.ts';
import { LocalCheckpointLoop } from './checkpoint-loop.ts';

export interface LocalAwsCheckpointOptions {
  /** The run's identity file and the transactional sinks' staging live here. */
  readonly dir: string;
  /** Periodic epochs while input arrives (the state machine's WaitInterval). */
  readonly intervalMs: number;
  readonly pollMs?: number;
  readonly timeoutMs?: number;
  readonly start: 'fresh' | 'resume';
  /** Committed with the checkpoints (opened, prepared and committed here). */
  readonly sinks?: readonly TransactionalSink[];
  readonly log?: (line: string) => void;
}

interface Identity {
  readonly runId: string;
  readonly generation: number;
}

const IDENTITY = 'local-aws.json';

/** What the runner asks of the checkpoints (runner.ts). */
export class LocalAwsCheckpointing {
  readonly store: S3BlobStore;
  readonly loop: LocalCheckpointLoop;
  /** The epoch the run restored (0: none). */
  restoredEpoch = 0;
  /** Per source, per partition: records the restored checkpoint already holds (the feeder skips them). */
  private skip: Record<string, number[]> = {};
  private readonly handler: ReturnType<typeof createCheckpointHandler>;
  private readonly pointers: DynamoDbPointerStore;

  private constructor(
    private readonly job: Job,
    private readonly plan: PhysicalPlan,
    private readonly env: LocalAwsEnvironment,
    readonly identity: Identity,
    private readonly o: LocalAwsCheckpointOptions,
    queues: QueueResolver,
    accounting: AwsAccounting,
  ) {
    const { clients } = env;
    const controlTable = stateTableName(`${identity.runId}-${plan.job.name}`);
    const bucket = `sluice-${identity.runId}-ckpt`.toLowerCase();
    this.store = new S3BlobStore({ s3: clients.s3, bucket, accounting });
    this.pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: controlTable, job: plan.job.name, accounting });
    const sinks = o.sinks ?? [];
    this.handler = createCheckpointHandler({
      job,
      dynamodb: clients.dynamodb,
      sqs: clients.sqs,
      s3: clients.s3,
      bucket,
      tableName: controlTable,
      queues,
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
    this.loop = new LocalCheckpointLoop({
      handler: this.handler,
      pointers: this.pointers,
      intervalMs: o.intervalMs,
      pollMs: o.pollMs ?? Math.max(5, Math.min(50, o.intervalMs || 50)),
      epochTimeoutMs: o.timeoutMs ?? 60_000,
      execution: `local-${plan.job.name}`.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 80),
      accounting,
      log: o.log,
    });
  }

  /** The identity of this run (a new one, or the crashed run's next generation) and the data path's run id. */
  static identity(o: Pick<LocalAwsCheckpointOptions, 'dir' | 'start'>): Identity {
    mkdirSync(o.dir, { recursive: true });
    const file = join(o.dir, IDENTITY);
    let id: Identity;
    if (o.start === 'resume') {
      if (!existsSync(file)) throw new ConfigError('--resume', `a local-aws checkpointed run to continue (${file})`, 'none: run without --resume first');
      const old = JSON.parse(readFileSync(file, 'utf8')) as Identity;
      id = { runId: old.runId, generation: old.generation + 1 };
    } else {
      for (const d of ['sinks']) rmSync(join(o.dir, d), { recursive: true, force: true });
      id = { runId: `r${randomBytes(3).readUIntBE(0, 3).toString(36).padStart(5, '0').slice(0, 5)}`, generation: 0 };
    }
    writeFileAtomic(join(o.dir, IDENTITY), JSON.stringify(id));
    return id;
  }

  /** The data path's run id (queues, state table, spill bucket of this generation). */
  static dataRunId(id: Identity): string {
    return `${id.runId}g${id.generation}`;
  }

  static async create(job: Job, plan: PhysicalPlan, env: LocalAwsEnvironment, identity: Identity, o: LocalAwsCheckpointOptions, queues: QueueResolver, accounting: AwsAccounting): Promise<LocalAwsCheckpointing> {
    const c = new LocalAwsCheckpointing(job, plan, env, identity, o, queues, accounting);
    await createStateTable(env.clients.dynamodb, stateTableName(`${identity.runId}-${plan.job.name}`));
    await createBucket(env.clients.s3, `sluice-${identity.runId}-ckpt`.toLowerCase());
    // The sinks are the job's output sinks too: the runner opened them.
    return c;
  }

  /** Operators record their acks here (the coordinator reads them). */
  recordAcks(acks: readonly BarrierAck[]): Promise<void> {
    return this.handler.acks.put(acks);
  }

  /** Input was sent: the coordinator's open step looks for it. */
  touch(): Promise<void> {
    return this.handler.acks.touch(Date.now());
  }

  skipOf(source: string): readonly number[] {
    return this.skip[source] ?? [];
  }

  /**
   * Before any partition runs: the coordinator resumes (or starts), the committed
   * checkpoint's state goes into the generation's fresh state table, sinks recover.
   */
  async beforeStart(backend: DynamoDbStateBackend): Promise<void> {
    const carry = await this.loop.resume();
    const ptr = (await this.pointers.read<CommitPointer>(POINTER_NAME))?.value;
    if (this.o.start === 'resume' && ptr && ptr.epoch > 0) {
      const bytes = await this.store.get(ptr.manifestKey);
      if (!bytes) throw new ConfigError('--resume', `the manifest the commit pointer names (${ptr.manifestKey})`, 'no such object');
      const manifest = fromBytes<Manifest>(bytes);
      for (const r of (await restoreManifest(manifest, this.store)).values()) {
        const scope = { job: this.plan.job.name, stage: r.stage, partition: r.partition };
        const entities = [...r.entities].map(([entity, { kg, fields }]) => ({ kg, entity, fields }));
        await backend.install(scope, { progress: withoutOffsets(r.progress), timers: [...r.timers.values()], entities }, manifest.epoch);
      }
      this.skip = positionsBySource(manifest);
      this.restoredEpoch = manifest.epoch;
    } else if (this.o.start === 'resume') {
      this.o.log?.('no completed checkpoint on these servers (were they started by the crashed run?): the input is replayed from the start');
    }
    for (const s of this.o.sinks ?? []) await s.recover(this.restoredEpoch);
    this.loop.start(carry);
  }

  /** After the last input was processed: one more checkpoint, so all output is committed. */
  async finish(): Promise<void> {
    await this.touch();
    await this.loop.finish();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
  }
}

/** New queues number their messages anew: source channels keep their record counts, not the old SQS offsets. */
function withoutOffsets(p: PartitionProgress): PartitionProgress {
  const inputs: Record<string, ChannelProgress> = {};
  for (const [c, ch] of Object.entries(p.inputs)) {
    const { offset: _old, ...rest } = ch;
    inputs[c] = rest;
  }
  return { ...p, inputs };
}
