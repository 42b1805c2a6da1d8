/**
 * The pure checkpoint coordinator (lib/checkpoint/coordinator.ts) taking acks and commits:
 * recordAck (duplicates, late, aborted, unknown and chain-breaking acks), onCommitted,
 * and the durable record a coordinator resumes from.
 */
import { describe, expect, it } from 'vitest';
import { decide, onCommitted, openEpoch, recordAck, toRecord } from '../../lib/checkpoint/coordinator.ts';
import { CommitMismatchError, InvalidCoordinatorInputError, ManifestChainError, PlanMismatchError, UnknownParticipantError } from '../../lib/checkpoint/errors.ts';
import type { Ack, CoordinatorState } from '../../lib/checkpoint/protocol.ts';
import { resume } from '../../lib/checkpoint/resume.ts';
import { SluiceError } from '../../lib/errors.ts';
import { ackAll, ackOf, cycle, fresh, kinds, only, T0 } from './coordinator-steps.ts';
import { PARTICIPANTS, setupOf } from './world.ts';

describe('recordAck', () => {
  const opened = () => openEpoch(fresh(), T0, { touched: ['in#0'] }).state;

  it('records an ack with its snapshot handle and positions', () => {
    const s = opened();
    const r = recordAck(s, ackOf(s, PARTICIPANTS[0], { positions: { 'in#0': 7 } }), T0 + 5);
    expect(r.decisions).toEqual([]);
    expect(r.ignored).toBeUndefined();
    expect(r.state.inFlight!.acks['0/0']).toEqual({
      baseEpoch: 0,
      snapshot: { key: 'snap/0/0/1', bytes: 10, entities: 1, full: true },
      positions: { 'in#0': 7 },
      alignedAt: T0,
      ackedAt: T0,
      recordedAt: T0 + 5,
    });
    expect(r.state.counters.acks).toBe(1);
  });

  it('treats a duplicate as idempotent: the first ack wins, a second object is returned for deletion', () => {
    const s = recordAck(opened(), ackOf(opened(), PARTICIPANTS[2]), T0).state;
    const same = recordAck(s, ackOf(s, PARTICIPANTS[2]), T0 + 1);
    expect(same.ignored?.reason).toBe('duplicate');
    expect(same.decisions).toEqual([]);
    expect(same.state.inFlight!.acks).toEqual(s.inFlight!.acks);
    expect(same.state.counters.duplicateAcks).toBe(1);
    const other = recordAck(s, ackOf(s, PARTICIPANTS[2], { key: 'snap/1/0/1-retry' }), T0 + 1);
    expect(other.ignored?.reason).toBe('duplicate');
    expect(other.decisions).toEqual([{ kind: 'discard-snapshots', epoch: 1, keys: ['snap/1/0/1-retry'], reason: 'duplicate' }]);
    expect(other.state.inFlight!.acks['1/0'].snapshot?.key).toBe('snap/1/0/1');
  });

  it('ignores a late ack for a completed epoch, keeping an object the manifest references', () => {
    const { state } = cycle(fresh(), T0);
    const late = recordAck(state, ackOf(state, PARTICIPANTS[3], { epoch: 1, base: 0 }), T0 + 10);
    expect(late.ignored?.reason).toBe('epoch-completed');
    expect(late.decisions).toEqual([]);
    expect(late.state.counters.ignoredAcks).toBe(1);
    const stray = recordAck(state, ackOf(state, PARTICIPANTS[3], { epoch: 1, base: 0, key: 'snap/other' }), T0 + 10);
    expect(stray.decisions).toEqual([{ kind: 'discard-snapshots', epoch: 1, keys: ['snap/other'], reason: 'epoch-completed' }]);
  });

  it('ignores an ack for an aborted epoch and returns its snapshot for deletion', () => {
    const aborted = decide(opened(), T0 + 1000).state;
    const r = recordAck(aborted, ackOf(aborted, PARTICIPANTS[1], { epoch: 1, base: 0 }), T0 + 1001);
    expect(r.ignored?.reason).toBe('epoch-aborted');
    expect(r.decisions).toEqual([{ kind: 'discard-snapshots', epoch: 1, keys: ['snap/0/1/1'], reason: 'epoch-aborted' }]);
    // Also while the next epoch is in flight.
    const next = openEpoch(r.state, T0 + 1001, { touched: ['in#0'] }).state;
    expect(recordAck(next, ackOf(next, PARTICIPANTS[1], { epoch: 1, base: 0 }), T0 + 1002).ignored?.reason).toBe('epoch-aborted');
    expect(recordAck(next, ackOf(next, PARTICIPANTS[1], { epoch: 1, base: 0, key: null }), T0 + 1002).decisions).toEqual([]);
  });

  it('ignores an ack for an epoch never opened, and an ack for an epoch older than the last checkpoint', () => {
    const s = opened();
    const r = recordAck(s, ackOf(s, PARTICIPANTS[0], { epoch: 7 }), T0);
    expect(r.ignored?.reason).toBe('epoch-never-opened');
    expect(r.decisions).toEqual([]);
    expect(recordAck(fresh(), { ...ackOf(s, PARTICIPANTS[0]), epoch: 1 }, T0).ignored?.reason).toBe('epoch-never-opened');
    let c = cycle(fresh(), T0).state;
    c = cycle(c, T0 + 10).state;
    expect(recordAck(c, ackOf(c, PARTICIPANTS[2], { epoch: 1, base: 0 }), T0 + 20).ignored?.reason).toBe('epoch-superseded');
  });

  it('rejects an ack from an unknown participant with a typed, non-retryable error', () => {
    const s = opened();
    try {
      recordAck(s, { ...ackOf(s, PARTICIPANTS[2]), stage: 1, partition: 9 }, T0);
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(UnknownParticipantError);
      expect(e).toBeInstanceOf(SluiceError);
      expect(e).toMatchObject({ job: 'job', stage: 1, partition: 9, epoch: 1, retryable: false, code: 'CHECKPOINT_UNKNOWN_PARTICIPANT' });
    }
    // Even for an epoch that is not in flight: membership is static.
    expect(() => recordAck(fresh(), { ...ackOf(s, PARTICIPANTS[2]), stage: 5 }, T0)).toThrow(UnknownParticipantError);
  });

  it('rejects acks that would break the chain: wrong base, wrong or regressing positions, a repeated key', () => {
    const s = opened();
    expect(() => recordAck(s, ackOf(s, PARTICIPANTS[2], { base: 3 }), T0)).toThrow(ManifestChainError);
    expect(() => recordAck(s, ackOf(s, PARTICIPANTS[0], { positions: {} }), T0)).toThrow(ManifestChainError);
    expect(() => recordAck(s, ackOf(s, PARTICIPANTS[2], { positions: { 'in#0': 1 } }), T0)).toThrow(ManifestChainError);
    const { state } = cycle(fresh(), T0);
    const next = openEpoch(state, T0 + 10, { touched: ['in#0'] }).state;
    const committed = state.lastCompleted!.manifest.positions['in#0'];
    try {
      recordAck(next, ackOf(next, PARTICIPANTS[0], { positions: { 'in#0': committed - 1 } }), T0);
      expect.unreachable();
    } catch (e) {
      expect(e).toMatchObject({ epoch: 2, participant: '0/0', retryable: false });
    }
    expect(() => recordAck(next, ackOf(next, PARTICIPANTS[2], { key: 'snap/1/0/1' }), T0)).toThrow(ManifestChainError);
  });

  it('validates the shape of an ack', () => {
    const s = opened();
    const bad: Partial<Ack>[] = [
      { epoch: 0 },
      { epoch: 1.5 },
      { ackedAt: Number.NaN },
      { positions: { 'in#0': -1 } },
      { snapshot: { key: '', bytes: 1, entities: 1, full: false } },
      { snapshot: { key: 'k', bytes: -1, entities: 1, full: false } },
    ];
    for (const patch of bad) expect(() => recordAck(s, { ...ackOf(s, PARTICIPANTS[0]), ...patch }, T0), JSON.stringify(patch)).toThrow(InvalidCoordinatorInputError);
  });
});

