/**
 * Checkpoints for the embedded runtime: the local driver. The pure coordinator steps run
 * in the scheduler's loop (CheckpointDriver); the coordinator record and the commit
 * pointer are files replaced atomically, snapshots and manifests immutable files, all in
 * the checkpoint directory (default `.sluice/<job>/`):
 *
 *   blobs/<job>/{snapshots,manifests,checkpoints}/...   objects (DirectoryBlobStore)
 *   pointers/{coordinator,pointer}.json                   control items (FilePointerStore)
 *   log/<source>/...                                      logged input, barrier cursors
 *   sinks/<sink>/...                                      transactional sinks' staging
 *   dead-letters.jsonl                                    dead letters, one JSON line each (lib/checkpoint/dead-letter-store.ts)
 *   savepoints/<label>/{meta.json,blobs/}                 self-contained savepoints
 *
 * Start modes: 'fresh' clears the chain (savepoints stay); 'resume' continues from the
 * last completed checkpoint (the coordinator first finishes or aborts what was in
 * flight, then the runtime restores what the pointer names); { from } restores a
 * savepoint (a directory or label) or a retained checkpoint (an epoch) and starts a new
 * chain from it. Dead letters: a resume keeps those of epochs up to the restored
 * checkpoint (later ones are parked again by the replay), a restore of a retained
 * checkpoint likewise, a fresh run or a savepoint's restore starts with none.
 */
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Job } from '../api/stream.ts';
import { type Clock, systemClock } from '../api/types.ts';
import { fromBytes } from '../checkpoint/codec.ts';
import { type CheckpointStats, CheckpointDriver, type DriverPorts, type InjectDecision, RECORD_NAME } from '../checkpoint/driver.ts';
import { RestoreError } from '../checkpoint/driver-errors.ts';
import { participantsOf, planFingerprint } from '../checkpoint/fingerprint.ts';
import { DirectoryBlobStore, FilePointerStore, writeFileAtomic } from '../checkpoint/local-storage.ts';
import { snapshotKey } from '../checkpoint/snapshot.ts';
import { type CoordinatorRecord, type LogRetention, type Manifest, manifestObjectKey } from '../checkpoint/protocol.ts';
import type { BlobStore, PointerStore } from '../checkpoint/storage.ts';
import { describePlan, positionsBySource, readSavepoint, type SourceCursor, writeSavepoint } from '../checkpoint/savepoint.ts';
import { compile, type PhysicalPlan } from '../graph/compile.ts';
import type { BarrierAck } from '../transport/envelope.ts';
import type { TransactionalSink } from '../api/sinks.ts';
import { faultSite } from '../util/fault-sites.ts';
import { DEAD_LETTERS_FILE, DeadLetterStore } from '../checkpoint/dead-letter-store.ts';
import type { EmbeddedCheckpointHooks, RestorePlan } from './embedded-options.ts';
import { EmbeddedRuntime } from './embedded.ts';
import type { EmbeddedOptions } from './embedded-options.ts';
import { SourceLog, type SourceLogOptions } from './input-log.ts';
import { buildRestorePlan, fromSavepoint, type LoadedCheckpoint, loadSavepoint, savepointDir } from './restore.ts';

export interface CheckpointingOptions {
  readonly dir: string;
  /** Periodic epochs every intervalMs while input arrives; 0: only the drain epoch of a bounded run and savepoints. */
  readonly intervalMs: number;
  readonly timeoutMs?: number;
  /** Chain length after which a partition writes a full snapshot (default 10). */
  readonly maxChainLength?: number;
  readonly retention?: Partial<LogRetention>;
  /** Log the records of every source, or only of sources that cannot be read again (default). */
  readonly logInput?: 'auto' | 'always';
  /**
   * from: a savepoint directory, a savepoint label of `dir`, a retained checkpoint's epoch,
   * or a savepoint in any blob store (an S3 prefix the CLI resolved: `store`, `prefix`).
   */
  readonly start?: 'fresh' | 'resume' | { readonly from: string; readonly store?: { readonly blobs: BlobStore; readonly prefix: string } };
  /** Sinks that commit with checkpoints (opened here, before the coordinator resumes). */
  readonly sinks?: readonly TransactionalSink[];
  readonly clock?: Clock;
  /** fsync checkpoint files (default true); false keeps them atomic against a process crash only (tests, benches). */
  readonly durable?: boolean;
  /** Tests: runs before every checkpoint-storage write (blob put or delete, pointer write); may throw to simulate a crash. */
  readonly beforeWrite?: (op: string) => void;
  /** Tests: the input log's asynchronous fsync (what an accepted request waits for). */
  readonly logFsync?: SourceLogOptions['fsync'];
}

