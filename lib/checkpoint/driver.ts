/**
 * The checkpoint driver: runs the pure coordinator steps and does the I/O they decide,
 * following the contract in coordinator.ts. Storage goes through BlobStore and
 * PointerStore, and everything that touches the running job (barrier injection, sink
 * commits, log truncation) through DriverPorts, so one driver serves the in-process
 * loop (local.ts) and can back the Lambda tasks of a Step Functions driver, which would
 * call the same methods with its own ports, one step per task.
 *
 * Persistence: the coordinator record is written ahead of every decision that changes
 * it (compare-and-set on its version: a second coordinator on the same chain fails
 * instead of interleaving); the commit pointer is written by compare-and-set after the
 * manifest object and the sinks' prepare step, and is the commit point of an epoch.
 */
import { decide, onCommitted, open, openEpoch, recordAck, requestSavepoint, toRecord } from './coordinator.ts';
import { fromBytes, toBytes } from './codec.ts';
import { collectGarbage } from './garbage.ts';
import { PointerConflictError } from './driver-errors.ts';
import { resume } from './resume.ts';
import type { Ack, Activity, CommitPointer, CoordinatorRecord, CoordinatorSetup, CoordinatorState, Decision, Manifest, StepResult } from './protocol.ts';
import type { BlobStore, PointerStore, PointerValue } from './storage.ts';
import { SluiceError } from '../errors.ts';

export const RECORD_NAME = 'coordinator';
export const POINTER_NAME = 'pointer';

/** The coordinator record was written by someone else since we read it. */
export class CoordinatorFencedError extends SluiceError {
  readonly code = 'CHECKPOINT_COORDINATOR_FENCED';
  readonly retryable = false;
  constructor(readonly job: string) {
    super(`job "${job}": the coordinator record changed under this coordinator; another coordinator is running on the same checkpoints`);
  }
}

export type InjectDecision = Extract<Decision, { kind: 'inject-barriers' }>;
export type TruncateDecision = Extract<Decision, { kind: 'truncate' }>;

export interface DriverPorts {
  readonly blobs: BlobStore;
  readonly pointers: PointerStore;
  /** Send barrier `epoch` into every listed source partition. */
  injectBarriers(d: InjectDecision): Promise<void>;
  /** Make transactional output staged before barrier `epoch` durable (two-phase commit: prepare). */
  prepareSinks(epoch: number): Promise<void>;
  /** Publish transactional output staged before barrier `epoch` (idempotent). */
  commitSinks(epoch: number): Promise<void>;
  /** Release logged input no retained checkpoint needs (idempotent). */
  truncateLogs(d: TruncateDecision): Promise<void>;
}

/** What a completed checkpoint cost, kept beside its manifest for `sluice checkpoints`. */
export interface CheckpointStats {
  readonly epoch: number;
  readonly manifestKey: string;
  readonly openedAt: number;
  /** The last ack's time (deterministic: a retried commit rewrites the same object). */
  readonly completedAt: number;
  readonly durationMs: number;
  /** Bytes of the snapshot objects written for this epoch. */
  readonly bytes: number;
  /** Bytes a restore reads (every chain link). */
  readonly restoreBytes: number;
  /** Entities in this epoch's snapshot objects. */
  readonly entities: number;
  readonly fullSnapshots: number;
  readonly savepoint: string | null;
}

export function statsKey(job: string, epoch: number): string {
  return `${job}/checkpoints/${String(epoch).padStart(12, '0')}.json`;
}

/**
 * The commit point of a commit decision: the pointer moved from the epoch the decision
 * expects to its own by compare-and-set. A retry whose earlier write landed finds its own
 * epoch there and adopts it; any other pointer means another coordinator moved it.
 * `known`: the stored pointer as this writer last read or wrote it (null: none), when it
 * keeps track: then one compare-and-set, without a read first, is the common case; a
 * failed one falls back to reading what is stored.
 */
export async function writeCommitPointer(pointers: PointerStore, d: Extract<Decision, { kind: 'commit' }>, known?: PointerValue<CommitPointer> | null): Promise<PointerValue<CommitPointer>> {
  const wanted: CommitPointer = { epoch: d.epoch, manifestKey: d.manifestKey, committedAt: d.manifest.createdAt };
  if (known !== undefined && (known?.value.epoch ?? 0) === d.expectedPointerEpoch) {
    const version = known?.version ?? 0;
    if (await pointers.compareAndSet(POINTER_NAME, version, wanted)) return { version: version + 1, value: wanted };
  }
  const ptr = await pointers.read<CommitPointer>(POINTER_NAME);
  const at = ptr?.value.epoch ?? 0;
  if (at === d.expectedPointerEpoch) {
    if (await pointers.compareAndSet(POINTER_NAME, ptr?.version ?? 0, wanted)) return { version: (ptr?.version ?? 0) + 1, value: wanted };
    const again = await pointers.read<CommitPointer>(POINTER_NAME);
    if (again?.value.epoch !== d.epoch) throw new PointerConflictError(d.expectedPointerEpoch, again?.value.epoch ?? 0);
    return again;
  }
  if (at === d.epoch) return ptr!; // A retry whose earlier pointer write landed.
  throw new PointerConflictError(d.expectedPointerEpoch, at);
}

