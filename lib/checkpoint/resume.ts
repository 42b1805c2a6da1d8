/**
 * Rebuilding the coordinator after a crash, from what the driver persisted: its own
 * record (written ahead of every step's decisions), the commit pointer, the manifest the
 * pointer names and the ack items found. Flink's JobManager does the same from the
 * handles kept in ZooKeeper.
 *
 * The cases, by where the crash came:
 * - before the record of a newly opened epoch was written: the epoch never existed (no
 *   barrier was sent, since barriers follow the write), so its number is reused;
 * - with an epoch in flight and some acks missing: abort it and open the next one at
 *   once (the barriers may never have gone out, and waiting would only time out);
 * - with an epoch in flight and every ack in (record or ack items), pointer not written:
 *   commit it, with the manifest rebuilt byte for byte (deterministic from the acks);
 * - after the pointer write landed: recognised by the pointer's epoch = the in-flight
 *   epoch, completed without a second commit;
 * - nothing in flight: repeat the last commit's idempotent follow-ups (sink commit,
 *   truncation), which the crash may have cut short.
 * An ack item that breaks the protocol (unknown participant, wrong base) is reported in
 * `rejected` and treated as missing, so one bad item cannot keep the coordinator down.
 * The pointer is authoritative: one that is ahead of the record is adopted, and an
 * in-flight epoch it supersedes is aborted (without deleting snapshots a chain may use).
 */
import { abort, complete, createCoordinator, decide, markAborted, open, recordAcks } from './coordinator.ts';
import { InvalidCoordinatorInputError, ManifestChainError, PlanMismatchError } from './errors.ts';
import { participantKey, type Decision, type PersistedCoordinator, type RejectedAck, type StepResult } from './protocol.ts';
import { checkAck, checkInt, checkManifest, checkPointer, checkTime, describe } from './validate.ts';

export function resume(persisted: PersistedCoordinator, now: number): StepResult {
  checkTime('now', now);
  let state = createCoordinator(persisted.setup);
  const rec = persisted.record;
  const pointer = persisted.pointer ? checkPointer(persisted.pointer) : null;
  if (pointer && !persisted.manifest) {
    throw new InvalidCoordinatorInputError('manifest', `the manifest the pointer names (${pointer.manifestKey})`, describe(persisted.manifest));
  }
  const manifest = pointer
    ? checkManifest(persisted.manifest!, { job: state.job, fingerprint: state.fingerprint, epoch: pointer.epoch, participants: state.participants })
    : null;
  const acks = (persisted.acks ?? []).map(checkAck);
  if (rec) {
    if (rec.job !== state.job) throw new PlanMismatchError('coordinator record job', JSON.stringify(state.job), describe(rec.job));
    if (rec.fingerprint !== state.fingerprint) throw new PlanMismatchError('coordinator record plan fingerprint', state.fingerprint, describe(rec.fingerprint));
    checkInt('record.highestEpoch', rec.highestEpoch, 0);
  }
  const recLast = rec?.lastCompleted?.epoch ?? 0;
  const ptrEpoch = pointer?.epoch ?? 0;
  if (ptrEpoch < recLast) {
    // The record is written after the pointer, so a pointer behind it was rolled back or read stale.
    throw new ManifestChainError(recLast, null, `a commit pointer at epoch ${recLast} or later (read strongly consistent)`, pointer ? `epoch ${ptrEpoch}` : 'no pointer');
  }
  if (rec?.lastCompleted && pointer && ptrEpoch === recLast && rec.lastCompleted.pointer.manifestKey !== pointer.manifestKey) {
    throw new ManifestChainError(recLast, null, `pointer to ${rec.lastCompleted.pointer.manifestKey}`, `pointer to ${pointer.manifestKey}`);
  }
  state = {
    ...state,
    ...(rec
      ? {
          lastOpenedAt: rec.lastOpenedAt,
          aborted: rec.aborted,
          history: rec.history,
          savepoints: rec.savepoints,
          pendingSavepoint: rec.pendingSavepoint,
          truncatedThrough: rec.truncatedThrough,
          counters: rec.counters,
        }
      : {}),
    // Ack items of epochs the record does not know (a lost record) still burn their numbers.
    highestEpoch: Math.max(rec?.highestEpoch ?? 0, ptrEpoch, ...acks.map((a) => a.epoch)),
    lastCompleted: rec?.lastCompleted && ptrEpoch === recLast ? { ...rec.lastCompleted, manifest: manifest! } : null,
  };
  const f = rec?.inFlight ?? null;

  if (pointer && manifest && ptrEpoch > recLast) {
    const landed = complete(state, manifest, pointer, pointer.committedAt, now);
    if (!f || f.epoch === ptrEpoch || f.epoch <= recLast) return landed;
    return {
      state: markAborted(landed.state, f.epoch),
      decisions: [{ kind: 'abort', epoch: f.epoch, reason: 'superseded', discardSnapshots: [] }, ...landed.decisions],
    };
  }

  if (f && f.epoch > recLast) {
    state = { ...state, inFlight: { ...f, committing: null } };
    // The record's acks come first, so the first ack per participant wins as it did before the crash.
    // A malformed ack item must not keep the coordinator from starting: it counts as missing
    // (so the epoch is aborted and reopened) and is reported.
    const recorded = recordAcks(state, acks.filter((a) => a.epoch === f.epoch), now);
    state = recorded.state;
    const { decisions, rejected } = recorded;
    const missing = state.participants.filter((p) => !state.inFlight!.acks[participantKey(p)]);
    if (missing.length === 0) {
      const r = decide(state, now);
      return { state: r.state, decisions: [...decisions, ...r.decisions], ...(rejected.length ? { rejected } : {}) };
    }
    if (f.committing) {
      throw new ManifestChainError(f.epoch, participantKey(missing[0]), 'every ack of an epoch whose commit was decided', 'a missing ack');
    }
    const aborted = abort(state, 'coordinator-restarted');
    const reopened = open(aborted.state, now);
    return { state: reopened.state, decisions: [...decisions, ...aborted.decisions, ...reopened.decisions], ...(rejected.length ? { rejected } : {}) };
  }

  const last = state.lastCompleted;
  if (!last) return { state, decisions: [] };
  const point = state.history[0];
  return {
    state,
    decisions: [
      { kind: 'commit-sinks', epoch: last.epoch },
      {
        kind: 'truncate',
        epoch: last.epoch,
        logs: point && state.truncatedThrough > 0 ? { throughEpoch: point.epoch, belowPositions: point.positions } : null,
        outboxes: { throughEpoch: last.epoch },
      },
    ],
  };
}
