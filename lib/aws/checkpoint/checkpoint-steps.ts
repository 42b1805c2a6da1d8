/**
 * The checkpoint coordinator's steps as Lambda task actions (one per state machine Task).
 * Each action loads the coordinator from its control items, makes one pure step
 * (lib/checkpoint/coordinator.ts), persists the result ahead of its decisions
 * (compare-and-set on the record's version: a second coordinator is fenced) and does
 * the decided I/O. Actions are idempotent, so Step Functions may retry any of them:
 *
 *   resume  take the lease; resume() from record + pointer + manifest + ack items (a
 *           crashed or failed step is repaired here); may re-open and inject at once
 *   open    renew the lease; continue as new after maxEpochs; openEpoch() with the
 *           activity item; idle -> release the lease and end (no cost at zero traffic)
 *   inject  send the in-flight epoch's barriers (deterministic dedup ids)
 *   decide  record the ack items that arrived; commit | abort (deadline) | pending
 *   commit  manifest, stats, pointer compare-and-set, onCommitted, sinks, truncation
 *   abort   abort the timed-out epoch (its number is burned), delete its snapshots
 *   probe   after a timers wait (idle, but event-time timers pending: checkpoint-timers.ts):
 *           take the lease, probe every source partition, open an epoch
 *
 * What open does at zero traffic, and the probe step, are checkpoint-idle.ts's.
 *
 * Savepoints (savepoints.ts): open turns a pending request item into a labelled, full
 * epoch at once; after it commits, the truncate follow-up (or the next open, for a
 * coordinator that died in between) copies it under `${job}/savepoints/<label>/`.
 *
 * The coordinator record and pointer live in the PointerStore (DynamoDbPointerStore:
 * `${job}#c`), manifests and stats in the BlobStore (S3), acks and activity in
 * checkpoint-acks.ts. Same persistence as lib/checkpoint/driver.ts, one step per call.
 */
