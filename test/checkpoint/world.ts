/**
 * A simulated driver and world for the pure coordinator: durable control items (record,
 * pointer), a blob store (manifests, snapshot objects), ack items written create-only by
 * partitions, and crash points between any two I/O steps. The driver follows the
 * contract in lib/checkpoint/coordinator.ts (write-ahead persistence, conditional pointer
 * write), so the tests can crash it anywhere and check what a resume does.
 */
import { expect } from 'vitest';
import {
  decide,
  onCommitted,
  openEpoch,
  recordAck,
  requestSavepoint,
  toRecord,
} from '../../lib/checkpoint/coordinator.ts';
import { resume } from '../../lib/checkpoint/resume.ts';
import {
  participantKey,
  sourcePartitionKey,
  type Ack,
  type CommitPointer,
  type CoordinatorRecord,
  type CoordinatorSetup,
  type CoordinatorState,
  type Decision,
  type Manifest,
  type Participant,
  type StepResult,
} from '../../lib/checkpoint/protocol.ts';

export class Crash extends Error {
  constructor(readonly label: string) {
    super(`crash at ${label}`);
  }
}

export const PARTICIPANTS: Participant[] = [
  { stage: 0, partition: 0, sources: ['in'] },
  { stage: 0, partition: 1, sources: ['in'] },
  { stage: 1, partition: 0, sources: [] },
  { stage: 1, partition: 1, sources: [] },
  { stage: 1, partition: 2, sources: [] },
];
export const SOURCE_PARTITIONS = ['in#0', 'in#1'];

export function setupOf(config: CoordinatorSetup['config'] = {}): CoordinatorSetup {
  return { job: 'job', fingerprint: 'plan-1', participants: PARTICIPANTS, config: { timeoutMs: 1000, maxChainLength: 3, ...config } };
}

type Barrier = Extract<Decision, { kind: 'inject-barriers' }> & { heads: Record<string, number> };

export class World {
  now = 1_000;
  readonly heads: Record<string, number> = Object.fromEntries(SOURCE_PARTITIONS.map((sp) => [sp, 0]));
  // Durable.
  record: CoordinatorRecord | null = null;
  pointer: CommitPointer | null = null;
  readonly blobs = new Map<string, Manifest>();
  readonly snapshots = new Set<string>();
  readonly ackItems = new Map<string, Ack>();
  // What happened, for the invariants.
  readonly pointerWrites: number[] = [];
  readonly committedManifests: Manifest[] = [];
  readonly sinkCommits: number[] = [];
  readonly aborts: number[] = [];
  /** Epochs aborted by an executed decision or by a persisted record. */
  readonly abortedEver = new Set<number>();
  readonly injected: number[] = [];
  readonly truncations: Extract<Decision, { kind: 'truncate' }>[] = [];
  readonly trace: string[] = [];
  readonly ignored: string[] = [];
  crashes = 0;
  // Volatile (lost on crash).
  state: CoordinatorState | null;
  private readonly barriers: Barrier[] = [];
  private readonly acked = new Map<string, number>();
  steps = 0;
  crashAt: number | null = null;

  constructor(readonly setup: CoordinatorSetup = setupOf()) {
    this.state = resume({ setup, record: null, pointer: null, manifest: null }, this.now).state;
  }

  /** A crash point: between two I/O steps of the driver. */
  point(label: string): void {
    this.steps++;
    this.trace.push(label);
    if (this.crashAt !== null && this.steps === this.crashAt) {
      this.crashAt = null;
      throw new Crash(label);
    }
  }

  private get s(): CoordinatorState {
    if (!this.state) throw new Error('coordinator is down');
    return this.state;
  }

  apply(r: StepResult): StepResult {
    if (r.state !== this.state) {
      this.record = JSON.parse(JSON.stringify(toRecord(r.state))) as CoordinatorRecord;
      for (const e of this.record.aborted) this.abortedEver.add(e);
      this.point(`persist(${describeState(r.state)})`);
    }
    this.state = r.state;
    if (r.ignored) this.ignored.push(r.ignored.reason);
    for (const d of r.decisions) this.execute(d);
    return r;
  }

