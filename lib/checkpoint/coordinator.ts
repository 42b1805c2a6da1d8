/**
 * The checkpoint coordinator's decisions, as pure steps: `(state, input, now) =>
 * { state, decisions }`. No I/O, no clock, no randomness: the driver passes the time,
 * persists the returned state and executes the decisions. Arroyo and Flink's
 * CheckpointCoordinator keep the same split; here it lets one implementation run inside
 * Step Functions tasks on AWS and in an in-process loop locally.
 *
 * Driver contract (see resume.ts for the crash cases):
 * - Write-ahead: persist toRecord(result.state) before executing result.decisions.
 *   A step that changes nothing returns the same state object (skip the write).
 * - inject-barriers: send barrier `epoch` (with baseEpoch and the fullSnapshot list) to
 *   every listed source partition.
 * - commit: put the manifest at manifestKey, then write the pointer with the condition
 *   "pointer epoch = expectedPointerEpoch"; a failed condition whose pointer already
 *   names this epoch is success (a retry). Then call onCommitted.
 * - commit-sinks, truncate, discard-snapshots: idempotent; they may be repeated.
 * - idle: end the loop (no transitions at zero traffic); input arriving restarts it.
 * - Partitions write each ack item create-only (the first ack per epoch and partition
 *   wins everywhere) and compute their delta against the barrier's baseEpoch, the last
 *   completed checkpoint, never against an aborted attempt.
 * - Read the pointer strongly consistent; resume() refuses a pointer behind the record.
 */
import { SluiceError } from '../errors.ts';
import { CommitMismatchError, InvalidCoordinatorInputError, ManifestChainError, SavepointPendingError, UnknownParticipantError } from './errors.ts';
import { buildManifest, partitionsNeedingFull, retain } from './manifest.ts';
import {
  manifestObjectKey,
  participantKey,
  sourcePartitionKey,
  type AbortReason,
  type Ack,
  type Activity,
  type CommitPointer,
  type CoordinatorCounters,
  type CoordinatorRecord,
  type CoordinatorSetup,
  type CoordinatorState,
  type Decision,
  type IgnoreReason,
  type InFlightEpoch,
  type Manifest,
  type RejectedAck,
  type StepResult,
} from './protocol.ts';
import { checkAck, checkActivity, checkInt, checkPointer, checkSetup, checkTime, describe, sourcePartitionsOf } from './validate.ts';

const ZERO_COUNTERS: CoordinatorCounters = { opened: 0, completed: 0, aborted: 0, acks: 0, duplicateAcks: 0, ignoredAcks: 0, savepoints: 0 };

export function createCoordinator(setup: CoordinatorSetup): CoordinatorState {
  const { participants, config } = checkSetup(setup);
  return {
    format: 1,
    job: setup.job,
    fingerprint: setup.fingerprint,
    config,
    participants,
    highestEpoch: 0,
    lastOpenedAt: null,
    lastCompleted: null,
    inFlight: null,
    aborted: [],
    history: [],
    savepoints: [],
    pendingSavepoint: null,
    truncatedThrough: 0,
    counters: ZERO_COUNTERS,
  };
}

function bump(state: CoordinatorState, counter: keyof CoordinatorCounters, by = 1): CoordinatorCounters {
  return { ...state.counters, [counter]: state.counters[counter] + by };
}

/** Whether any source partition received input the last completed checkpoint does not cover. */
function hasActivity(state: CoordinatorState, activity: Activity): boolean {
  if ((activity.touched?.length ?? 0) > 0) return true;
  const committed = state.lastCompleted?.manifest.positions ?? {};
  return Object.entries(activity.heads ?? {}).some(([sp, head]) => head > (committed[sp] ?? 0));
}

/**
 * Opens epoch highestEpoch + 1 when none is in flight and either input arrived since the
 * last completed checkpoint or a savepoint is pending. At zero traffic it returns idle
 * and the same state: no epoch, no cost (DESIGN.md "Economics").
 */
export function openEpoch(state: CoordinatorState, now: number, activity: Activity = {}): StepResult {
  checkTime('now', now);
  checkActivity(activity, new Set(sourcePartitionsOf(state.participants)));
  if (state.inFlight) {
    return { state, decisions: [{ kind: 'wait', until: state.inFlight.deadline, epoch: state.inFlight.epoch, reason: 'epoch-in-flight' }] };
  }
  if (!state.pendingSavepoint) {
    if (!hasActivity(state, activity)) return { state, decisions: [{ kind: 'idle', reason: 'no-activity' }] };
    const earliest = state.lastOpenedAt === null ? now : state.lastOpenedAt + state.config.minIntervalMs;
    if (now < earliest) return { state, decisions: [{ kind: 'wait', until: earliest, epoch: null, reason: 'min-interval' }] };
  }
  return open(state, now);
}

