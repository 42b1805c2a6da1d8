/**
 * The checkpoint driver over the pure coordinator, with in-memory storage: a coordinator
 * that dies between any two writes of a commit resumes without losing or repeating the
 * epoch; a second coordinator on the same chain is fenced off; a fresh chain numbers
 * epochs above the old ones, and the checkpoint a restore started from is kept until the
 * new chain completes one, then collected; objects no retained checkpoint needs are deleted, the store
 * listed only when it may hold some; in one process a checkpoint is two pointer-store writes.
 */
import { describe, expect, it } from 'vitest';
import { CheckpointDriver, CoordinatorFencedError, type DriverPorts, type InjectDecision, POINTER_NAME, RECORD_NAME, statsKey } from '../../lib/checkpoint/driver.ts';
import { toRecord } from '../../lib/checkpoint/coordinator.ts';
import { MemoryBlobStore, MemoryPointerStore } from '../../lib/checkpoint/local-storage.ts';
import type { Ack, CommitPointer, CoordinatorRecord, CoordinatorSetup } from '../../lib/checkpoint/protocol.ts';

const SETUP: CoordinatorSetup = {
  job: 'j',
  fingerprint: 'f',
  participants: [
    { stage: 0, partition: 0, sources: ['in'] },
    { stage: 1, partition: 0, sources: [] },
  ],
  config: { timeoutMs: 1000 },
};

class Crash extends Error {}

/** The prefixes `blobs` is listed under from now on. */
function recordListings(blobs: MemoryBlobStore): string[] {
  const listed: string[] = [];
  const list = blobs.list.bind(blobs);
  blobs.list = (prefix) => (listed.push(prefix), list(prefix));
  return listed;
}

class World {
  blobs = new MemoryBlobStore();
  pointers = new MemoryPointerStore();
  injected: InjectDecision[] = [];
  sinkCommits: number[] = [];
  truncations = 0;
  /** Throw once before this pointer-store write (counted since start()). */
  crashAtWrite = -1;
  writes = 0;
  now = 10_000;
  position = 0;

  ports(): DriverPorts {
    const pointers = {
      read: <T>(n: string) => this.pointers.read<T>(n),
      compareAndSet: <T>(n: string, v: number, x: T) => {
        if (this.writes++ === this.crashAtWrite) throw new Crash(`before write ${n}`);
        return this.pointers.compareAndSet(n, v, x);
      },
    };
    return {
      blobs: this.blobs,
      pointers,
      injectBarriers: async (d) => void this.injected.push(d),
      prepareSinks: async () => {},
      commitSinks: async (e) => void this.sinkCommits.push(e),
      truncateLogs: async () => void this.truncations++,
    };
  }

  start(fresh?: { startAfterEpoch: number }, persistAcks?: boolean, pinned?: number): Promise<CheckpointDriver> {
    this.writes = 0;
    return CheckpointDriver.start(SETUP, this.ports(), this.now, { fresh, persistAcks, pinned });
  }

  /** Partitions answer the last injected barrier: snapshot objects, then acks. */
  async acks(): Promise<Ack[]> {
    const d = this.injected.at(-1)!;
    this.position += 10;
    const out: Ack[] = [];
    for (const p of SETUP.participants) {
      const key = `j/snapshots/${p.stage}-${p.partition}/${d.epoch}`;
      await this.blobs.put(key, new TextEncoder().encode(key));
      out.push({
        epoch: d.epoch,
        stage: p.stage,
        partition: p.partition,
        baseEpoch: d.baseEpoch,
        snapshot: { key, bytes: key.length, entities: 1, full: d.fullSnapshot.includes(`${p.stage}/${p.partition}`) },
        positions: p.sources.length ? { 'in#0': this.position } : {},
        alignedAt: this.now,
        ackedAt: this.now,
      });
    }
    return out;
  }

  /** One epoch through the driver: open, ack, commit. */
  async epoch(d: CheckpointDriver): Promise<void> {
    this.now += 100;
    await d.tick(this.now, { heads: { 'in#0': this.position + 10 } });
    for (const a of await this.acks()) d.ack(a);
    await d.tick(this.now, {});
  }