/** What a commit decision's write sequence needs: the stores and the sinks' prepare step. */
export interface CommitWritePorts {
  readonly blobs: BlobStore;
  readonly pointers: PointerStore;
  prepareSinks?(epoch: number): Promise<void>;
}

/**
 * The write sequence of a commit decision, one for every runtime: the manifest object, its
 * stats beside it, the sinks' prepare step, then the commit pointer by compare-and-set (the
 * commit point). Each write is idempotent, so a retried commit repeats it safely.
 */
export async function writeCommit(ports: CommitWritePorts, state: CoordinatorState, d: Extract<Decision, { kind: 'commit' }>, known?: PointerValue<CommitPointer> | null): Promise<{ stats: CheckpointStats; pointer: PointerValue<CommitPointer> }> {
  await ports.blobs.put(d.manifestKey, toBytes(d.manifest));
  const stats = checkpointStats(state, d.manifest, d.manifestKey);
  await ports.blobs.put(statsKey(state.job, d.epoch), toBytes(stats));
  await ports.prepareSinks?.(d.epoch);
  return { stats, pointer: await writeCommitPointer(ports.pointers, d, known) };
}

/**
 * The epochs whose objects garbage collection keeps: the retained history and the last
 * completed checkpoint, plus savepoint epochs where savepoints are copied out of the chain
 * lazily (AWS: until the copy is written, the chain's objects are its only copy). Null:
 * nothing may be collected now (an epoch in flight, or none completed yet).
 */
export function retainedEpochs(s: CoordinatorState, o: { savepoints: boolean }): Set<number> | null {
  if (s.inFlight || !s.lastCompleted) return null;
  return new Set([...s.history.map((h) => h.epoch), ...(o.savepoints ? s.savepoints.map((p) => p.epoch) : []), s.lastCompleted.epoch]);
}

export interface DriverEvents {
  onCompleted?(stats: CheckpointStats, manifest: Manifest): Promise<void> | void;
  onAborted?(epoch: number, reason: string): void;
  /**
   * Write the record after recording acks (default true). A driver whose partitions die
   * with it (the embedded runtime: one process) may skip it: acks lost in a crash are
   * lost with the partitions that sent them, and resume aborts the epoch either way. It
   * then skips the record write ahead of a commit too (one pointer-store write less per
   * checkpoint): a crash before the pointer write resumes to the epoch in flight without
   * its acks (aborted, as if they never came: its number stays burned, its objects are
   * garbage), a crash after it to the pointer, which resume adopts. Nor is the record
   * written when the epoch has committed: the completion goes into the next write (the
   * next epoch's opening), and until then the record lags the pointer by one epoch, the
   * state a crash right after the pointer write leaves, which resume completes from the
   * pointer as the commit did. A checkpoint then costs two pointer-store writes: the
   * opening (its number burned) and the commit point, as Flink's checkpoint counter and
   * completed-checkpoint store.
   */
  persistAcks?: boolean;
  /**
   * An epoch of this store whose objects garbage collection keeps until this driver
   * completes a checkpoint: the checkpoint a restore started from, which a crash before
   * then restores again.
   */
  pinned?: number;
}

export class CheckpointDriver {
  private recordVersion = 0;
  private readonly pendingAcks: Ack[] = [];
  /** Steps run one at a time: each reads the state the previous one left (a savepoint request must not race a tick). */
  private queue: Promise<unknown> = Promise.resolve();
  /** Completed checkpoints this process saw (for benches and tests). */
  readonly completed: CheckpointStats[] = [];
  readonly aborted: number[] = [];

  /**
   * When this driver started: the first periodic epoch of a chain opens one interval
   * after it, as Flink's first checkpoint waits for its interval, not at once (a job
   * that has just started has nothing worth a checkpoint yet).
   */
  private startedAt = 0;

  /**
   * Whether the store may hold objects no retained checkpoint needs, so that the next
   * collection must list it: at start (what a crashed predecessor left), after an abort
   * (snapshots of partitions that never acked), and when an epoch leaves retention.
   * Otherwise, as after a job's first checkpoint since a collection, there is nothing to find.
   */
  private mayHoldGarbage = true;
  /** Otherwise, the epochs whose objects the store may hold: those the last collection kept, and those committed since. */
  private readonly stored = new Set<number>();
  /** The commit pointer as this driver last read or wrote it (null: none): its commit writes it without a read first. */
  private pointer: PointerValue<CommitPointer> | null = null;
  /** DriverEvents.pinned, until this driver's first completed checkpoint. */
  private pinned: number | undefined;