  private execute(d: Decision): void {
    switch (d.kind) {
      case 'inject-barriers': {
        // At most one epoch in flight: every epoch injected before must be resolved.
        // (An abort persisted in the record counts even if the crash came before its decision ran.)
        const resolved = new Set([...this.abortedEver, ...this.pointerWrites]);
        for (const e of this.injected) expect(resolved.has(e), `epoch ${e} unresolved when ${d.epoch} opens`).toBe(true);
        this.injected.push(d.epoch);
        this.barriers.push({ ...d, heads: { ...this.heads } });
        this.point(`inject(${d.epoch})`);
        return;
      }
      case 'commit': {
        expect(this.abortedEver.has(d.epoch), `commit of aborted epoch ${d.epoch}`).toBe(false);
        const existing = this.blobs.get(d.manifestKey);
        // A rebuilt manifest must be the same object: blobs are never overwritten with other content.
        if (existing) expect(d.manifest).toEqual(existing);
        this.blobs.set(d.manifestKey, d.manifest);
        this.point(`manifest(${d.epoch})`);
        if (this.pointer?.epoch !== d.epoch) {
          expect(this.pointer?.epoch ?? 0, 'conditional pointer write').toBe(d.expectedPointerEpoch);
          this.pointer = { epoch: d.epoch, manifestKey: d.manifestKey, committedAt: this.now };
          this.pointerWrites.push(d.epoch);
          this.committedManifests.push(d.manifest);
          this.point(`pointer(${d.epoch})`);
        }
        this.apply(onCommitted(this.s, d.epoch, this.pointer, this.now));
        return;
      }
      case 'commit-sinks':
        this.sinkCommits.push(d.epoch);
        this.point(`sinks(${d.epoch})`);
        return;
      case 'truncate':
        this.truncations.push(d);
        this.point(`truncate(${d.epoch})`);
        return;
      case 'abort':
        this.aborts.push(d.epoch);
        this.abortedEver.add(d.epoch);
        for (const k of d.discardSnapshots) this.snapshots.delete(k);
        this.point(`abort(${d.epoch})`);
        return;
      case 'discard-snapshots':
        for (const k of d.keys) this.snapshots.delete(k);
        this.point(`discard(${d.epoch})`);
        return;
      case 'wait':
      case 'idle':
        return;
    }
  }

  input(sp: string, n: number): void {
    this.heads[sp] += n;
  }

  open(): StepResult {
    return this.apply(openEpoch(this.s, this.now, { heads: { ...this.heads } }));
  }

  decide(): StepResult {
    return this.apply(decide(this.s, this.now));
  }

  tick(ms: number): void {
    this.now += ms;
  }

  savepoint(label: string): StepResult {
    return this.apply(requestSavepoint(this.s, this.now, label));
  }

  /** The oldest barrier this participant has not acknowledged. */
  pendingBarrier(p: Participant): Barrier | undefined {
    const done = this.acked.get(participantKey(p)) ?? 0;
    return this.barriers.find((b) => b.epoch > done);
  }

  /** One partition handles its next barrier: writes its snapshot, its ack item, and tells the coordinator. */
  partitionAck(p: Participant): void {
    const b = this.pendingBarrier(p);
    if (!b) return;
    const key = participantKey(p);
    const full = b.fullSnapshot.includes(key);
    // Every third epoch a non-source partition has no change: no object, the chain stays.
    const unchanged = p.sources.length === 0 && !full && b.epoch % 3 === 0;
    const snapshot = unchanged ? null : { key: `snap/${key}/${b.epoch}`, bytes: 100, entities: 3, full };
    const ack: Ack = {
      epoch: b.epoch,
      stage: p.stage,
      partition: p.partition,
      baseEpoch: b.baseEpoch,
      snapshot,
      positions: Object.fromEntries(p.sources.map((s) => [sourcePartitionKey(s, p.partition), b.heads[sourcePartitionKey(s, p.partition)]])),
      alignedAt: this.now,
      ackedAt: this.now,
    };
    if (snapshot) {
      this.snapshots.add(snapshot.key);
      this.point(`snapshot(${b.epoch},${key})`);
    }
    const item = `${b.epoch}/${key}`;
    if (!this.ackItems.has(item)) this.ackItems.set(item, ack);
    this.acked.set(key, b.epoch);
    this.point(`ack-item(${b.epoch},${key})`);
    this.apply(recordAck(this.s, this.ackItems.get(item)!, this.now));
  }

  /** Re-sends a partition's last ack (a duplicate delivery, or a late one after its epoch closed). */
  resendAck(p: Participant): void {
    const done = this.acked.get(participantKey(p));
    if (done === undefined) return;
    const ack = this.ackItems.get(`${done}/${participantKey(p)}`);
    if (ack) this.apply(recordAck(this.s, ack, this.now));
  }

