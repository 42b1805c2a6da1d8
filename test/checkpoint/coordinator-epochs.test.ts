/**
 * The pure checkpoint coordinator (lib/checkpoint/coordinator.ts) opening and deciding
 * epochs: setup validation, openEpoch on activity, savepoints, decide (commit or abort),
 * and the cost guard for its Step Functions transitions.
 */
import { describe, expect, it } from 'vitest';
import { createCoordinator, decide, onCommitted, openEpoch, recordAck, requestSavepoint } from '../../lib/checkpoint/coordinator.ts';
import { InvalidCoordinatorInputError, SavepointPendingError } from '../../lib/checkpoint/errors.ts';
import { manifestObjectKey, participantKey } from '../../lib/checkpoint/protocol.ts';
import { coordinatorCostPerMonth, maxEpochsPerExecution, minIntervalForBudget, STEP_FUNCTIONS_PRICE_PER_TRANSITION, transitionsPerEpoch } from '../../lib/checkpoint/cost.ts';
import { ackAll, ackOf, cycle, fresh, kinds, only, T0 } from './coordinator-steps.ts';
import { PARTICIPANTS, setupOf } from './world.ts';

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