  private constructor(
    public state: CoordinatorState,
    private readonly ports: DriverPorts,
    private readonly events: DriverEvents,
  ) {
    this.pinned = events.pinned;
  }

  /**
   * Resume (or start) the coordinator from what is persisted: record, pointer and the
   * manifest it names. `fresh`: start a new chain instead (the record and pointer are
   * replaced), numbering epochs above `startAfterEpoch` so that objects are never reused.
   */
  static async start(setup: CoordinatorSetup, ports: DriverPorts, now: number, options: DriverEvents & { fresh?: { startAfterEpoch: number } } = {}): Promise<CheckpointDriver> {
    const rec = await ports.pointers.read<CoordinatorRecord>(RECORD_NAME);
    const ptr = await ports.pointers.read<CommitPointer>(POINTER_NAME);
    if (options.fresh) {
      const r = resume({ setup, record: null, pointer: null, manifest: null }, now);
      const state = { ...r.state, highestEpoch: Math.max(options.fresh.startAfterEpoch, rec?.value.highestEpoch ?? 0, ptr?.value.epoch ?? 0) };
      const d = new CheckpointDriver(state, ports, options);
      d.startedAt = now;
      d.recordVersion = rec?.version ?? 0;
      d.pointer = ptr ?? null;
      // The new chain's pointer restarts: epoch 0 means none, so its version is reset by a tombstone value.
      if (ptr && ptr.value.epoch !== 0) {
        const tombstone: CommitPointer = { epoch: 0, manifestKey: '', committedAt: now };
        if (!(await ports.pointers.compareAndSet(POINTER_NAME, ptr.version, tombstone))) throw new CoordinatorFencedError(setup.job);
        d.pointer = { version: ptr.version + 1, value: tombstone };
      }
      await d.persist(state);
      await d.collectGarbage();
      return d;
    }
    const pointer = ptr && ptr.value.epoch > 0 ? ptr.value : null;
    let manifest: Manifest | null = null;
    if (pointer) {
      const bytes = await ports.blobs.get(pointer.manifestKey);
      manifest = bytes ? fromBytes<Manifest>(bytes) : null;
    }
    const r = resume({ setup, record: rec?.value ?? null, pointer, manifest }, now);
    const d = new CheckpointDriver(r.state, ports, options);
    d.startedAt = now;
    d.recordVersion = rec?.version ?? 0;
    d.pointer = ptr ?? null;
    await d.apply(r, now, true);
    await d.collectGarbage();
    return d;
  }

  get job(): string {
    return this.state.job;
  }

  get acksPending(): number {
    return this.pendingAcks.length;
  }

  /** A partition's ack: recorded at the next tick (several acks, one record write). */
  ack(ack: Ack): void {
    this.pendingAcks.push(ack);
  }

  /**
   * One round: record pending acks, then commit or abort the epoch in flight, or open the
   * next one when input arrived and the interval has passed (openEpoch decides). Returns
   * true when something changed.
   */
  tick(now: number, activity: Activity, openNew = true): Promise<boolean> {
    return this.exclusive(() => this.tickNow(now, activity, openNew));
  }

