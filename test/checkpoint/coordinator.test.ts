import { describe, expect, it } from 'vitest';
import {
  createCoordinator,
  decide,
  onCommitted,
  openEpoch,
  recordAck,
  requestSavepoint,
  toRecord,
} from '../../lib/checkpoint/coordinator.ts';
import {
  CommitMismatchError,
  InvalidCoordinatorInputError,
  ManifestChainError,
  PlanMismatchError,
  SavepointPendingError,
  UnknownParticipantError,
} from '../../lib/checkpoint/errors.ts';
import { manifestObjectKey, participantKey, type Ack, type CoordinatorState, type Decision, type Participant, type StepResult } from '../../lib/checkpoint/protocol.ts';
import { resume } from '../../lib/checkpoint/resume.ts';
import { coordinatorCostPerMonth, maxEpochsPerExecution, minIntervalForBudget, STEP_FUNCTIONS_PRICE_PER_TRANSITION, transitionsPerEpoch } from '../../lib/checkpoint/cost.ts';
import { SluiceError } from '../../lib/errors.ts';
import { PARTICIPANTS, setupOf } from './world.ts';

const T0 = 10_000;

function fresh(config: Parameters<typeof setupOf>[0] = {}): CoordinatorState {
  return createCoordinator(setupOf(config));
}

function kinds(r: StepResult): string[] {
  return r.decisions.map((d) => d.kind);
}

function only<K extends Decision['kind']>(r: StepResult, kind: K): Extract<Decision, { kind: K }> {
  expect(kinds(r)).toEqual([kind]);
  return r.decisions[0] as Extract<Decision, { kind: K }>;
}

function ackOf(
  s: CoordinatorState,
  p: Participant,
  opts: { epoch?: number; key?: string | null; full?: boolean; positions?: Record<string, number>; at?: number; base?: number } = {},
): Ack {
  const epoch = opts.epoch ?? s.inFlight!.epoch;
  const key = opts.key === undefined ? `snap/${participantKey(p)}/${epoch}` : opts.key;
  return {
    epoch,
    stage: p.stage,
    partition: p.partition,
    baseEpoch: opts.base ?? s.inFlight?.baseEpoch ?? 0,
    snapshot: key === null ? null : { key, bytes: 10, entities: 1, full: opts.full ?? s.inFlight?.fullSnapshot.includes(participantKey(p)) ?? false },
    positions: opts.positions ?? Object.fromEntries(p.sources.map((src) => [`${src}#${p.partition}`, 5])),
    alignedAt: opts.at ?? T0,
    ackedAt: opts.at ?? T0,
  };
}

function ackAll(s: CoordinatorState, now: number, opts: Parameters<typeof ackOf>[2] = {}, ps: readonly Participant[] = PARTICIPANTS): CoordinatorState {
  for (const p of ps) s = recordAck(s, ackOf(s, p, opts), now).state;
  return s;
}

/** Opens (one new record on in#0), acks everything, commits: one whole epoch. */
function cycle(s: CoordinatorState, now: number, opts: Parameters<typeof ackOf>[2] = {}): { state: CoordinatorState; commit: StepResult } {
  const committed = s.lastCompleted?.manifest.positions ?? {};
  const heads = { 'in#0': (committed['in#0'] ?? 0) + 1, 'in#1': committed['in#1'] ?? 0 };
  s = openEpoch(s, now, { heads }).state;
  for (const p of PARTICIPANTS) {
    const positions = Object.fromEntries(p.sources.map((src) => [`${src}#${p.partition}`, heads[`${src}#${p.partition}` as keyof typeof heads]]));
    s = recordAck(s, ackOf(s, p, { ...opts, positions }), now).state;
  }
  const d = decide(s, now);
  const c = only(d, 'commit');
  const commit = onCommitted(d.state, c.epoch, { epoch: c.epoch, manifestKey: c.manifestKey, committedAt: now }, now);
  return { state: commit.state, commit };
}