/** Opens the next epoch unconditionally (callers decided it is due). */
export function open(state: CoordinatorState, now: number): StepResult {
  const epoch = state.highestEpoch + 1;
  const baseEpoch = state.lastCompleted?.epoch ?? 0;
  const savepoint = state.pendingSavepoint ? { label: state.pendingSavepoint.label } : null;
  // Savepoints are self-contained (portable across restores and rescaling), so every partition writes a full snapshot.
  const fullSnapshot = savepoint ? state.participants.map(participantKey) : partitionsNeedingFull(state);
  const inFlight: InFlightEpoch = { epoch, baseEpoch, openedAt: now, deadline: now + state.config.timeoutMs, savepoint, fullSnapshot, acks: {}, committing: null };
  const sources = state.participants.flatMap((p) => p.sources.map((source) => ({ source, partition: p.partition, stage: p.stage })));
  return {
    state: { ...state, highestEpoch: epoch, lastOpenedAt: now, inFlight, counters: bump(state, 'opened') },
    decisions: [{ kind: 'inject-barriers', epoch, baseEpoch, deadline: inFlight.deadline, sources, fullSnapshot, savepoint }],
  };
}

/**
 * Asks for a savepoint: the next epoch opens even without activity (now, when none is in
 * flight) and its manifest is marked with the label. Repeating the same label is
 * idempotent; another label while one is pending is a SavepointPendingError.
 */
export function requestSavepoint(state: CoordinatorState, now: number, label: string): StepResult {
  checkTime('now', now);
  if (typeof label !== 'string' || label.length === 0) throw new InvalidCoordinatorInputError('label', 'a non-empty string', describe(label));
  if (state.pendingSavepoint && state.pendingSavepoint.label !== label) throw new SavepointPendingError(state.pendingSavepoint.label, label);
  const next = state.pendingSavepoint ? state : { ...state, pendingSavepoint: { label, requestedAt: now } };
  return openEpoch(next, now);
}

function ignore(state: CoordinatorState, reason: IgnoreReason, detail: string, decisions: Decision[] = []): StepResult {
  const counter = reason === 'duplicate' ? 'duplicateAcks' : 'ignoredAcks';
  return { state: { ...state, counters: bump(state, counter) }, decisions, ignored: { reason, detail } };
}

/**
 * Records acks in order, as recordAck does one. A protocol-breaking ack (a non-retryable
 * SluiceError) counts as missing, so its epoch times out and the next one asks again: it is
 * returned in `rejected` rather than thrown, so one bad item cannot stop the coordinator.
 */
export function recordAcks(state: CoordinatorState, acks: readonly Ack[], now: number): StepResult & { readonly rejected: readonly RejectedAck[] } {
  const decisions: Decision[] = [];
  const rejected: RejectedAck[] = [];
  for (const ack of acks) {
    try {
      const r = recordAck(state, ack, now);
      state = r.state;
      decisions.push(...r.decisions);
    } catch (e) {
      if (!(e instanceof SluiceError) || e.retryable) throw e;
      rejected.push({ epoch: ack.epoch, stage: ack.stage, partition: ack.partition, code: e.code, message: e.message });
    }
  }
  return { state, decisions, rejected };
}

/**
 * Records one participant's ack of the in-flight epoch. Duplicates are idempotent (the
 * first ack wins); acks for completed, aborted or never-opened epochs are ignored with a
 * reason, and the snapshot of an ack no checkpoint will ever reference is returned for
 * deletion. Errors only for protocol breaks: unknown participant, wrong base epoch,
 * missing or regressing positions, a snapshot key already in the chain.
 */
