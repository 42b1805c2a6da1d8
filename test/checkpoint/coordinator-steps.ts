/**
 * Helpers shared by the coordinator tests (coordinator-*.test.ts): a fresh coordinator,
 * acks as partitions send them, and one whole epoch (open, ack, commit) in a call.
 */
import { expect } from 'vitest';
import { createCoordinator, decide, onCommitted, openEpoch, recordAck } from '../../lib/checkpoint/coordinator.ts';
import { participantKey, type Ack, type CoordinatorState, type Decision, type Participant, type StepResult } from '../../lib/checkpoint/protocol.ts';
import { PARTICIPANTS, setupOf } from './world.ts';

export const T0 = 10_000;

export function fresh(config: Parameters<typeof setupOf>[0] = {}): CoordinatorState {
  return createCoordinator(setupOf(config));
}

export function kinds(r: StepResult): string[] {
  return r.decisions.map((d) => d.kind);
}

export function only<K extends Decision['kind']>(r: StepResult, kind: K): Extract<Decision, { kind: K }> {
  expect(kinds(r)).toEqual([kind]);
  return r.decisions[0] as Extract<Decision, { kind: K }>;
}

export function ackOf(
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

export function ackAll(s: CoordinatorState, now: number, opts: Parameters<typeof ackOf>[2] = {}, ps: readonly Participant[] = PARTICIPANTS): CoordinatorState {
  for (const p of ps) s = recordAck(s, ackOf(s, p, opts), now).state;
  return s;
}

/** Opens (one new record on in#0), acks everything, commits: one whole epoch. */
export function cycle(s: CoordinatorState, now: number, opts: Parameters<typeof ackOf>[2] = {}): { state: CoordinatorState; commit: StepResult } {
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