describe('setup validation', () => {
  it('rejects malformed participants and config with the field, the expectation and what was received', () => {
    const cases: [Parameters<typeof createCoordinator>[0], string][] = [
      [{ ...setupOf(), participants: [] }, 'setup.participants'],
      [{ ...setupOf(), participants: [PARTICIPANTS[0], PARTICIPANTS[0]] }, 'setup.participants[1]'],
      [{ ...setupOf(), participants: [{ stage: 0, partition: 0, sources: [] }] }, 'setup.participants'],
      [{ ...setupOf(), participants: [{ stage: -1, partition: 0, sources: ['in'] }] }, 'setup.participants[0].stage'],
      [{ ...setupOf(), job: '' }, 'setup.job'],
      [setupOf({ timeoutMs: 0 }), 'config.timeoutMs'],
      [setupOf({ maxChainLength: 0 }), 'config.maxChainLength'],
      [setupOf({ retention: { epochs: 0 } }), 'config.retention.epochs'],
      [setupOf({ retention: { epochs: 10 }, historyLimit: 5 }), 'config.historyLimit'],
    ];
    for (const [setup, field] of cases) {
      const err = (() => {
        try {
          createCoordinator(setup);
        } catch (e) {
          return e;
        }
      })();
      expect(err, field).toBeInstanceOf(InvalidCoordinatorInputError);
      expect((err as InvalidCoordinatorInputError).field).toBe(field);
      expect((err as InvalidCoordinatorInputError).retryable).toBe(false);
    }
  });
});

describe('openEpoch', () => {
  it('at zero traffic returns idle and the same state object (nothing to persist, nothing billed)', () => {
    const s = fresh();
    for (const activity of [{}, { heads: { 'in#0': 0, 'in#1': 0 } }, { touched: [] }]) {
      const r = openEpoch(s, T0, activity);
      expect(r.state).toBe(s);
      expect(r.decisions).toEqual([{ kind: 'idle', reason: 'no-activity' }]);
    }
  });

  it('opens epoch 1 when a source partition received input, asking every partition for a full first snapshot', () => {
    const s = fresh();
    const r = openEpoch(s, T0, { heads: { 'in#1': 3 } });
    const d = only(r, 'inject-barriers');
    expect(d).toEqual({
      kind: 'inject-barriers',
      epoch: 1,
      baseEpoch: 0,
      deadline: T0 + 1000,
      sources: [
        { source: 'in', partition: 0, stage: 0 },
        { source: 'in', partition: 1, stage: 0 },
      ],
      fullSnapshot: ['0/0', '0/1', '1/0', '1/1', '1/2'],
      savepoint: null,
    });
    expect(r.state.inFlight).toMatchObject({ epoch: 1, openedAt: T0, deadline: T0 + 1000, acks: {}, committing: null });
    expect(r.state.highestEpoch).toBe(1);
    expect(r.state.counters.opened).toBe(1);
    expect(only(openEpoch(fresh(), T0, { touched: ['in#0'] }), 'inject-barriers').epoch).toBe(1);
  });

  it('compares heads with the last checkpoint: input already covered is no activity', () => {
    const { state } = cycle(fresh(), T0);
    const covered = state.lastCompleted!.manifest.positions;
    expect(kinds(openEpoch(state, T0 + 5000, { heads: covered }))).toEqual(['idle']);
    const r = openEpoch(state, T0 + 5000, { heads: { ...covered, 'in#1': covered['in#1'] + 1 } });
    expect(only(r, 'inject-barriers')).toMatchObject({ epoch: 2, baseEpoch: 1, fullSnapshot: [] });
  });

  it('waits while an epoch is in flight, and respects the minimum interval', () => {
    const s = openEpoch(fresh({ minIntervalMs: 500 }), T0, { touched: ['in#0'] }).state;
    expect(only(openEpoch(s, T0 + 1, { touched: ['in#0'] }), 'wait')).toEqual({ kind: 'wait', until: T0 + 1000, epoch: 1, reason: 'epoch-in-flight' });
    const aborted = decide(s, T0 + 1000).state;
    expect(only(openEpoch(aborted, T0 + 1000 - 600, { touched: ['in#0'] }), 'wait')).toMatchObject({ until: T0 + 500, reason: 'min-interval' });
    expect(only(openEpoch(aborted, T0 + 1000, { touched: ['in#0'] }), 'inject-barriers').epoch).toBe(2);
  });

  it('rejects activity for source partitions the plan does not have, and bad times', () => {
    expect(() => openEpoch(fresh(), T0, { heads: { 'other#0': 1 } })).toThrow(InvalidCoordinatorInputError);
    expect(() => openEpoch(fresh(), T0, { touched: ['in#9'] })).toThrow(InvalidCoordinatorInputError);
    expect(() => openEpoch(fresh(), T0, { heads: { 'in#0': -1 } })).toThrow(InvalidCoordinatorInputError);
    expect(() => openEpoch(fresh(), Number.NaN, {})).toThrow(InvalidCoordinatorInputError);
  });
});