/** The dead-letter store's file in a checkpoint directory. */
export { DEAD_LETTERS_FILE };

export function defaultCheckpointDir(job: string): string {
  return join('.sluice', job.replace(/[^A-Za-z0-9._-]/g, '_'));
}

const SAVEPOINT_LABEL = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

export class LocalCheckpointing implements EmbeddedCheckpointHooks {
  readonly store: BlobStore;
  /** The store under `store` (which tests may wrap). */
  private readonly blobs: DirectoryBlobStore;
  readonly pointers: PointerStore;
  readonly plan: PhysicalPlan;
  driver!: CheckpointDriver;
  /** The epoch the run started from (0: none). */
  restoredEpoch = 0;
  /** --resume: from a completed checkpoint, or from the start (none completed: logged input replayed). */
  /** How a resume started: from a checkpoint, from the restore it was started from (none taken since), or from nothing. */
  resumed: 'checkpoint' | 'restore' | 'start' | undefined;
  /** Names the restore this run started from until its first checkpoint completes. */
  private originFile: string | undefined;
  /** The run's dead letters, in the directory's dead-letters.jsonl. */
  deadLetters!: DeadLetterStore;
  private runtime?: EmbeddedRuntime;
  private deferred: InjectDecision[] = [];
  private finalEpoch: number | null = null;
  private readonly logs = new Map<string, SourceLog>();
  private readonly clock: Clock;
  private readonly waiting = new Map<string, (s: CheckpointStats) => void>();

  private constructor(
    readonly job: Job,
    readonly options: CheckpointingOptions,
  ) {
    this.plan = compile(job.graph);
    const durable = { durable: options.durable ?? true };
    this.store = this.blobs = new DirectoryBlobStore(join(options.dir, 'blobs'), durable);
    this.pointers = new FilePointerStore(join(options.dir, 'pointers'), durable);
    // Every checkpoint-storage write crosses its fault site, then the test hook.
    const hook = options.beforeWrite;
    const [blobs, pointers] = [this.store, this.pointers];
    this.store = {
      ...bind(blobs),
      put: (k, b) => (faultSite(blobSite(k)), hook?.(`put ${k}`), blobs.put(k, b)),
      delete: (ks) => (faultSite('blob.delete'), hook?.('delete'), blobs.delete(ks)),
    };
    this.pointers = {
      read: (n) => pointers.read(n),
      compareAndSet: (n, v, x) => (faultSite(n === RECORD_NAME ? 'coordinator.record' : 'coordinator.pointer'), hook?.(`cas ${n}`), pointers.compareAndSet(n, v, x)),
    };
    this.clock = options.clock ?? systemClock;
  }

