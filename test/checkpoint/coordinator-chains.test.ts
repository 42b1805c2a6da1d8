/**
 * The pure checkpoint coordinator (lib/checkpoint/coordinator.ts) over many epochs: snapshot
 * chains in the manifest and their compaction into full snapshots, and the truncation of
 * logs and outboxes under each retention.
 */
import { describe, expect, it } from 'vitest';
import { decide, onCommitted, openEpoch, recordAck, requestSavepoint } from '../../lib/checkpoint/coordinator.ts';
import { participantKey, type CoordinatorState, type Decision, type StepResult } from '../../lib/checkpoint/protocol.ts';
import { ackAll, ackOf, cycle, fresh, only, T0 } from './coordinator-steps.ts';
import { PARTICIPANTS } from './world.ts';

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

describe('truncation and retention', () => {
  function logsOf(r: StepResult) {
    return (r.decisions.find((d) => d.kind === 'truncate') as Extract<Decision, { kind: 'truncate' }>).logs;
  }

  /** Six epochs, completed 10 ms apart: where each commit truncated the logs (null: nowhere), and the state after. */
  function sixEpochs(s: CoordinatorState): { points: (number | null)[]; s: CoordinatorState } {
    const points: (number | null)[] = [];
    for (let e = 1; e <= 6; e++) {
      const { state, commit } = cycle(s, T0 + e * 10);
      points.push(logsOf(commit)?.throughEpoch ?? null);
      s = state;
    }
    return { points, s };
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
    const { points, s } = sixEpochs(fresh({ retention: { epochs: 3 } }));
    expect(points).toEqual([1, null, null, 2, 3, 4]);
    expect(s.history.map((h) => h.epoch)).toEqual([4, 5, 6]);
    expect(s.truncatedThrough).toBe(4);
  });

  it('keeps logs back to a checkpoint at least `ms` old with retention in time', () => {
    const { points, s } = sixEpochs(fresh({ retention: { ms: 25 } }));
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
