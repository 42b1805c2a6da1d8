/**
 * A coordinator crash at every point of a step sequence: between any two I/O steps of
 * the driver (persisting the record, injecting barriers, partitions writing snapshots
 * and ack items, writing the manifest, writing the pointer, committing sinks,
 * truncating). After each crash a new coordinator resumes from the control items and the
 * run continues; no epoch may be lost or committed twice.
 */
import { describe, expect, it } from 'vitest';
import { participantKey } from '../../lib/checkpoint/protocol.ts';
import { Crash, PARTICIPANTS, World } from './world.ts';

const P = PARTICIPANTS;

/** Epoch 1 commits; epoch 2 times out; epoch 3 commits after late acks for 2; savepoint epoch 4 commits. */
const SCRIPT: ((w: World) => void)[] = [
  (w) => w.input('in#0', 5),
  (w) => void w.open(),
  (w) => w.partitionAck(P[0]),
  (w) => w.partitionAck(P[2]),
  (w) => w.partitionAck(P[1]),
  (w) => w.partitionAck(P[3]),
  (w) => w.partitionAck(P[4]),
  (w) => void w.decide(),
  (w) => w.input('in#1', 3),
  (w) => w.tick(10),
  (w) => void w.open(),
  (w) => w.partitionAck(P[0]),
  (w) => w.tick(1000),
  (w) => void w.decide(),
  (w) => w.input('in#0', 2),
  (w) => void w.open(),
  ...P.flatMap((p) => [(w: World) => w.partitionAck(p), (w: World) => w.partitionAck(p)]),
  (w) => void w.decide(),
  (w) => w.tick(10),
  (w) => void w.savepoint('sp'),
  ...P.map((p) => (w: World) => w.partitionAck(p)),
  (w) => void w.decide(),
];

function baseline(): World {
  const w = new World();
  for (const op of SCRIPT) op(w);
  return w;
}

const BASE = baseline();
const POINTS = BASE.trace.map((label, i) => ({ k: i + 1, label }));

describe('crash at every point of the step sequence', () => {
  it('the uninterrupted run commits 1, 3 and the savepoint 4, and aborts 2', () => {
    expect(BASE.pointerWrites).toEqual([1, 3, 4]);
    expect(BASE.aborts).toEqual([2]);
    expect(BASE.state!.savepoints.map((s) => s.label)).toEqual(['sp']);
    BASE.checkInvariants();
    BASE.checkComplete();
    // The points the enumeration covers, by name.
    for (const label of [
      'persist(e1:0acks)', // after open, before barriers
      'inject(1)',
      'snapshot(1,0/0)', // snapshot written, ack not yet
      'ack-item(1,0/0)', // ack durable, coordinator not told
      'persist(e1:2acks)', // after some acks
      'persist(e1:5acks)', // after all acks, before commit
      'persist(e1:5acks:committing)', // commit decided, manifest not written
      'manifest(1)', // manifest written, pointer not
      'pointer(1)', // pointer written, onCommitted not run
      'persist(last=1)', // completion recorded, sinks not committed
      'sinks(1)',
      'truncate(1)',
      'abort(2)',
      'persist(e3:0acks)',
      'pointer(4)',
    ]) {
      expect(BASE.trace, label).toContain(label);
    }
    expect(POINTS.length).toBeGreaterThan(60);
  });

  it.each(POINTS)('crash at point $k ($label): resumes without losing or double-committing an epoch', ({ k, label }) => {
    const w = new World();
    w.crashAt = k;
    let crashed = false;
    for (const op of SCRIPT) {
      try {
        op(w);
      } catch (e) {
        if (!(e instanceof Crash)) throw e;
        expect(e.label).toBe(label);
        crashed = true;
        w.crash();
        // What is durable at the crash decides what the resume must do.
        const rec = w.record;
        const f = rec?.inFlight ?? null;
        const ptrBefore = w.pointer?.epoch ?? 0;
        const allAcksDurable = f !== null && P.every((p) => w.ackItems.has(`${f.epoch}/${participantKey(p)}`));
        const writesBefore = w.pointerWrites.length;
        w.resume();
        if (f && f.epoch > ptrBefore && allAcksDurable) {
          // Every ack is in and the pointer was not written: the epoch completes, it is not aborted.
          expect(w.pointerWrites.slice(writesBefore)).toEqual([f.epoch]);
          expect(w.state!.lastCompleted!.epoch).toBe(f.epoch);
        } else {
          // A landed pointer is recognised; otherwise nothing is committed by the resume itself.
          expect(w.state!.lastCompleted?.epoch ?? 0).toBe(ptrBefore);
          expect(w.pointerWrites.length).toBe(writesBefore);
        }
        if (f && f.epoch === ptrBefore) expect(w.pointerWrites.length, 'no second pointer write').toBe(writesBefore);
      }
      w.checkInvariants();
    }
    expect(crashed).toBe(true);
    w.quiesce();
    w.checkInvariants();
    w.checkComplete();
    expect(w.crashes).toBe(1);
    // The savepoint was taken (maybe under another epoch number) and the input is fully checkpointed.
    expect(w.state!.savepoints.map((s) => s.label)).toEqual(['sp']);
    expect(w.state!.pendingSavepoint).toBeNull();
    expect(w.blobs.get(w.pointer!.manifestKey)!.positions).toEqual(BASE.blobs.get(BASE.pointer!.manifestKey)!.positions);
  });
});