  /** Prepare a checkpointed run: coordinator resumed or started, restore plan read. Pass both to the EmbeddedRuntime. */
  static async open(job: Job, options: CheckpointingOptions): Promise<{ hooks: LocalCheckpointing; restore?: RestorePlan }> {
    const h = new LocalCheckpointing(job, options);
    const start = options.start ?? 'fresh';
    const dir = options.dir;
    mkdirSync(dir, { recursive: true });
    const previous = (await h.pointers.read<CoordinatorRecord>(RECORD_NAME))?.value.highestEpoch ?? 0;
    let restore: RestorePlan | undefined;
    let keep: string[] = [];
    let origin: RestoreOrigin | undefined;
    if (typeof start === 'object') {
      const loaded = start.store ? fromSavepoint(await readSavepoint(start.store.blobs, start.store.prefix, start.from), start.from) : await h.load(start.from);
      restore = await buildRestorePlan(job, h.plan, loaded);
      // A checkpoint of this directory keeps its log (replay), its sinks' output up to it and
      // its snapshots (until this run has a checkpoint of its own, a crash restores it again).
      keep = loaded.meta ? [] : ['log', 'sinks', 'blobs'];
      origin = { from: start.from, epoch: restore.epoch, savepoint: loaded.meta !== undefined, elsewhere: start.store !== undefined };
    }
    // Every refusal before anything is deleted: a refused restore leaves the directory as it was.
    if (start === 'resume' || keep.includes('sinks')) for (const s of options.sinks ?? []) s.check?.();
    if (start !== 'resume') for (const d of ['blobs', 'pointers', 'log', 'sinks']) if (!keep.includes(d)) rmSync(join(dir, d), { recursive: true, force: true });
    h.makeDirs();
    const originFile = join(dir, ORIGIN_FILE);
    if (origin) writeFileAtomic(originFile, JSON.stringify(origin), options.durable ?? true);
    else if (start === 'fresh') rmSync(originFile, { force: true });
    // What a resume may have to restore again (read before the driver collects garbage).
    const pending = start === 'resume' ? readOrigin(originFile) : origin;
    for (const s of options.sinks ?? []) await (s as { open?: () => unknown }).open?.();
    h.driver = await CheckpointDriver.start(h.setup(), h.ports(), h.clock.now(), {
      // Above the restored epoch too: restored partitions take barriers at or below it for stale ones.
      fresh: start === 'resume' ? undefined : { startAfterEpoch: Math.max(previous, restore?.epoch ?? 0) },
      onCompleted: (stats, manifest) => h.completed(stats, manifest),
      // Partitions and coordinator share one process: acks die with both.
      persistAcks: false,
      // A retained checkpoint restored from: its objects stay until this run has its own.
      ...(pending && !pending.savepoint ? { pinned: pending.epoch } : {}),
    });
    if (start === 'resume') {
      const last = h.driver.state.lastCompleted;
      const restoredFrom = last ? undefined : pending;
      if (last) restore = await buildRestorePlan(job, h.plan, h.loadedOf(last.manifest, h.store, `checkpoint ${last.epoch}`));
      else if (restoredFrom) {
        // Restored, then stopped before a checkpoint of its own: the same restore again.
        if (restoredFrom.elsewhere) throw new RestoreError('--resume', `a checkpoint of this run, which was restored from ${restoredFrom.from} and took none yet (run that restore again)`, 'none');
        origin = restoredFrom;
        restore = await buildRestorePlan(job, h.plan, await h.load(restoredFrom.from));
      }
      // No checkpoint completed: state starts empty, a file is read from its start, and what
      // the endpoint accepted is replayed from its log (it exists nowhere else); sinks drop
      // what they staged below.
      else restore = { epoch: 0, partitions: new Map(), sources: {}, sameTopology: true };
      h.resumed = last ? 'checkpoint' : restoredFrom ? 'restore' : 'start';
    }
    h.originFile = origin ? originFile : undefined;
    h.restoredEpoch = restore?.epoch ?? 0;
    const keepLetters = start === 'resume' || keep.length ? h.restoredEpoch : 'none';
    h.deadLetters = DeadLetterStore.open(join(dir, DEAD_LETTERS_FILE), { durable: options.durable ?? true, keepThroughEpoch: keepLetters });
    // A savepoint's output is not this directory's: its sinks start empty.
    const continuesOutput = origin ? !origin.savepoint : start === 'resume';
    for (const s of options.sinks ?? []) await s.recover(restore && continuesOutput ? restore.epoch : 0);
    return { hooks: h, restore };
  }