  async record(): Promise<CoordinatorRecord> {
    return (await this.pointers.read<CoordinatorRecord>(RECORD_NAME))!.value;
  }

  async pointer(): Promise<number> {
    return (await this.pointers.read<CommitPointer>(POINTER_NAME))?.value.epoch ?? 0;
  }
}

describe('checkpoint driver', () => {
  it('commits epochs, writes stats, and deletes objects no retained checkpoint needs', async () => {
    const w = new World();
    const d = await w.start();
    for (let i = 0; i < 4; i++) await w.epoch(d);
    expect(await w.pointer()).toBe(4);
    expect(w.sinkCommits).toEqual([1, 2, 3, 4]);
    expect(d.completed.map((s) => s.epoch)).toEqual([1, 2, 3, 4]);
    expect(await w.blobs.get(statsKey('j', 4))).toBeDefined();
    // Retention 1: manifests and stats of epoch 4 only; snapshots of its chains only (full at 1, deltas 2-4).
    expect(await w.blobs.list('j/manifests/')).toEqual(['j/manifests/000000000004.json']);
    expect(await w.blobs.list('j/checkpoints/')).toEqual([statsKey('j', 4)]);
    expect((await w.blobs.list('j/snapshots/')).length).toBe(8);
  });

  for (let crashAt = 0; crashAt < 4; crashAt++) {
    it(`a coordinator that dies before pointer-store write ${crashAt} of a commit resumes without losing or repeating the epoch`, async () => {
      const w = new World();
      let d = await w.start();
      await w.epoch(d);
      w.now += 100;
      await d.tick(w.now, { heads: { 'in#0': 100 } });
      for (const a of await w.acks()) d.ack(a);
      // Writes of the commit step: the record (acks), the record (committing), the pointer, the record (completed).
      w.crashAtWrite = w.writes + crashAt;
      await expect(d.tick(w.now, {})).rejects.toThrow(Crash);
      w.crashAtWrite = -1;
      const landed = await w.pointer();
      d = await w.start();
      // Acks lost with the process are in the record once the first write landed; otherwise epoch 2 is aborted and 3 reopened.
      const st = d.state;
      if (crashAt === 0) {
        expect(st.lastCompleted?.epoch).toBe(1);
        expect(w.injected.at(-1)!.epoch).toBe(3);
      } else {
        expect(st.lastCompleted?.epoch).toBe(2);
        expect(await w.pointer()).toBe(2);
      }
      expect(landed).toBeLessThanOrEqual(2);
      // Each epoch's sinks commit at least once (idempotent), never an epoch that did not commit.
      expect(new Set(w.sinkCommits)).toEqual(new Set(crashAt === 0 ? [1] : [1, 2]));
      await w.epoch(d);
      expect(await w.pointer()).toBe(3);
    });
  }

  it('a second coordinator on the same chain fences the first off', async () => {
    const w = new World();
    const a = await w.start();
    await w.epoch(a);
    const b = await w.start();
    w.now += 100;
    await expect(a.tick(w.now, { heads: { 'in#0': 50 } })).rejects.toThrow(CoordinatorFencedError);
    await w.epoch(b);
    expect(await w.pointer()).toBe(2);
  });

  it('a fresh chain numbers its epochs above every earlier one', async () => {
    const w = new World();
    const a = await w.start();
    for (let i = 0; i < 3; i++) await w.epoch(a);
    const b = await w.start({ startAfterEpoch: 0 });
    expect(b.state.lastCompleted).toBeNull();
    await w.epoch(b);
    expect(w.injected.at(-1)!.epoch).toBe(4);
    expect(w.injected.at(-1)!.baseEpoch).toBe(0);
    expect(await w.pointer()).toBe(4);
  });

  it('in one process (acks not persisted), a checkpoint is two pointer-store writes and the record catches up at the next opening', async () => {
    const w = new World();
    const d = await w.start(undefined, false);
    await w.epoch(d);
    const before = w.writes;
    await w.epoch(d);
    // The opening of epoch 2 (with epoch 1's completion) and its commit point.
    expect(w.writes - before).toBe(2);
    expect(await w.pointer()).toBe(2);
    const lagging = await w.record();
    expect(lagging.lastCompleted?.epoch).toBe(1);
    expect(lagging.inFlight?.epoch).toBe(2);
    // What resume makes of the lagging record and the pointer is what the driver had (but
    // for the count of acks: those of epoch 2 died with the process, never written).
    const again = await w.start(undefined, false);
    const had = toRecord(d.state);
    expect(toRecord(again.state)).toEqual({ ...had, counters: { ...had.counters, acks: had.counters.acks - 2 } });
    await w.epoch(again);
    expect((await w.record()).lastCompleted?.epoch).toBe(2);
    expect(await w.pointer()).toBe(3);
  });

  it('lists the store at start and when an epoch leaves retention, not after a first checkpoint', async () => {
    const w = new World();
    const listed = recordListings(w.blobs);
    // Left by a predecessor: a snapshot of an epoch that never committed.
    await w.blobs.put('j/snapshots/0-0/orphan', new Uint8Array(1));
    const d = await w.start(undefined, false);
    expect(listed.length).toBeGreaterThan(0);
    expect(await w.blobs.get('j/snapshots/0-0/orphan')).toBeUndefined();
    listed.length = 0;
    await w.epoch(d);
    expect(listed).toEqual([]);
    await w.epoch(d);
    expect(listed.length).toBeGreaterThan(0);
    expect(await w.blobs.list('j/manifests/')).toEqual(['j/manifests/000000000002.json']);
  });

  it('a restore pins the checkpoint it started from until its new chain completes one; then the old chain is garbage', async () => {
    const w = new World();
    const old = await w.start();
    for (let i = 0; i < 3; i++) await w.epoch(old);
    const restoredFrom = 'j/manifests/000000000003.json';
    const oldSnapshots = await w.blobs.list('j/snapshots/');
    expect(oldSnapshots.length).toBe(6);
    // A restore from epoch 3 starts a fresh chain: a crash before its first checkpoint restores epoch 3 again.
    const d = await w.start({ startAfterEpoch: 3 }, undefined, 3);
    expect(await w.blobs.list('j/manifests/')).toEqual([restoredFrom]);
    expect(await w.blobs.list('j/snapshots/')).toEqual(oldSnapshots);
    // Its first checkpoint (full snapshots, base 0) needs nothing of the old chain: all of it goes.
    await w.epoch(d);
    expect(w.injected.at(-1)).toMatchObject({ epoch: 4, baseEpoch: 0 });
    expect(await w.blobs.list('j/manifests/')).toEqual(['j/manifests/000000000004.json']);
    expect(await w.blobs.list('j/checkpoints/')).toEqual([statsKey('j', 4)]);
    expect((await w.blobs.list('j/snapshots/')).sort()).toEqual(['j/snapshots/0-0/4', 'j/snapshots/1-0/4']);
    // And it stays so: the next epochs build on epoch 4's chain only.
    await w.epoch(d);
    expect((await w.blobs.list('j/snapshots/')).filter((k) => oldSnapshots.includes(k))).toEqual([]);
  });

  it('lists the store after an abort: snapshots of partitions that never acked are garbage', async () => {
    const w = new World();
    const d = await w.start(undefined, false);
    const listed = recordListings(w.blobs);
    // Epoch 1 times out with one ack in: the other partition's snapshot is written but in no ack.
    w.now += 100;
    await d.tick(w.now, { heads: { 'in#0': w.position + 10 } });
    const [first, second] = await w.acks();
    d.ack(first);
    w.now += 2000;
    await d.tick(w.now, {}, false);
    expect(d.aborted).toEqual([1]);
    expect(await w.blobs.get(second.snapshot!.key)).toBeDefined();
    await w.epoch(d);
    expect(listed.length).toBeGreaterThan(0);
    expect(await w.blobs.get(second.snapshot!.key)).toBeUndefined();
    expect(await w.pointer()).toBe(2);
  });
});