describe('onCommitted', () => {
  function committing(): { s: CoordinatorState; key: string } {
    const o = openEpoch(fresh(), T0, { touched: ['in#0'] }).state;
    const d = decide(ackAll(o, T0), T0);
    return { s: d.state, key: only(d, 'commit').manifestKey };
  }

  it('completes the epoch and returns sink commit and truncation', () => {
    const { s, key } = committing();
    const pointer = { epoch: 1, manifestKey: key, committedAt: T0 + 1 };
    const r = onCommitted(s, 1, pointer, T0 + 2);
    expect(r.decisions).toEqual([
      { kind: 'commit-sinks', epoch: 1 },
      { kind: 'truncate', epoch: 1, logs: { throughEpoch: 1, belowPositions: { 'in#0': 5, 'in#1': 5 } }, outboxes: { throughEpoch: 1 } },
    ]);
    expect(r.state.inFlight).toBeNull();
    expect(r.state.lastCompleted).toMatchObject({ epoch: 1, pointer, completedAt: T0 + 2 });
    expect(r.state.counters.completed).toBe(1);
  });

  it('is idempotent, and ignores an older epoch', () => {
    const { s, key } = committing();
    const pointer = { epoch: 1, manifestKey: key, committedAt: T0 + 1 };
    const done = onCommitted(s, 1, pointer, T0 + 2).state;
    const again = onCommitted(done, 1, pointer, T0 + 3);
    expect(again.state).toBe(done);
    expect(again.decisions).toEqual([]);
    expect(again.ignored?.reason).toBe('already-committed');
    const later = cycle(done, T0 + 10).state;
    const old = onCommitted(later, 1, pointer, T0 + 20);
    expect(old.state).toBe(later);
    expect(old.ignored?.reason).toBe('older-than-last-committed');
  });

  it('refuses a commit the coordinator did not decide', () => {
    const o = openEpoch(fresh(), T0, { touched: ['in#0'] }).state;
    expect(() => onCommitted(o, 1, { epoch: 1, manifestKey: 'k', committedAt: T0 }, T0)).toThrow(CommitMismatchError);
    expect(() => onCommitted(o, 2, { epoch: 2, manifestKey: 'k', committedAt: T0 }, T0)).toThrow(CommitMismatchError);
    expect(() => onCommitted(fresh(), 1, { epoch: 1, manifestKey: 'k', committedAt: T0 }, T0)).toThrow(CommitMismatchError);
    const { s } = committing();
    expect(() => onCommitted(s, 1, { epoch: 2, manifestKey: 'k', committedAt: T0 }, T0)).toThrow(InvalidCoordinatorInputError);
    expect(() => onCommitted(s, 1, { epoch: 1, manifestKey: '', committedAt: T0 }, T0)).toThrow(InvalidCoordinatorInputError);
  });
});