  private exclusive<T>(f: () => Promise<T>): Promise<T> {
    const run = this.queue.then(f, f);
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async tickNow(now: number, activity: Activity, openNew: boolean): Promise<boolean> {
    let changed = false;
    if (this.pendingAcks.length) {
      let state = this.state;
      const decisions: Decision[] = [];
      for (const ack of this.pendingAcks.splice(0)) {
        const r = recordAck(state, ack, now);
        state = r.state;
        decisions.push(...r.decisions);
      }
      if (this.events.persistAcks === false && decisions.length === 0) this.state = state;
      else await this.apply({ state, decisions }, now);
      changed = true;
    }
    if (this.state.inFlight) {
      const r = decide(this.state, now);
      if (this.events.persistAcks === false && r.decisions.length === 1 && r.decisions[0].kind === 'commit') {
        this.state = r.state;
        await this.execute(r.decisions[0], now);
        changed = true;
      } else if (r.decisions.some((d) => d.kind === 'commit' || d.kind === 'abort')) {
        await this.apply(r, now);
        changed = true;
      }
    }
    if (!this.state.inFlight && openNew) {
      const r = openEpoch(this.state, now, activity);
      if (r.state !== this.state) {
        await this.apply(r, now);
        changed = true;
      }
    }
    return changed;
  }

  /** Open an epoch now whatever the activity (draining a bounded run); its number, or null while one is in flight. */
  forceEpoch(now: number): Promise<number | null> {
    return this.exclusive(async () => {
      if (this.state.inFlight) return null;
      await this.apply(open(this.state, now), now);
      return this.state.highestEpoch;
    });
  }

  /** Ask for a savepoint: the next epoch (now, when none is in flight) is a labelled, full one. */
  savepoint(label: string, now: number): Promise<void> {
    return this.exclusive(() => this.apply(requestSavepoint(this.state, now, label), now));
  }

  /** When the driver next needs a tick without outside events: an epoch's deadline or the next opening. */
  nextWakeAt(intervalMs: number): number {
    const f = this.state.inFlight;
    if (f) return f.deadline;
    return (this.state.lastOpenedAt ?? this.startedAt) + intervalMs;
  }

  private async persist(state: CoordinatorState): Promise<void> {
    const ok = await this.ports.pointers.compareAndSet(RECORD_NAME, this.recordVersion, toRecord(state));
    if (!ok) throw new CoordinatorFencedError(state.job);
    this.recordVersion++;
  }

  /** Write-ahead: persist the new state, then execute its decisions in order. */
  private async apply(r: StepResult, now: number, force = false): Promise<void> {
    if (r.state !== this.state || force) await this.persist(r.state);
    this.state = r.state;
    for (const d of r.decisions) await this.execute(d, now);
  }

  private async execute(d: Decision, now: number): Promise<void> {
    switch (d.kind) {
      case 'inject-barriers':
        await this.ports.injectBarriers(d);
        return;
      case 'commit':
        await this.commit(d, now);
        return;
      case 'commit-sinks':
        await this.ports.commitSinks(d.epoch);
        return;
      case 'truncate':
        await this.ports.truncateLogs(d);
        await this.collectGarbage();
        return;
      case 'abort':
        this.aborted.push(d.epoch);
        this.mayHoldGarbage = true;
        if (d.discardSnapshots.length) await this.ports.blobs.delete(d.discardSnapshots);
        this.events.onAborted?.(d.epoch, d.reason);
        return;
      case 'discard-snapshots':
        await this.ports.blobs.delete(d.keys);
        return;
      case 'wait':
      case 'idle':
        return;
    }
  }

  private async commit(d: Extract<Decision, { kind: 'commit' }>, now: number): Promise<void> {
    const written = await writeCommit(this.ports, this.state, d, this.pointer);
    const stats = written.stats;
    this.pointer = written.pointer;
    const pointer = this.pointer.value;
    this.completed.push(stats);
    this.stored.add(d.epoch);
    if (this.pinned !== undefined) {
      this.pinned = undefined;
      this.mayHoldGarbage = true;
    }
    const done = onCommitted(this.state, d.epoch, pointer, now);
    if (this.events.persistAcks === false) {
      // Recorded with the next record write (see DriverEvents.persistAcks).
      this.state = done.state;
      for (const next of done.decisions) await this.execute(next, now);
    } else await this.apply(done, now);
    await this.events.onCompleted?.(stats, d.manifest);
  }

  /**
   * Delete what no retained checkpoint needs (garbage.ts), with no epoch in flight (a live
   * epoch's snapshots are in no manifest yet); without a completed checkpoint, nothing is
   * needed. The store is listed only when it may hold garbage (mayHoldGarbage).
   */
  private async collectGarbage(): Promise<void> {
    const s = this.state;
    if (s.inFlight) return;
    // A savepoint epoch is the last completed one until onCompleted copies it out of the chain: no extra pin.
    const keep = new Set(retainedEpochs(s, { savepoints: false }) ?? []);
    if (this.pinned !== undefined) keep.add(this.pinned);
    if (!this.mayHoldGarbage && [...this.stored].every((e) => keep.has(e))) return;
    await collectGarbage(this.ports.blobs, this.job, keep);
    this.mayHoldGarbage = false;
    this.stored.clear();
    for (const e of keep) this.stored.add(e);
  }
}

/** What one checkpoint wrote and what a restore from it reads (`sluice checkpoints`, metrics). */
export function checkpointStats(state: CoordinatorState, m: Manifest, manifestKey: string): CheckpointStats {
  let bytes = 0;
  let restoreBytes = 0;
  let entities = 0;
  let fullSnapshots = 0;
  for (const p of Object.values(m.partitions)) {
    for (const l of p.chain) {
      restoreBytes += l.bytes;
      if (l.epoch !== m.epoch) continue;
      bytes += l.bytes;
      entities += l.entities;
      if (l.full) fullSnapshots++;
    }
  }
  const openedAt = state.inFlight?.epoch === m.epoch ? state.inFlight.openedAt : m.createdAt;
  return { epoch: m.epoch, manifestKey, openedAt, completedAt: m.createdAt, durationMs: Math.max(0, m.createdAt - openedAt), bytes, restoreBytes, entities, fullSnapshots, savepoint: m.savepoint?.label ?? null };
}