describe('requestSavepoint', () => {
  it('forces an epoch without activity, with full snapshots, and marks its manifest', () => {
    const r = requestSavepoint(fresh(), T0, 'before-upgrade');
    const d = only(r, 'inject-barriers');
    expect(d.savepoint).toEqual({ label: 'before-upgrade' });
    expect(d.fullSnapshot).toHaveLength(PARTICIPANTS.length);
    let s = ackAll(r.state, T0 + 1, { full: true });
    const c = only(decide(s, T0 + 2), 'commit');
    expect(c.manifest.savepoint).toEqual({ label: 'before-upgrade' });
    s = decide(s, T0 + 2).state;
    const done = onCommitted(s, 1, { epoch: 1, manifestKey: c.manifestKey, committedAt: T0 + 3 }, T0 + 3).state;
    expect(done.pendingSavepoint).toBeNull();
    expect(done.savepoints).toEqual([{ epoch: 1, label: 'before-upgrade', manifestKey: c.manifestKey, completedAt: T0 + 3 }]);
    expect(done.counters.savepoints).toBe(1);
    // Idle again afterwards.
    expect(kinds(openEpoch(done, T0 + 10_000, {}))).toEqual(['idle']);
  });

  it('waits for the epoch in flight, then opens the savepoint epoch without activity and bypassing the interval', () => {
    let s = openEpoch(fresh({ minIntervalMs: 60_000 }), T0, { touched: ['in#0'] }).state;
    const r = requestSavepoint(s, T0 + 1, 'sp');
    expect(only(r, 'wait').reason).toBe('epoch-in-flight');
    s = r.state;
    s = ackAll(s, T0 + 2);
    const d = decide(s, T0 + 2);
    s = onCommitted(d.state, 1, { epoch: 1, manifestKey: 'k1', committedAt: T0 + 3 }, T0 + 3).state;
    expect(s.pendingSavepoint).toEqual({ label: 'sp', requestedAt: T0 + 1 });
    const next = only(openEpoch(s, T0 + 4, {}), 'inject-barriers');
    expect(next).toMatchObject({ epoch: 2, savepoint: { label: 'sp' } });
  });

  it('is idempotent for the same label, refuses another one while pending (retryable), and survives an abort', () => {
    const r = requestSavepoint(fresh(), T0, 'a');
    expect(requestSavepoint(r.state, T0 + 1, 'a').state.pendingSavepoint).toEqual({ label: 'a', requestedAt: T0 });
    try {
      requestSavepoint(r.state, T0 + 1, 'b');
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(SavepointPendingError);
      expect(e).toMatchObject({ pendingLabel: 'a', requestedLabel: 'b', retryable: true });
    }
    const aborted = decide(r.state, T0 + 1000);
    expect(kinds(aborted)).toEqual(['abort']);
    expect(only(openEpoch(aborted.state, T0 + 1001, {}), 'inject-barriers')).toMatchObject({ epoch: 2, savepoint: { label: 'a' } });
    expect(() => requestSavepoint(fresh(), T0, '')).toThrow(InvalidCoordinatorInputError);
  });
});

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