  /**
   * The directories every checkpoint writes to, made once when the job opens (a
   * checkpoint's writes then try the file first and make a directory only if it went).
   */
  private makeDirs(): void {
    const job = this.job.name;
    const snapshotDirs = participantsOf(this.plan).map((p) => {
      const key = snapshotKey(job, p.stage, p.partition, 0, new Uint8Array(0));
      return key.slice(0, key.lastIndexOf('/') + 1);
    });
    this.blobs.makeDirs([`${job}/manifests/`, `${job}/checkpoints/`, ...snapshotDirs]);
    for (const node of this.plan.job.nodes) if (node.spec.kind === 'source') new SourceLog(join(this.options.dir, 'log'), node.spec.source.name).makeDir();
  }

  private setup() {
    const o = this.options;
    return {
      job: this.job.name,
      fingerprint: planFingerprint(this.plan),
      participants: participantsOf(this.plan),
      config: {
        minIntervalMs: o.intervalMs,
        ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}),
        ...(o.maxChainLength !== undefined ? { maxChainLength: o.maxChainLength } : {}),
        ...(o.retention ? { retention: o.retention } : {}),
      },
    };
  }

  private ports(): DriverPorts {
    const sinks = () => this.options.sinks ?? [];
    return {
      blobs: this.store,
      pointers: this.pointers,
      injectBarriers: async (d) => {
        faultSite('coordinator.inject');
        this.deferred.push(d);
        this.flushInjections();
      },
      prepareSinks: async (e) => {
        for (const s of sinks()) {
          faultSite('sink.prepare');
          await s.prepare(e);
        }
      },
      commitSinks: async (e) => {
        for (const s of sinks()) {
          faultSite('sink.commit.before');
          await s.commit(e);
          faultSite('sink.commit.after');
        }
      },
      truncateLogs: async (d) => {
        if (!d.logs) return;
        faultSite('coordinator.truncate');
        for (const [source, below] of Object.entries(positionsBySource(d.logs.belowPositions))) {
          const log = this.logs.get(source) ?? new SourceLog(join(this.options.dir, 'log'), source);
          below.forEach((n, p) => log.truncateBelow(p, n));
          log.truncateBarriers(d.logs.throughEpoch);
        }
      },
    };
  }

  /** The runtime that receives barriers (call before its first step). */
  attach(runtime: EmbeddedRuntime): void {
    this.runtime = runtime;
  }

  private flushInjections(): void {
    if (!this.runtime || this.deferred.length === 0) return;
    for (const d of this.deferred.splice(0)) {
      this.runtime.injectBarrier({ epoch: d.epoch, baseEpoch: d.baseEpoch, full: d.fullSnapshot, savepoint: d.savepoint !== null });
    }
  }

  // ---- EmbeddedCheckpointHooks ----

  logFor(source: string, replayable: boolean): { log: SourceLog; logRecords: boolean } {
    const log = new SourceLog(join(this.options.dir, 'log'), source, this.options.durable ?? true, { fsync: this.options.logFsync });
    this.logs.set(source, log);
    return { log, logRecords: this.options.logInput === 'always' || !replayable };
  }

  onAck(ack: BarrierAck): void {
    this.driver.ack(ack);
  }

  /** A scheduler round's checkpoint step: synchronous (false) when there is nothing to decide. */
  tick(drained: boolean): boolean | Promise<boolean> {
    this.flushInjections();
    const d = this.driver;
    const now = this.clock.now();
    // The final epoch aborted (timed out): the output it was to commit needs another.
    if (this.finalEpoch !== null && d.aborted.includes(this.finalEpoch)) this.finalEpoch = null;
    if (drained && this.finalEpoch === null && !d.state.inFlight && this.runtime) {
      // The checkpoint after the last record: transactional output of a bounded run commits.
      return d.forceEpoch(now).then((epoch) => {
        this.finalEpoch = epoch;
        return true;
      });
    }
    const openNew = !drained && !d.state.inFlight && this.openingDue(now);
    const due = d.state.inFlight !== null && now >= d.state.inFlight.deadline;
    if (!openNew && !due && !this.hasAcks()) return false;
    return d.tick(now, { heads: this.runtime?.sourceHeads() ?? {} }, openNew);
  }

  settled(): boolean {
    const s = this.driver.state;
    return s.inFlight === null && s.pendingSavepoint === null && this.deferred.length === 0 && !this.hasAcks();
  }

  private hasAcks(): boolean {
    return this.driver.acksPending > 0;
  }

  nextWakeAt(): number {
    const d = this.driver;
    if (d.state.inFlight) return d.state.inFlight.deadline;
    if (d.state.pendingSavepoint) return this.clock.now();
    // Zero traffic, zero epochs (and no polling): new input wakes the scheduler anyway.
    if (this.options.intervalMs === 0 || !this.hasActivity()) return Number.POSITIVE_INFINITY;
    return d.nextWakeAt(this.options.intervalMs);
  }

  /**
   * nextWakeAt() <= now, without nextWakeAt's activity check (a walk over every source
   * partition's head) on the scheduler's every round: only once the interval is up.
   */
  private openingDue(now: number): boolean {
    const d = this.driver;
    if (d.state.inFlight) return now >= d.state.inFlight.deadline;
    if (d.state.pendingSavepoint) return true;
    if (this.options.intervalMs === 0 || now < d.nextWakeAt(this.options.intervalMs)) return false;
    return this.hasActivity();
  }

  /** Input arrived that the last completed checkpoint does not cover. */
  private hasActivity(): boolean {
    const covered = this.driver.state.lastCompleted?.manifest.positions ?? {};
    return Object.entries(this.runtime?.sourceHeads() ?? {}).some(([sp, n]) => n > (covered[sp] ?? 0));
  }

  finished(): boolean {
    return this.finalEpoch !== null && (this.driver.state.lastCompleted?.epoch ?? 0) >= this.finalEpoch;
  }

  /**
   * A checkpoint of everything accepted so far (after the epoch in flight, if any);
   * resolves with its epoch once committed. The scheduler loop must be running.
   */
  async checkpointNow(): Promise<number> {
    for (;;) {
      const epoch = await this.driver.forceEpoch(this.clock.now());
      if (epoch !== null) {
        this.runtime?.wakeUp();
        while ((this.driver.state.lastCompleted?.epoch ?? 0) < epoch) {
          if (!this.driver.state.inFlight) throw new RestoreError(`checkpoint ${epoch}`, 'to complete', `aborted (${this.driver.aborted.includes(epoch) ? 'timed out' : 'superseded'})`);
          await new Promise((r) => setTimeout(r, 2));
        }
        return epoch;
      }
      await new Promise((r) => setTimeout(r, 2));
    }
  }

  /**
   * The checkpoint of a graceful stop: everything accepted so far, unless the last
   * completed checkpoint covers it already; its epoch, or null when none was needed.
   */
  async finalCheckpoint(): Promise<number | null> {
    if (!this.hasActivity() && !this.driver.state.inFlight) return null;
    return this.checkpointNow();
  }

  // ---- savepoints ----

  /** Take a savepoint now (after the epoch in flight); resolves when it is written to savepoints/<label>. */
  savepoint(label: string = `sp-${new Date(this.clock.now()).toISOString().replace(/[:.]/g, '-')}`): Promise<{ label: string; dir: string; stats: CheckpointStats }> {
    if (!SAVEPOINT_LABEL.test(label)) throw new RestoreError('savepoint label', 'letters, digits, ".", "_" or "-"', JSON.stringify(label));
    const dir = savepointDir(this.options.dir, label);
    if (existsSync(dir)) throw new RestoreError('savepoint label', 'a label not used before', `"${label}" (${dir} exists)`);
    const done = new Promise<CheckpointStats>((resolve) => this.waiting.set(label, resolve));
    return this.driver.savepoint(label, this.clock.now()).then(async () => {
      this.runtime?.wakeUp();
      return { label, dir, stats: await done };
    });
  }

  private async completed(stats: CheckpointStats, manifest: Manifest): Promise<void> {
    // This run's own checkpoint: a resume no longer needs the restore it started from.
    if (this.originFile) rmSync(this.originFile, { force: true });
    this.originFile = undefined;
    if (!stats.savepoint) return;
    const target = new DirectoryBlobStore(savepointDir(this.options.dir, stats.savepoint), { durable: this.options.durable ?? true });
    const cursors: Record<string, SourceCursor> = {};
    for (const s of Object.keys(positionsBySource(manifest.positions))) {
      const entry = this.logs.get(s)?.barrierOf(stats.epoch);
      if (entry) cursors[s] = entry;
    }
    await writeSavepoint({ source: this.store, target, prefix: '' }, manifest, stats.manifestKey, { job: this.job.name, createdAt: stats.completedAt, takenOn: 'embedded', cursors, ...describePlan(this.plan) });
    this.waiting.get(stats.savepoint)?.(stats);
    this.waiting.delete(stats.savepoint);
  }

  // ---- restore sources ----

  /** `from`: a savepoint directory, a savepoint label of this directory, or a retained checkpoint's epoch. */
  private async load(from: string): Promise<LoadedCheckpoint> {
    if (/^\d+$/.test(from)) {
      const epoch = Number(from);
      const bytes = await this.store.get(manifestObjectKey(this.job.name, epoch));
      if (!bytes) throw new RestoreError('--from', `a retained checkpoint of job "${this.job.name}" in ${this.options.dir} (see sluice checkpoints)`, `epoch ${epoch}, which is not there`);
      return this.loadedOf(fromBytes<Manifest>(bytes), this.store, `checkpoint ${epoch}`);
    }
    const byLabel = savepointDir(this.options.dir, from);
    return loadSavepoint(existsSync(join(byLabel, 'meta.json')) ? byLabel : from);
  }

  private loadedOf(manifest: Manifest, blobs: BlobStore, what: string): LoadedCheckpoint {
    const sources: Record<string, { entry?: ReturnType<SourceLog['barrierOf']>; positions: number[] }> = {};
    for (const [s, positions] of Object.entries(positionsBySource(manifest.positions))) {
      sources[s] = { entry: new SourceLog(join(this.options.dir, 'log'), s).barrierOf(manifest.epoch), positions };
    }
    return { what, manifest, blobs, sources };
  }

  close(): void {
    for (const l of this.logs.values()) l.close();
    this.deadLetters?.close();
  }
}