export function recordAck(state: CoordinatorState, ack: Ack, now: number): StepResult {
  checkTime('now', now);
  checkAck(ack);
  const p = state.participants.find((x) => x.stage === ack.stage && x.partition === ack.partition);
  if (!p) throw new UnknownParticipantError(state.job, ack.stage, ack.partition, ack.epoch);
  const key = participantKey(p);
  const f = state.inFlight;
  const orphan = ack.snapshot ? [ack.snapshot.key] : [];
  const discard = (reason: IgnoreReason): Decision[] => (orphan.length ? [{ kind: 'discard-snapshots', epoch: ack.epoch, keys: orphan, reason }] : []);

  if (!f || ack.epoch !== f.epoch) {
    const last = state.lastCompleted;
    if (ack.epoch > state.highestEpoch) return ignore(state, 'epoch-never-opened', `epoch ${ack.epoch} > highest opened ${state.highestEpoch}`);
    // Epochs above the last completed one that are not in flight can only have been aborted.
    if (state.aborted.includes(ack.epoch) || ack.epoch > (last?.epoch ?? 0)) {
      return ignore(state, 'epoch-aborted', `epoch ${ack.epoch} was aborted`, discard('epoch-aborted'));
    }
    if (last && ack.epoch === last.epoch) {
      const referenced = last.manifest.partitions[key]?.chain.some((l) => l.key === ack.snapshot?.key) ?? false;
      return ignore(state, 'epoch-completed', `epoch ${ack.epoch} is already committed`, referenced ? [] : discard('epoch-completed'));
    }
    // Older epochs: completed or aborted long ago; their objects may be in a chain, so nothing is deleted.
    return ignore(state, 'epoch-superseded', `epoch ${ack.epoch} is older than the last completed ${last?.epoch ?? 0}`);
  }

  const existing = f.acks[key];
  if (existing) {
    const same = existing.snapshot?.key === ack.snapshot?.key;
    return ignore(state, 'duplicate', `participant ${key} already acked epoch ${f.epoch}`, same ? [] : discard('duplicate'));
  }
  if (ack.baseEpoch !== f.baseEpoch) throw new ManifestChainError(f.epoch, key, `a delta relative to base epoch ${f.baseEpoch}`, `base epoch ${ack.baseEpoch}`);
  const prev = state.lastCompleted?.manifest;
  const expected = p.sources.map((s) => sourcePartitionKey(s, p.partition)).sort();
  const got = Object.keys(ack.positions).sort();
  if (expected.join('\u0000') !== got.join('\u0000')) {
    throw new ManifestChainError(f.epoch, key, `positions for [${expected.join(', ')}]`, `positions for [${got.join(', ')}]`);
  }
  for (const sp of expected) {
    const before = prev?.positions[sp] ?? 0;
    if (ack.positions[sp] < before) throw new ManifestChainError(f.epoch, key, `position of ${sp} >= ${before} (last checkpoint)`, String(ack.positions[sp]));
  }
  if (ack.snapshot && prev?.partitions[key]?.chain.some((l) => l.key === ack.snapshot?.key)) {
    throw new ManifestChainError(f.epoch, key, 'a snapshot key not already in the chain', ack.snapshot.key);
  }
  const recorded = { baseEpoch: ack.baseEpoch, snapshot: ack.snapshot, positions: ack.positions, alignedAt: ack.alignedAt, ackedAt: ack.ackedAt, recordedAt: now };
  return {
    state: { ...state, inFlight: { ...f, acks: { ...f.acks, [key]: recorded } }, counters: bump(state, 'acks') },
    decisions: [],
  };
}

function allAcked(state: CoordinatorState, f: InFlightEpoch): boolean {
  return state.participants.every((p) => f.acks[participantKey(p)] !== undefined);
}

/**
 * The in-flight epoch's next move: commit once every participant acked (and keep
 * returning the same commit until onCommitted: once a commit may have landed the epoch
 * must never be aborted), abort after the deadline, otherwise wait for the deadline.
 */
export function decide(state: CoordinatorState, now: number): StepResult {
  checkTime('now', now);
  const f = state.inFlight;
  if (!f) return { state, decisions: [{ kind: 'idle', reason: 'no-epoch-in-flight' }] };
  if (f.committing) return { state, decisions: [commitDecision(state, f.committing)] };
  if (allAcked(state, f)) {
    const manifest = buildManifest(state, f);
    return { state: { ...state, inFlight: { ...f, committing: manifest } }, decisions: [commitDecision(state, manifest)] };
  }
  if (now >= f.deadline) return abort(state, 'timeout');
  return { state, decisions: [{ kind: 'wait', until: f.deadline, epoch: f.epoch, reason: 'acks-pending' }] };
}

function commitDecision(state: CoordinatorState, manifest: Manifest): Decision {
  return {
    kind: 'commit',
    epoch: manifest.epoch,
    manifest,
    manifestKey: manifestObjectKey(state.job, manifest.epoch),
    expectedPointerEpoch: state.lastCompleted?.epoch ?? 0,
  };
}

