/**
 * Model-based test: random sequences of input, epoch openings, acks (in order, repeated,
 * for epochs never opened), clock ticks, decisions, savepoint requests and coordinator
 * crashes at random I/O points, run against the simulated driver. After every command
 * and at the end the invariants must hold: committed epochs strictly increase with no
 * duplicates, at most one epoch in flight, every committed manifest covers every
 * participant, an aborted epoch is never committed; and once driven to quiescence, the
 * last checkpoint covers all input.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { recordAck } from '../../lib/checkpoint/coordinator.ts';
import { SavepointPendingError } from '../../lib/checkpoint/errors.ts';
import { PARTICIPANTS, World, setupOf } from './world.ts';

type Cmd =
  | { t: 'input'; sp: 0 | 1; n: number }
  | { t: 'open' }
  | { t: 'ack'; p: number }
  | { t: 'ackAll' }
  | { t: 'resend'; p: number }
  | { t: 'stray'; p: number; ahead: number }
  | { t: 'tick'; ms: number }
  | { t: 'decide' }
  | { t: 'savepoint'; label: 'a' | 'b' }
  | { t: 'crash' }
  | { t: 'arm'; k: number };

const p = fc.integer({ min: 0, max: PARTICIPANTS.length - 1 });
const cmd: fc.Arbitrary<Cmd> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ t: fc.constant('input' as const), sp: fc.constantFrom(0 as const, 1 as const), n: fc.integer({ min: 1, max: 5 }) }) },
  { weight: 3, arbitrary: fc.constant({ t: 'open' as const }) },
  { weight: 8, arbitrary: fc.record({ t: fc.constant('ack' as const), p }) },
  { weight: 2, arbitrary: fc.constant({ t: 'ackAll' as const }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('resend' as const), p }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('stray' as const), p, ahead: fc.integer({ min: 1, max: 3 }) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: 1500 }) }) },
  { weight: 4, arbitrary: fc.constant({ t: 'decide' as const }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('savepoint' as const), label: fc.constantFrom('a' as const, 'b' as const) }) },
  { weight: 1, arbitrary: fc.constant({ t: 'crash' as const }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('arm' as const), k: fc.integer({ min: 1, max: 8 }) }) },
);

function run(w: World, c: Cmd): void {
  const part = 'p' in c ? PARTICIPANTS[c.p] : PARTICIPANTS[0];
  switch (c.t) {
    case 'input':
      return w.input(`in#${c.sp}`, c.n);
    case 'open':
      return void w.open();
    case 'ack':
      return w.partitionAck(part);
    case 'ackAll':
      for (const x of PARTICIPANTS) w.partitionAck(x);
      return;
    case 'resend':
      return w.resendAck(part);
    case 'stray': {
      const s = w.state!;
      const epoch = s.highestEpoch + c.ahead;
      const ack = { epoch, stage: part.stage, partition: part.partition, baseEpoch: 0, snapshot: null, positions: {}, alignedAt: w.now, ackedAt: w.now };
      const r = w.apply(recordAck(s, ack, w.now));
      expect(r.ignored?.reason).toBe('epoch-never-opened');
      return;
    }
    case 'tick':
      return w.tick(c.ms);
    case 'decide':
      return void w.decide();
    case 'savepoint':
      try {
        w.savepoint(c.label);
      } catch (e) {
        if (!(e instanceof SavepointPendingError)) throw e;
        expect(e.retryable).toBe(true);
      }
      return;
    case 'crash':
      w.crash();
      return void w.resume();
    case 'arm':
      w.crashAt = w.steps + c.k;
      return;
  }
}

describe('coordinator model', () => {
  it('keeps its invariants under random events and crashes (fixed seed)', () => {
    let commits = 0;
    let aborts = 0;
    let crashes = 0;
    let savepoints = 0;
    const reasons = new Set<string>();
    fc.assert(
      fc.property(fc.array(cmd, { minLength: 10, maxLength: 120 }), fc.integer({ min: 1, max: 4 }), (cmds, chain) => {
        const w = new World(setupOf({ maxChainLength: chain, retention: { epochs: 2 } }));
        for (const c of cmds) {
          w.guarded(() => run(w, c));
          w.checkInvariants();
        }
        w.crashAt = null;
        w.quiesce();
        w.checkInvariants();
        w.checkComplete();
        commits += w.pointerWrites.length;
        aborts += w.aborts.length;
        crashes += w.crashes;
        savepoints += w.state!.savepoints.length;
        for (const r of w.ignored) reasons.add(r);
      }),
      { seed: 20250611, numRuns: 400 },
    );
    // The generator exercises every branch, not just the happy path.
    expect(commits).toBeGreaterThan(400);
    expect(aborts).toBeGreaterThan(200);
    expect(crashes).toBeGreaterThan(300);
    expect(savepoints).toBeGreaterThan(50);
    expect([...reasons].sort()).toEqual(expect.arrayContaining(['duplicate', 'epoch-aborted', 'epoch-completed', 'epoch-never-opened']));
  });

  it('the world detects a double commit (the checker is not vacuous)', () => {
    const w = new World();
    w.input('in#0', 1);
    w.open();
    for (const part of PARTICIPANTS) w.partitionAck(part);
    w.decide();
    w.pointerWrites.push(w.pointerWrites[0]);
    expect(() => w.checkInvariants()).toThrow();
  });
});