/** `restored-from.json`: the restore a run started from, until its first checkpoint (a resume before it restores again). */
const ORIGIN_FILE = 'restored-from.json';

interface RestoreOrigin {
  readonly from: string;
  readonly epoch: number;
  /** A savepoint (its output is not this directory's), or a retained checkpoint of this directory. */
  readonly savepoint: boolean;
  /** Read from another store (S3): not restorable from here. */
  readonly elsewhere: boolean;
}

function readOrigin(path: string): RestoreOrigin | undefined {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as RestoreOrigin;
  } catch {
    return undefined;
  }
}

/** A blob's fault site by its key (lib/checkpoint: snapshots, manifests, checkpoint statistics). */
function blobSite(key: string): string {
  if (key.includes('/snapshots/')) return 'snapshot.write';
  if (key.includes('/checkpoints/')) return 'coordinator.stats';
  return 'coordinator.manifest';
}

function bind(b: BlobStore): BlobStore {
  return { put: b.put.bind(b), get: b.get.bind(b), list: b.list.bind(b), delete: b.delete.bind(b) };
}

/** An embedded runtime with local checkpoints: coordinator resumed, state restored, barriers wired. */
export async function openCheckpointedRuntime(
  job: Job,
  embedded: Omit<EmbeddedOptions, 'checkpoints' | 'restore'>,
  checkpoints: CheckpointingOptions,
): Promise<{ runtime: EmbeddedRuntime; checkpoints: LocalCheckpointing }> {
  const { hooks, restore } = await LocalCheckpointing.open(job, { clock: embedded.clock, ...checkpoints });
  const runtime = new EmbeddedRuntime(job, { ...embedded, checkpoints: hooks, restore });
  hooks.attach(runtime);
  return { runtime, checkpoints: hooks };
}