import { type Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { fromBytes } from '../../checkpoint/codec.ts';
import { abort, createCoordinator, decide, onCommitted, openEpoch, recordAcks, requestSavepoint, toRecord } from '../../checkpoint/coordinator.ts';
import { CoordinatorFencedError, POINTER_NAME, RECORD_NAME, retainedEpochs, type InjectDecision, type TruncateDecision, writeCommit } from '../../checkpoint/driver.ts';
import { RestoreError } from '../../checkpoint/driver-errors.ts';
import { PlanMismatchError } from '../../checkpoint/errors.ts';
import { collectGarbage } from '../../checkpoint/garbage.ts';
import { buildManifest } from '../../checkpoint/manifest.ts';
import { participantKey, sourcePartitionKey, type CommitPointer, type CoordinatorRecord, type CoordinatorSetup, type CoordinatorState, type Decision, type Manifest, type StepResult } from '../../checkpoint/protocol.ts';
import { resume } from '../../checkpoint/resume.ts';
import type { BlobStore, PointerStore } from '../../checkpoint/storage.ts';
import { finishSavepoint, type PlanDescription, readSavepointRequest, savepointMetaKey } from '../restore/savepoints.ts';
import { type AckSource, type IdleContext, idleNext, inputSince, probeStep, type TimerWakeUp } from './checkpoint-idle.ts';
import { acquireLease, checkTaskInput, childName, CoordinatorNotStartedError, type Carry, type Limits, taskError, updateLease } from './checkpoint-task.ts';
import { COORDINATOR_METRICS } from '../handler-metrics.ts';

export type { AckSource } from './checkpoint-idle.ts';

export interface CheckpointStepsOptions {
  readonly setup: CoordinatorSetup;
  readonly pointers: PointerStore;
  /** Keys are the coordinator's (`${job}/manifests/...`): no prefix. */
  readonly blobs: BlobStore;
  readonly acks: AckSource;
  injectBarriers(d: InjectDecision): Promise<void>;
  /** Transactional sinks (two-phase): prepare before the pointer write, commit after. @default none */
  readonly sinks?: { prepare(epoch: number): Promise<void>; commit(epoch: number): Promise<void> };
  /** Release logged input no retained checkpoint needs (input-log.ts inputLogTruncation). @default nothing */
  truncateLogs?(d: TruncateDecision): Promise<void>;
  /** The plan as a savepoint records it; set: the steps take savepoints asked for by request item. @default none */
  readonly savepoints?: { readonly plan: PlanDescription };
  /**
   * Wake-ups for event-time timers at zero traffic (checkpoint-timers.ts): the wait's
   * bounds, and the probes into every source partition at `at`. @default none (idle ends)
   */
  readonly timerWakeUp?: TimerWakeUp;
  /** Powertools Metrics (namespace Sluice, service = the job): COORDINATOR_METRICS.epochsAborted per aborted epoch, which an alarm watches. @default none */
  readonly metrics?: Pick<Metrics, 'addMetric' | 'publishStoredMetrics'>;
  readonly now?: () => number;
  /** Fault injection for tests: called at named points inside actions. */
  readonly hook?: (point: string) => void | Promise<void>;
}

interface Loaded {
  state: CoordinatorState;
  version: number;
}

export class CheckpointSteps {
  private readonly now: () => number;
  /** The plan's setup with the epoch timeout the state machine passes (one source for its timing). */
  private setup: CoordinatorSetup;
  /** Savepoint manifests' source positions (immutable objects, read once per container). */
  private readonly savepointPositions = new Map<string, Manifest['positions']>();

  constructor(private readonly o: CheckpointStepsOptions) {
    this.now = o.now ?? Date.now;
    this.setup = o.setup;
  }

  /** The Lambda entry: validate, run the action, name errors for the state machine's Retry and Catch. */
  async handle(input: unknown): Promise<Carry> {
    try {
      const { action, execution, carry, limits } = checkTaskInput(input);
      this.setup = { ...this.o.setup, config: { ...this.o.setup.config, timeoutMs: limits.epochTimeoutMs } };
      const { error: _done, child: _child, wait: _wait, ...rest } = carry;
      const c: Carry = rest;
      switch (action) {
        case 'resume':
          return await this.resumeStep(execution, c, limits, carry.error !== undefined);
        case 'open':
          return await this.open(execution, c, limits);
        case 'inject':
          return await this.inject(c);
        case 'decide':
          return await this.decideStep(c);
        case 'commit':
          return await this.commit(execution, c);
        case 'abort':
          return await this.abortStep(c);
        case 'probe':
          return await this.probe(execution, c, limits);
      }
    } catch (e) {
      throw taskError(e);
    }
  }

  // ---- actions --------------------------------------------------------------------------

  async resumeStep(execution: string, c: Carry, limits: Limits, failed: boolean): Promise<Carry> {
    const failures = c.failures + (failed ? 1 : 0);
    if (failures > limits.maxFailures) return { ...c, failures, next: 'fail' };
    const now = this.now();
    const lease = await acquireLease(this.o.pointers, execution, c.parent, now, limits.leaseMs);
    if (!lease.ok) return { ...c, failures, next: 'end' };
    const rec = await this.o.pointers.read<CoordinatorRecord>(RECORD_NAME);
    const ptr = await this.o.pointers.read<CommitPointer>(POINTER_NAME);
    const pointer = ptr && ptr.value.epoch > 0 ? ptr.value : null;
    const manifest = pointer ? await this.readManifest(pointer.manifestKey) : null;
    const f = rec?.value.inFlight;
    const acks = f ? await this.o.acks.get(f.epoch, this.setup.participants) : [];
    const r = resume({ setup: this.setup, record: rec?.value ?? null, pointer, manifest, acks }, now);
    const s: Loaded = { state: r.state, version: rec?.version ?? 0 };
    await this.apply(s, r, true);
    // The resume aborts an epoch a crash interrupted (its barriers may never have left).
    this.countAborted((r.state.counters?.aborted ?? 0) - (rec?.value.counters?.aborted ?? 0));
    // An epoch the resume completed (its pointer had landed) covers the input before it opened.
    const done = s.state.lastCompleted;
    if (f && done?.epoch === f.epoch) await updateLease(this.o.pointers, execution, (l) => ({ ...l, coveredFrom: Math.max(l.coveredFrom, f.openedAt) }));
    const inFlight = s.state.inFlight;
    return { ...c, failures, next: inFlight ? 'decide' : 'wait', epoch: inFlight?.epoch ?? s.state.lastCompleted?.epoch ?? 0 };
  }

  async open(execution: string, c: Carry, limits: Limits, probed = false): Promise<Carry> {
    const now = this.now();
    const lease = await acquireLease(this.o.pointers, execution, c.parent, now, limits.leaseMs);
    if (!lease.ok) return { ...c, next: 'end' };
    if (c.n >= limits.maxEpochs) {
      return { ...c, next: 'continue', child: { name: childName(execution, c.g), input: { g: c.g + 1, n: 0, failures: c.failures, parent: execution, next: 'wait', epoch: c.epoch } } };
    }
    const s = await this.load();
    const f = s.state.inFlight;
    if (f) return { ...c, next: f.committing ? 'commit' : 'decide', epoch: f.epoch };
    const label = await this.savepointToOpen(s.state);
    let r: StepResult;
    if (label !== null) {
      r = requestSavepoint(s.state, now, label);
    } else {
      // Probes just went out: an epoch carries them through (and its acks say what waits next).
      const active = probed || (await inputSince(this.o.acks, lease.lease, limits));
      const touched = active ? this.setup.participants.flatMap((p) => p.sources.map((src) => sourcePartitionKey(src, p.partition))) : [];
      r = openEpoch(s.state, now, { touched });
    }
    const d = r.decisions[0];
    if (d?.kind === 'inject-barriers') {
      await this.persist(s, r.state);
      await this.o.hook?.('open:persisted');
      return { ...c, next: 'inject', epoch: d.epoch, n: c.n + 1 };
    }
    // Nothing to checkpoint: carry on, wait for event-time timers, or end (checkpoint-idle.ts).
    if (d?.kind === 'idle') return idleNext(this.idle(), execution, s.state, c, lease.lease, limits);
    return { ...c, next: 'wait' };
  }

  /** After a timers wait: probe every source partition, then open an epoch (another execution holding the lease: it ends). */
  probe(execution: string, c: Carry, limits: Limits): Promise<Carry> {
    return probeStep(this.idle(), execution, c, limits, this.now(), () => this.open(execution, c, limits, true));
  }

  async inject(c: Carry): Promise<Carry> {
    const s = await this.load();
    const f = s.state.inFlight;
    if (!f) return { ...c, next: 'wait' };
    if (f.committing) return { ...c, next: 'commit', epoch: f.epoch };
    await this.o.hook?.('inject:before-send');
    const sources = s.state.participants.flatMap((p) => p.sources.map((source) => ({ source, partition: p.partition, stage: p.stage })));
    await this.o.injectBarriers({ kind: 'inject-barriers', epoch: f.epoch, baseEpoch: f.baseEpoch, deadline: f.deadline, sources, fullSnapshot: f.fullSnapshot, savepoint: f.savepoint });
    return { ...c, next: 'decide', epoch: f.epoch };
  }

  async decideStep(c: Carry): Promise<Carry> {
    const now = this.now();
    const s = await this.load();
    const f = s.state.inFlight;
    if (!f) return { ...c, next: 'wait' };
    if (f.committing) return { ...c, next: 'commit', epoch: f.epoch };
    const missing = s.state.participants.filter((p) => !f.acks[participantKey(p)]);
    // A protocol-breaking ack counts as missing: the epoch times out and the next one asks again.
    const { state, decisions } = recordAcks(s.state, await this.o.acks.get(f.epoch, missing), now);
    const r = decide(state, now);
    const kind = r.decisions[0]?.kind;
    if (kind === 'abort') return { ...c, next: 'abort', epoch: f.epoch };
    // Persist the recorded acks (and, for a commit, the decision to commit) before acting on them.
    await this.apply(s, { state: r.state, decisions }, false);
    return { ...c, next: kind === 'commit' ? 'commit' : 'pending', epoch: f.epoch };
  }

  async commit(execution: string, c: Carry): Promise<Carry> {
    const s = await this.load();
    const f = s.state.inFlight;
    if (!f) {
      const last = s.state.lastCompleted;
      // A retry whose first attempt completed: repeat the idempotent follow-ups it may have cut short.
      if (last && last.epoch === c.epoch) await this.followUps(s.state, last.epoch);
      return { ...c, next: 'wait' };
    }
    if (!f.committing) return { ...c, next: 'decide', epoch: f.epoch };
    await this.apply(s, decide(s.state, this.now()), false);
    await updateLease(this.o.pointers, execution, (l) => ({ ...l, coveredFrom: Math.max(l.coveredFrom, f.openedAt) }));
    return { ...c, next: 'wait', failures: 0 };
  }

  async abortStep(c: Carry): Promise<Carry> {
    const s = await this.load();
    const f = s.state.inFlight;
    if (!f) return { ...c, next: 'wait' };
    if (f.committing) return { ...c, next: 'commit', epoch: f.epoch };
    if (this.now() < f.deadline) return { ...c, next: 'decide', epoch: f.epoch };
    await this.apply(s, abort(s.state, 'timeout'), false);
    this.countAborted(1);
    return { ...c, next: 'wait' };
  }

  // ---- persistence and decisions ---------------------------------------------------------

  /** The coordinator as persisted: the record, the last manifest by its key, a committing manifest rebuilt from the acks. */
  private async load(): Promise<Loaded> {
    const rec = await this.o.pointers.read<CoordinatorRecord>(RECORD_NAME);
    const setup = this.setup;
    if (!rec) throw new CoordinatorNotStartedError(setup.job);
    const r = rec.value;
    const base = createCoordinator(setup);
    if (r.job !== base.job) throw new PlanMismatchError('coordinator record job', JSON.stringify(base.job), JSON.stringify(r.job));
    if (r.fingerprint !== base.fingerprint) throw new PlanMismatchError('coordinator record plan fingerprint', base.fingerprint, String(r.fingerprint));
    const lastCompleted = r.lastCompleted ? { ...r.lastCompleted, manifest: await this.readManifest(r.lastCompleted.pointer.manifestKey) } : null;
    const { highestEpoch, lastOpenedAt, aborted, history, savepoints, pendingSavepoint, truncatedThrough, counters } = r;
    let state: CoordinatorState = { ...base, highestEpoch, lastOpenedAt, aborted, history, savepoints, pendingSavepoint, truncatedThrough, counters, lastCompleted, inFlight: null };
    if (r.inFlight) {
      const f = { ...r.inFlight, committing: null };
      state = { ...state, inFlight: { ...f, committing: r.inFlight.committing ? buildManifest(state, f) : null } };
    }
    return { state, version: rec.version };
  }

  private async readManifest(key: string): Promise<Manifest> {
    const bytes = await this.o.blobs.get(key);
    if (!bytes) throw new RestoreError(`manifest ${key}`, 'the object a commit pointer or the coordinator record names', 'no such object');
    return fromBytes<Manifest>(bytes);
  }

  private async persist(s: Loaded, state: CoordinatorState): Promise<void> {
    if (!(await this.o.pointers.compareAndSet(RECORD_NAME, s.version, toRecord(state)))) throw new CoordinatorFencedError(state.job);
    s.version++;
    s.state = state;
  }

  /** Write-ahead: persist the step's state (when changed, or forced), then execute its decisions in order. */
  private async apply(s: Loaded, r: StepResult, force: boolean): Promise<void> {
    if (r.state !== s.state || force) await this.persist(s, r.state);
    for (const d of r.decisions) await this.execute(s, d);
  }

  private async execute(s: Loaded, d: Decision): Promise<void> {
    switch (d.kind) {
      case 'inject-barriers':
        return this.o.injectBarriers(d);
      case 'commit':
        return this.executeCommit(s, d);
      case 'commit-sinks':
        return this.o.sinks?.commit(d.epoch);
      case 'truncate':
        await this.o.truncateLogs?.(await this.keepingSavepointInput(s.state, d));
        await this.finishSavepoints(s.state);
        return this.collectGarbage(s.state);
      case 'abort':
        if (d.discardSnapshots.length) await this.o.blobs.delete(d.discardSnapshots);
        return;
      case 'discard-snapshots':
        return this.o.blobs.delete(d.keys);
      case 'wait':
      case 'idle':
        return;
    }
  }

  private async executeCommit(s: Loaded, d: Extract<Decision, { kind: 'commit' }>): Promise<void> {
    const sinks = this.o.sinks;
    const pointer = (await writeCommit({ blobs: this.o.blobs, pointers: this.o.pointers, prepareSinks: sinks && ((e) => sinks.prepare(e)) }, s.state, d)).pointer.value;
    await this.o.hook?.('commit:pointer-written');
    await this.apply(s, onCommitted(s.state, d.epoch, pointer, this.now()), false);
  }

  private async followUps(state: CoordinatorState, epoch: number): Promise<void> {
    await this.o.sinks?.commit(epoch);
    await this.finishSavepoints(state);
    await this.collectGarbage(state);
  }

  /**
   * The label of a requested savepoint the coordinator has not taken yet, or null. A
   * request whose epoch already committed is finished here (its copy may have been cut
   * short), so a quiet job woken for it completes it without another epoch.
   */
  private async savepointToOpen(state: CoordinatorState): Promise<string | null> {
    if (!this.o.savepoints) return null;
    const req = await readSavepointRequest(this.o.pointers);
    if (req?.status !== 'pending') return null;
    if (state.savepoints.some((p) => p.label === req.label)) {
      await this.finishSavepoints(state);
      return null;
    }
    // One savepoint at a time: a pending one (an aborted attempt) is opened again by openEpoch.
    return state.pendingSavepoint && state.pendingSavepoint.label !== req.label ? null : req.label;
  }

  /**
   * The truncation, lowered to keep the logged input after every savepoint's positions: a
   * restore from a savepoint replays it (restore.ts), as a restore from a checkpoint does.
   */
  private async keepingSavepointInput(state: CoordinatorState, d: TruncateDecision): Promise<TruncateDecision> {
    if (!d.logs || !this.o.savepoints || !state.savepoints.length) return d;
    const below = { ...d.logs.belowPositions };
    for (const sp of state.savepoints) {
      let positions = this.savepointPositions.get(sp.manifestKey);
      if (!positions) {
        // The chain's manifest (pinned by collectGarbage), else the copy's meta.
        const body = (await this.o.blobs.get(sp.manifestKey)) ?? (await this.o.blobs.get(savepointMetaKey(state.job, sp.label)));
        if (!body) continue;
        positions = fromBytes<{ positions: Manifest['positions'] }>(body).positions;
        this.savepointPositions.set(sp.manifestKey, positions);
      }
      for (const [key, n] of Object.entries(positions)) below[key] = Math.min(below[key] ?? n, n);
    }
    return { ...d, logs: { ...d.logs, belowPositions: below } };
  }

  /** Copy a committed, requested savepoint out of the chain (idempotent). */
  private async finishSavepoints(state: CoordinatorState): Promise<void> {
    if (!this.o.savepoints) return;
    const req = await readSavepointRequest(this.o.pointers);
    if (req?.status !== 'pending') return;
    const sp = state.savepoints.find((p) => p.label === req.label);
    if (!sp) return;
    await this.o.hook?.('savepoint:before-copy');
    const manifest = await this.readManifest(sp.manifestKey);
    await finishSavepoint({ pointers: this.o.pointers, blobs: this.o.blobs, job: state.job, plan: this.o.savepoints.plan }, manifest, sp.manifestKey, { completedAt: sp.completedAt });
    await this.o.hook?.('savepoint:written');
  }

  /** Delete what no retained checkpoint or savepoint epoch needs (garbage.ts), with nothing in flight. */
  private async collectGarbage(s: CoordinatorState): Promise<void> {
    const keep = retainedEpochs(s, { savepoints: true });
    if (keep) await collectGarbage(this.o.blobs, s.job, keep);
  }

  private countAborted(n: number): void {
    if (n <= 0 || !this.o.metrics) return;
    this.o.metrics.addMetric(COORDINATOR_METRICS.epochsAborted, MetricUnit.Count, n);
    this.o.metrics.publishStoredMetrics();
  }

  private idle(): IdleContext {
    return { pointers: this.o.pointers, acks: this.o.acks, participants: this.setup.participants, timerWakeUp: this.o.timerWakeUp };
  }
}