describe('decide', () => {
  it('is idle with nothing in flight and waits for the deadline while acks are missing', () => {
    const s = fresh();
    const idle = decide(s, T0);
    expect(idle.state).toBe(s);
    expect(idle.decisions).toEqual([{ kind: 'idle', reason: 'no-epoch-in-flight' }]);
    const o = openEpoch(s, T0, { touched: ['in#0'] }).state;
    const part = ackAll(o, T0, {}, PARTICIPANTS.slice(0, 4));
    expect(only(decide(part, T0 + 999), 'wait')).toEqual({ kind: 'wait', until: T0 + 1000, epoch: 1, reason: 'acks-pending' });
  });

  it('commits when every participant acked, with a deterministic manifest covering all of them', () => {
    const o = openEpoch(fresh(), T0, { touched: ['in#0'] }).state;
    let s = o;
    PARTICIPANTS.forEach((p, i) => {
      s = recordAck(s, ackOf(s, p, { at: T0 + i * 10, positions: p.sources.length ? { [`in#${p.partition}`]: 4 + p.partition } : {} }), T0 + 100 + i).state;
    });
    const r = decide(s, T0 + 200);
    const c = only(r, 'commit');
    expect(c).toMatchObject({ epoch: 1, manifestKey: manifestObjectKey('job', 1), expectedPointerEpoch: 0 });
    expect(c.manifest).toMatchObject({ format: 1, job: 'job', fingerprint: 'plan-1', epoch: 1, baseEpoch: 0, createdAt: T0 + 40, savepoint: null });
    expect(c.manifest.positions).toEqual({ 'in#0': 4, 'in#1': 5 });
    expect(Object.keys(c.manifest.partitions)).toEqual(PARTICIPANTS.map(participantKey));
    expect(c.manifest.partitions['1/2']).toEqual({ stage: 1, partition: 2, chain: [{ epoch: 1, key: 'snap/1/2/1', bytes: 10, entities: 1, full: true }] });
    // Same commit again, even past the deadline: a decided commit is never aborted.
    expect(decide(r.state, T0 + 1_000_000).decisions).toEqual(r.decisions);
    expect(decide(r.state, T0 + 1_000_000).state).toBe(r.state);
    // Recorded time does not enter the manifest: rebuilding it gives the same bytes.
    const s2 = PARTICIPANTS.reduce((acc, p, i) => recordAck(acc, ackOf(acc, p, { at: T0 + i * 10, positions: p.sources.length ? { [`in#${p.partition}`]: 4 + p.partition } : {} }), T0 + 5000).state, o);
    expect(JSON.stringify(only(decide(s2, T0 + 1), 'commit').manifest)).toBe(JSON.stringify(c.manifest));
  });

  it('aborts a timed-out epoch, burns its number, and the next epoch opens on the same base', () => {
    let s = openEpoch(fresh(), T0, { touched: ['in#0'] }).state;
    s = ackAll(s, T0, {}, PARTICIPANTS.slice(0, 2));
    const r = decide(s, T0 + 1000);
    expect(only(r, 'abort')).toEqual({ kind: 'abort', epoch: 1, reason: 'timeout', discardSnapshots: ['snap/0/0/1', 'snap/0/1/1'] });
    expect(r.state.inFlight).toBeNull();
    expect(r.state.aborted).toEqual([1]);
    expect(r.state.counters.aborted).toBe(1);
    const next = openEpoch(r.state, T0 + 1000, { heads: { 'in#0': 2 } });
    expect(only(next, 'inject-barriers')).toMatchObject({ epoch: 2, baseEpoch: 0 });
    const done = cycle(r.state, T0 + 2000).state;
    expect(done.lastCompleted!.epoch).toBe(2);
    expect(Object.values(done.lastCompleted!.manifest.partitions).every((p) => p.chain.every((l) => l.epoch === 2))).toBe(true);
  });

  it('keeps the bounded list of aborted epochs', () => {
    let s = fresh({ abortedLimit: 2 });
    for (let i = 0; i < 4; i++) s = decide(openEpoch(s, T0 + i * 2000, { touched: ['in#0'] }).state, T0 + i * 2000 + 1000).state;
    expect(s.aborted).toEqual([3, 4]);
    expect(s.counters.aborted).toBe(4);
    // An epoch above the last completed one that is not in flight was aborted, listed or not.
    const none = decide(openEpoch(fresh({ abortedLimit: 0 }), T0, { touched: ['in#0'] }).state, T0 + 1000).state;
    expect(none.aborted).toEqual([]);
    expect(recordAck(none, ackOf(none, PARTICIPANTS[2], { epoch: 1, base: 0 }), T0 + 1001).ignored?.reason).toBe('epoch-aborted');
  });
});