/** Clears the in-flight epoch and remembers `epoch` as aborted (a bounded list, for classifying late acks). */
export function markAborted(state: CoordinatorState, epoch: number): CoordinatorState {
  const aborted = [...state.aborted, epoch];
  return { ...state, inFlight: null, aborted: aborted.slice(aborted.length - Math.min(aborted.length, state.config.abortedLimit)), counters: bump(state, 'aborted') };
}

/** Aborts the in-flight epoch; its number is burned and the snapshots it received may be deleted. */
export function abort(state: CoordinatorState, reason: AbortReason): StepResult {
  const f = state.inFlight;
  if (!f) return { state, decisions: [] };
  if (f.committing) throw new CommitMismatchError(f.epoch, f.epoch, 'cannot abort an epoch whose commit was decided');
  const discardSnapshots = Object.values(f.acks).flatMap((a) => (a.snapshot ? [a.snapshot.key] : []));
  return {
    state: markAborted(state, f.epoch),
    decisions: [{ kind: 'abort', epoch: f.epoch, reason, discardSnapshots }],
  };
}

/**
 * The pointer write for `epoch` landed. Marks the checkpoint complete and returns the
 * follow-up: commit transactional sinks for it, truncate logs outside retention and
 * outboxes through it. Repeating it, or confirming an older epoch, is ignored.
 */
export function onCommitted(state: CoordinatorState, epoch: number, pointer: CommitPointer, now: number): StepResult {
  checkTime('now', now);
  checkInt('epoch', epoch, 1);
  checkPointer(pointer);
  if (pointer.epoch !== epoch) throw new InvalidCoordinatorInputError('pointer.epoch', `the committed epoch ${epoch}`, String(pointer.epoch));
  const last = state.lastCompleted?.epoch ?? 0;
  if (epoch === last) return { state, decisions: [], ignored: { reason: 'already-committed', detail: `epoch ${epoch} is the last completed` } };
  if (epoch < last) return { state, decisions: [], ignored: { reason: 'older-than-last-committed', detail: `epoch ${epoch} < last completed ${last}` } };
  const f = state.inFlight;
  if (!f || f.epoch !== epoch) throw new CommitMismatchError(epoch, f?.epoch ?? null, 'not the epoch in flight');
  if (!f.committing) throw new CommitMismatchError(epoch, f.epoch, 'decide() has not returned a commit for it');
  return complete(state, f.committing, pointer, now, now);
}

/** Shared by onCommitted and resume: the manifest is now the last completed checkpoint. */
export function complete(state: CoordinatorState, manifest: Manifest, pointer: CommitPointer, completedAt: number, now: number): StepResult {
  const { history, point } = retain(state.history, { epoch: manifest.epoch, completedAt, positions: manifest.positions }, state.config, now);
  const isSavepoint = manifest.savepoint !== null;
  const savepoints = isSavepoint
    ? [...state.savepoints, { epoch: manifest.epoch, label: manifest.savepoint!.label, manifestKey: pointer.manifestKey, completedAt }]
    : state.savepoints;
  const pendingSavepoint = isSavepoint && state.pendingSavepoint?.label === manifest.savepoint!.label ? null : state.pendingSavepoint;
  const logs = point.epoch > state.truncatedThrough ? { throughEpoch: point.epoch, belowPositions: point.positions } : null;
  const counters = { ...bump(state, 'completed'), savepoints: state.counters.savepoints + (isSavepoint ? 1 : 0) };
  return {
    state: {
      ...state,
      highestEpoch: Math.max(state.highestEpoch, manifest.epoch),
      lastCompleted: { epoch: manifest.epoch, pointer, completedAt, manifest },
      inFlight: state.inFlight && state.inFlight.epoch > manifest.epoch ? state.inFlight : null,
      history,
      savepoints,
      pendingSavepoint,
      truncatedThrough: Math.max(state.truncatedThrough, point.epoch),
      counters,
    },
    decisions: [
      { kind: 'commit-sinks', epoch: manifest.epoch },
      { kind: 'truncate', epoch: manifest.epoch, logs, outboxes: { throughEpoch: manifest.epoch } },
    ],
  };
}

/** The coordinator's control item: the state without manifests (re-read or rebuilt on resume). */
export function toRecord(state: CoordinatorState): CoordinatorRecord {
  const { lastCompleted, inFlight, ...rest } = state;
  return {
    ...rest,
    lastCompleted: lastCompleted ? { epoch: lastCompleted.epoch, pointer: lastCompleted.pointer, completedAt: lastCompleted.completedAt } : null,
    inFlight: inFlight ? { ...inFlight, committing: inFlight.committing !== null } : null,
  };
}