  crash(): void {
    this.state = null;
    this.crashes++;
  }

  /** A new coordinator reads the control items, the pointer's manifest and the ack items. */
  resume(): StepResult {
    this.state = null;
    const manifest = this.pointer ? this.blobs.get(this.pointer.manifestKey) ?? null : null;
    const r = resume({ setup: this.setup, record: this.record, pointer: this.pointer, manifest, acks: [...this.ackItems.values()] }, this.now);
    return this.apply(r);
  }

  /** Runs `op`; on a crash, resumes (repeatedly if the resume itself crashes). */
  guarded(op: () => void): void {
    try {
      op();
    } catch (e) {
      if (!(e instanceof Crash)) throw e;
      this.crash();
      this.guarded(() => void this.resume());
    }
  }

  /** Drives the protocol until every input is in a committed checkpoint and nothing is in flight. */
  quiesce(): void {
    for (let i = 0; i < 100; i++) {
      if (!this.state) this.guarded(() => void this.resume());
      for (const p of PARTICIPANTS) while (this.pendingBarrier(p)) this.guarded(() => this.partitionAck(p));
      this.guarded(() => void this.decide());
      if (!this.state!.inFlight) {
        let idle = false;
        this.guarded(() => {
          idle = this.open().decisions.some((d) => d.kind === 'idle');
        });
        if (idle && !this.state!.inFlight && !this.state!.pendingSavepoint) return;
      }
      this.tick(this.setup.config?.timeoutMs ?? 1000);
    }
    throw new Error('did not quiesce');
  }

  /** The properties every run must keep, whatever crashed where. */
  checkInvariants(): void {
    // Committed epochs strictly increase: none committed twice, none out of order.
    for (let i = 1; i < this.pointerWrites.length; i++) expect(this.pointerWrites[i]).toBeGreaterThan(this.pointerWrites[i - 1]);
    for (const e of this.pointerWrites) expect(this.abortedEver.has(e), `aborted epoch ${e} was committed`).toBe(false);
    for (const m of this.committedManifests) {
      expect(Object.keys(m.partitions).sort()).toEqual(PARTICIPANTS.map(participantKey).sort());
      expect(Object.keys(m.positions).sort()).toEqual(SOURCE_PARTITIONS);
      for (const part of Object.values(m.partitions)) {
        const epochs = part.chain.map((l) => l.epoch);
        // Chains hold only committed epochs' snapshots (deltas are relative to the last completed checkpoint).
        for (const e of epochs) expect(this.pointerWrites).toContain(e);
        expect([...epochs].sort((a, b) => a - b)).toEqual(epochs);
        expect(new Set(epochs).size).toBe(epochs.length);
        expect(part.chain.slice(1).every((l) => !l.full)).toBe(true);
      }
    }
    // The last committed manifest's objects still exist: nothing it needs was discarded.
    const last = this.pointer ? this.blobs.get(this.pointer.manifestKey)! : null;
    if (last) for (const part of Object.values(last.partitions)) for (const l of part.chain) expect(this.snapshots.has(l.key), l.key).toBe(true);
    // Every committed epoch got its transactional sinks committed.
    for (const e of this.pointerWrites) expect(this.sinkCommits).toContain(e);
    const s = this.state;
    if (s) {
      expect(s.lastCompleted?.epoch ?? 0).toBe(this.pointer?.epoch ?? 0);
      if (s.inFlight) expect(s.inFlight.epoch).toBe(s.highestEpoch);
      expect(s.highestEpoch).toBeGreaterThanOrEqual(s.lastCompleted?.epoch ?? 0);
    }
  }

  /** Nothing lost: the last checkpoint covers every input received. */
  checkComplete(): void {
    expect(this.state?.inFlight ?? null).toBeNull();
    const last = this.pointer ? this.blobs.get(this.pointer.manifestKey)! : null;
    const anyInput = Object.values(this.heads).some((h) => h > 0);
    if (anyInput) expect(last?.positions).toEqual(this.heads);
  }
}

function describeState(s: CoordinatorState): string {
  const f = s.inFlight;
  if (!f) return `last=${s.lastCompleted?.epoch ?? 0}`;
  return `e${f.epoch}:${Object.keys(f.acks).length}acks${f.committing ? ':committing' : ''}`;
}