describe('snapshot chains and compaction', () => {
  it('appends deltas, keeps the chain on "no change", and asks for a full snapshot when a chain reaches maxChainLength', () => {
    let s = cycle(fresh({ maxChainLength: 3 }), T0).state;
    s = cycle(s, T0 + 10).state;
    expect(s.lastCompleted!.manifest.partitions['1/0'].chain.map((l) => l.epoch)).toEqual([1, 2]);
    // Epoch 3: partition 1/0 reports no change, the others add a delta.
    s = openEpoch(s, T0 + 20, { touched: ['in#0'] }).state;
    const positions = s.lastCompleted!.manifest.positions;
    for (const p of PARTICIPANTS) s = recordAck(s, ackOf(s, p, { key: participantKey(p) === '1/0' ? null : undefined, positions: p.sources.length ? { [`in#${p.partition}`]: positions[`in#${p.partition}`] } : {} }), T0 + 20).state;
    s = decide(s, T0 + 20).state;
    s = onCommitted(s, 3, { epoch: 3, manifestKey: 'k3', committedAt: T0 + 20 }, T0 + 20).state;
    const m3 = s.lastCompleted!.manifest;
    expect(m3.partitions['1/0'].chain.map((l) => l.epoch)).toEqual([1, 2]);
    expect(m3.partitions['1/1'].chain.map((l) => l.epoch)).toEqual([1, 2, 3]);
    const inject = only(openEpoch(s, T0 + 30, { touched: ['in#0'] }), 'inject-barriers');
    expect(inject.fullSnapshot).toEqual(['0/0', '0/1', '1/1', '1/2']);
    s = cycle(s, T0 + 30).state;
    const m4 = s.lastCompleted!.manifest;
    expect(m4.partitions['1/1'].chain).toEqual([{ epoch: 4, key: 'snap/1/1/4', bytes: 10, entities: 1, full: true }]);
    expect(m4.partitions['1/0'].chain.map((l) => l.epoch)).toEqual([1, 2, 4]);
    expect(only(openEpoch(s, T0 + 40, { touched: ['in#0'] }), 'inject-barriers').fullSnapshot).toEqual(['1/0']);
  });

  it('a partition that ignores the request keeps growing its chain and stays on the list', () => {
    let s = fresh({ maxChainLength: 1 });
    s = cycle(s, T0).state;
    s = cycle(s, T0 + 10, { full: false }).state;
    expect(s.lastCompleted!.manifest.partitions['1/0'].chain).toHaveLength(2);
    expect(only(openEpoch(s, T0 + 20, { touched: ['in#0'] }), 'inject-barriers').fullSnapshot).toHaveLength(PARTICIPANTS.length);
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

describe('truncation and retention', () => {
  function logsOf(r: StepResult) {
    return (r.decisions.find((d) => d.kind === 'truncate') as Extract<Decision, { kind: 'truncate' }>).logs;
  }

  it('with the default retention, truncates logs and outboxes behind each completed checkpoint', () => {
    let s = fresh();
    for (let e = 1; e <= 3; e++) {
      const { state, commit } = cycle(s, T0 + e * 10);
      expect(logsOf(commit)).toEqual({ throughEpoch: e, belowPositions: state.lastCompleted!.manifest.positions });
      expect(commit.decisions.find((d) => d.kind === 'truncate')).toMatchObject({ outboxes: { throughEpoch: e } });
      s = state;
    }
    expect(s.history.map((h) => h.epoch)).toEqual([3]);
  });

  it('keeps the last N checkpoints restorable with retention in epochs', () => {
    let s = fresh({ retention: { epochs: 3 } });
    const points: (number | null)[] = [];
    for (let e = 1; e <= 6; e++) {
      const { state, commit } = cycle(s, T0 + e * 10);
      points.push(logsOf(commit)?.throughEpoch ?? null);
      s = state;
    }
    expect(points).toEqual([1, null, null, 2, 3, 4]);
    expect(s.history.map((h) => h.epoch)).toEqual([4, 5, 6]);
    expect(s.truncatedThrough).toBe(4);
  });

  it('keeps logs back to a checkpoint at least `ms` old with retention in time', () => {
    let s = fresh({ retention: { ms: 25 } });
    const points: (number | null)[] = [];
    for (let e = 1; e <= 6; e++) {
      const { state, commit } = cycle(s, T0 + e * 10);
      points.push(logsOf(commit)?.throughEpoch ?? null);
      s = state;
    }
    // Completed at T0+10..60; at T0+50 the newest checkpoint at least 25 ms old is epoch 2, at T0+60 epoch 3.
    expect(points).toEqual([1, null, null, null, 2, 3]);
    expect(s.history.map((h) => h.epoch)).toEqual([3, 4, 5, 6]);
  });

  it('with both, keeps the more of the two; with a bounded history, keeps more log, never less', () => {
    let s = fresh({ retention: { epochs: 2, ms: 1_000_000 }, historyLimit: 4 });
    for (let e = 1; e <= 20; e++) s = cycle(s, T0 + e * 10).state;
    expect(s.history.length).toBeLessThanOrEqual(4);
    // No checkpoint is a million ms old: nothing but the first is ever released.
    expect(s.truncatedThrough).toBe(1);
    expect(s.history[0].epoch).toBe(1);
    expect(s.history[s.history.length - 1].epoch).toBe(20);
  });

  it('never releases savepoints: they stay listed with their manifest key, logs follow normal retention', () => {
    let s = requestSavepoint(fresh(), T0, 'sp1').state;
    s = ackAll(s, T0, { full: true });
    s = decide(s, T0).state;
    s = onCommitted(s, 1, { epoch: 1, manifestKey: 'm1', committedAt: T0 }, T0).state;
    for (let e = 2; e <= 5; e++) s = cycle(s, T0 + e * 10).state;
    expect(s.savepoints).toEqual([{ epoch: 1, label: 'sp1', manifestKey: 'm1', completedAt: T0 }]);
    expect(s.truncatedThrough).toBe(5);
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

describe('coordinator cost guard', () => {
  it('reproduces DESIGN.md: ~5 transitions per epoch, $324/month at 1 s, $5.40 at 60 s, nothing when idle', () => {
    expect(transitionsPerEpoch()).toBe(5);
    expect(transitionsPerEpoch({ perEpoch: 4, perExecution: 2, epochsPerExecution: 100 })).toBeCloseTo(4.02, 10);
    expect(coordinatorCostPerMonth(1000)).toBeCloseTo(324, 6);
    expect(coordinatorCostPerMonth(60_000, STEP_FUNCTIONS_PRICE_PER_TRANSITION)).toBeCloseTo(5.4, 6);
    expect(coordinatorCostPerMonth(1000, STEP_FUNCTIONS_PRICE_PER_TRANSITION, { activeFraction: 0 })).toBe(0);
    expect(coordinatorCostPerMonth(60_000, 0.000025, { activeFraction: 0.1, transitionsPerEpoch: transitionsPerEpoch({ perExecution: 3, epochsPerExecution: 3 }) })).toBeCloseTo(0.648, 6);
    expect(minIntervalForBudget(5.4)).toBe(60_000);
    expect(maxEpochsPerExecution(10)).toBe(2250);
  });

  it('rejects nonsense inputs', () => {
    expect(() => coordinatorCostPerMonth(0)).toThrow(InvalidCoordinatorInputError);
    expect(() => coordinatorCostPerMonth(1000, -1)).toThrow(InvalidCoordinatorInputError);
    expect(() => coordinatorCostPerMonth(1000, 0.000025, { activeFraction: 2 })).toThrow(InvalidCoordinatorInputError);
    expect(() => transitionsPerEpoch({ epochsPerExecution: 0 })).toThrow(InvalidCoordinatorInputError);
    expect(() => maxEpochsPerExecution(10, 1)).toThrow(InvalidCoordinatorInputError);
    expect(() => minIntervalForBudget(0)).toThrow(InvalidCoordinatorInputError);
  });
});