describe('record and resume', () => {
  it('the record is plain JSON without manifests, and resuming from it restores the state', () => {
    let s = cycle(fresh(), T0).state;
    s = openEpoch(s, T0 + 10, { touched: ['in#0'] }).state;
    s = ackAll(s, T0 + 10, { positions: undefined }, PARTICIPANTS.slice(2));
    const record = JSON.parse(JSON.stringify(toRecord(s)));
    expect(JSON.stringify(record)).not.toContain('"chain"');
    const r = resume({ setup: setupOf(), record, pointer: s.lastCompleted!.pointer, manifest: s.lastCompleted!.manifest, acks: [] }, T0 + 20);
    // Acks were missing: epoch 2 is aborted and epoch 3 opened at once.
    expect(kinds(r)).toEqual(['abort', 'inject-barriers']);
    expect(r.state.lastCompleted).toEqual(s.lastCompleted);
    expect(r.state.inFlight!.epoch).toBe(3);
    expect(r.state.counters.opened).toBe(s.counters.opened + 1);
  });

  it('refuses a record or manifest of another plan, a pointer behind the record, a pointer without manifest', () => {
    const s = cycle(fresh(), T0).state;
    const record = toRecord(s);
    const base = { setup: setupOf(), record, pointer: s.lastCompleted!.pointer, manifest: s.lastCompleted!.manifest };
    expect(() => resume({ ...base, setup: { ...setupOf(), fingerprint: 'plan-2' } }, T0)).toThrow(PlanMismatchError);
    expect(() => resume({ ...base, record: null, manifest: { ...base.manifest, fingerprint: 'plan-2' } }, T0)).toThrow(PlanMismatchError);
    expect(() => resume({ ...base, pointer: null, manifest: null }, T0)).toThrow(ManifestChainError);
    expect(() => resume({ ...base, manifest: null }, T0)).toThrow(InvalidCoordinatorInputError);
    expect(() => resume({ ...base, manifest: { ...base.manifest, epoch: 9 } }, T0)).toThrow(ManifestChainError);
    const partial = { ...base.manifest, partitions: { '0/0': base.manifest.partitions['0/0'] } };
    expect(() => resume({ ...base, manifest: partial }, T0)).toThrow(ManifestChainError);
  });

  it('treats a protocol-breaking ack item as missing on resume, and reports it', () => {
    const s = openEpoch(fresh(), T0, { touched: ['in#0'] }).state;
    const good = PARTICIPANTS.slice(0, 4).map((p) => ackOf(s, p));
    const bad = { ...ackOf(s, PARTICIPANTS[4]), baseEpoch: 7 };
    const stranger = { ...ackOf(s, PARTICIPANTS[4]), stage: 9 };
    const r = resume({ setup: setupOf(), record: toRecord(s), pointer: null, manifest: null, acks: [...good, bad, stranger] }, T0 + 1);
    expect(kinds(r)).toEqual(['abort', 'inject-barriers']);
    expect(r.rejected?.map((x) => x.code)).toEqual(['CHECKPOINT_MANIFEST_CHAIN', 'CHECKPOINT_UNKNOWN_PARTICIPANT']);
    const ok = resume({ setup: setupOf(), record: toRecord(s), pointer: null, manifest: null, acks: [...good, ackOf(s, PARTICIPANTS[4])] }, T0 + 1);
    expect(kinds(ok)).toEqual(['commit']);
    expect(ok.rejected).toBeUndefined();
  });

  it('resumes from the pointer alone when the record is missing, burning epochs seen in ack items', () => {
    const s = cycle(fresh(), T0).state;
    const stray = { ...ackOf(s, PARTICIPANTS[0], { epoch: 4, base: 1, positions: { 'in#0': 1 } }) };
    const r = resume({ setup: setupOf(), record: null, pointer: s.lastCompleted!.pointer, manifest: s.lastCompleted!.manifest, acks: [stray] }, T0 + 5);
    expect(r.state.lastCompleted!.epoch).toBe(1);
    expect(r.state.highestEpoch).toBe(4);
    expect(kinds(r)).toEqual(['commit-sinks', 'truncate']);
    expect(only(openEpoch(r.state, T0 + 6, { touched: ['in#0'] }), 'inject-barriers').epoch).toBe(5);
  });
});
