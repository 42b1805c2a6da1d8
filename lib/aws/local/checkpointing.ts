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
 * counts; the feeder first replays, per source partition, the records the input log holds
 * after the manifest's positions (input-log.ts; logged by earlier generations), then
 * feeds the input file from where the log ends (records already logged are not fed again). The output file keeps exactly the committed epochs
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
import type { StreamRecord } from '../../api/types.ts';
import { ConfigError, InvariantError } from '../../errors.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import type { TransactionalSink } from '../../local/committed-sink.ts';
import { positionsBySource } from '../../local/restore.ts';
import type { ChannelProgress, PartitionProgress } from '../../state/backend.ts';
import type { BarrierAck } from '../../transport/envelope.ts';
import type { AwsAccounting } from '../accounting.ts';
import { createCheckpointHandler } from '../checkpoint-handler.ts';
import { DynamoDbPointerStore } from '../dynamodb-pointers.ts';
import { createStateTable, type DynamoDbStateBackend } from '../dynamodb-state.ts';
import { DynamoDbTable } from '../dynamodb-table.ts';
import { DynamoDbRequestError } from '../errors.ts';
import { AwsInputLog, loggingPartitions } from '../input-log.ts';
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
  /** The data path's state table (this generation's), where source partitions log their input. */
  readonly dataTable?: string;
}

interface Identity {
  readonly runId: string;
  readonly generation: number;
}

const IDENTITY = 'local-aws.json';
/** `{pid}` of the process running this checkpoint directory's job: `sluice savepoint --target local-aws` signals it (SIGUSR2). */
export const LOCAL_AWS_PROCESS = 'local-aws.pid.json';
/** The control table and bucket of a local-AWS checkpointed run (what `sluice checkpoints|savepoint --target local-aws` read). */
export function localAwsControl(runId: string, job: string): { table: string; bucket: string } {
  return { table: stateTableName(`${runId}-${job}`), bucket: `sluice-${runId}-ckpt`.toLowerCase() };
}

/** The identity of the last local-AWS checkpointed run in `dir`, or undefined. */
export function readLocalAwsIdentity(dir: string): { runId: string; generation: number } | undefined {
  const file = join(dir, IDENTITY);
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as { runId: string; generation: number }) : undefined;
}

/** What the runner asks of the checkpoints (runner.ts). */
export class LocalAwsCheckpointing {
  readonly store: S3BlobStore;
  readonly loop: LocalCheckpointLoop;
  /** The epoch the run restored (0: none). */
  restoredEpoch = 0;
  /** Per source, per partition: records the restored checkpoint already holds (the feeder skips them). */
  private skip: Record<string, number[]> = {};
  /** Per source, per partition: the logged records after the restored checkpoint's positions (the feeder replays them first). */
  private replay: Record<string, StreamRecord[][]> = {};
  private readonly handler: ReturnType<typeof createCheckpointHandler>;
  private readonly pointers: DynamoDbPointerStore;

  private constructor(
    private readonly job: Job,
    private readonly plan: PhysicalPlan,
    private readonly env: LocalAwsEnvironment,
    readonly identity: Identity,
    private readonly o: LocalAwsCheckpointOptions,
    queues: QueueResolver,
    private readonly accounting: AwsAccounting,
  ) {
    const { clients } = env;
    const { table: controlTable, bucket } = localAwsControl(identity.runId, plan.job.name);
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
      inputLogTableName: o.dataTable,
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
    const control = localAwsControl(identity.runId, plan.job.name);
    await createStateTable(env.clients.dynamodb, control.table);
    await createBucket(env.clients.s3, control.bucket);
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

  /** Records the input log replays on this restore (all sources). */
  get replayedRecords(): number {
    return Object.values(this.replay).reduce((n, parts) => n + parts.reduce((m, r) => m + (r?.length ?? 0), 0), 0);
  }

  replayOf(source: string): readonly (readonly StreamRecord[])[] {
    return this.replay[source] ?? [];
  }

  /**
   * The input log after the checkpoint's positions, per source and partition. The records
   * were logged by the data paths of earlier generations (a resumed run re-logs what it
   * replays, but may die before it consumed all of it), so every earlier generation's
   * table is read and the runs merged by record index; a gap is an error, never skipped.
   */
  private async loggedInput(manifest: Manifest): Promise<Record<string, StreamRecord[][]>> {
    const byKey = new Map<string, Map<number, StreamRecord>>();
    for (let g = 0; g < this.identity.generation; g++) {
      const table = stateTableName(`${LocalAwsCheckpointing.dataRunId({ runId: this.identity.runId, generation: g })}-${this.plan.job.name}`);
      const log = new AwsInputLog(new DynamoDbTable(this.env.clients.dynamodb, table, this.accounting), this.store);
      for (const scope of loggingPartitions(this.plan)) {
        let runs;
        try {
          runs = await log.replay(scope, manifest.positions);
        } catch (e) {
          // A generation that died before it made its state table consumed nothing.
          if (e instanceof DynamoDbRequestError && e.awsName === 'ResourceNotFoundException') break;
          throw e;
        }
        for (const run of runs) {
          const got = byKey.get(run.source) ?? new Map<number, StreamRecord>();
          byKey.set(run.source, got);
          run.records.forEach((r, i) => got.set(run.from + i, r));
        }
      }
    }
    const out: Record<string, StreamRecord[][]> = {};
    for (const [key, got] of byKey) {
      const i = key.lastIndexOf('#');
      const from = manifest.positions[key] ?? 0;
      const records: StreamRecord[] = [];
      for (let n = from; got.has(n); n++) records.push(got.get(n)!);
      if (records.length !== got.size) {
        throw new InvariantError(`the input log of ${key} has a gap: records ${from}..${from + records.length - 1} are logged, then record ${from + records.length} is missing while ${got.size - records.length} later ones are logged`);
      }
      (out[key.slice(0, i)] ??= [])[Number(key.slice(i + 1))] = records;
    }
    return out;
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
      // Replay what the input log holds after the positions; new input starts after it.
      this.replay = await this.loggedInput(manifest);
      this.skip = positionsBySource(manifest);
      for (const [source, parts] of Object.entries(this.replay)) {
        const skip = (this.skip[source] ??= []);
        parts.forEach((records, p) => (skip[p] = (skip[p] ?? 0) + (records?.length ?? 0)));
      }
      this.restoredEpoch = manifest.epoch;
    } else if (this.o.start === 'resume') {
      this.o.log?.('no completed checkpoint on these servers (were they started by the crashed run?): the input is replayed from the start');
    }
    for (const s of this.o.sinks ?? []) await s.recover(this.restoredEpoch);
    this.loop.start(carry);
    // A savepoint request (savepoints.ts) is taken at the next open; the signal makes that now.
    process.on('SIGUSR2', this.nudge);
    writeFileAtomic(join(this.o.dir, LOCAL_AWS_PROCESS), JSON.stringify({ pid: process.pid }));
  }

  private readonly nudge = () => this.loop.nudge();

  private released(): void {
    process.off('SIGUSR2', this.nudge);
    rmSync(join(this.o.dir, LOCAL_AWS_PROCESS), { force: true });
  }

  /** After the last input was processed: one more checkpoint, so all output is committed. */
  async finish(): Promise<void> {
    await this.touch();
    await this.loop.finish();
    this.released();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
    this.released();
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
