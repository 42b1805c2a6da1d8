/**
 * The commit point (writeCommitPointer, shared by the in-process driver and the Step
 * Functions tasks): the pointer moves from the expected epoch to the committing one by
 * compare-and-set; a retry whose write landed adopts it; anything else is a conflict. A
 * writer that keeps track of the pointer writes without reading first, and falls back to
 * reading when what it knew is stale.
 */
import { describe, expect, it } from 'vitest';
import { POINTER_NAME, writeCommitPointer } from '../../lib/checkpoint/driver.ts';
import { PointerConflictError } from '../../lib/checkpoint/driver-errors.ts';
import { MemoryPointerStore } from '../../lib/checkpoint/local-storage.ts';
import type { CommitPointer, Decision, Manifest } from '../../lib/checkpoint/protocol.ts';

type Commit = Extract<Decision, { kind: 'commit' }>;
const commit = (epoch: number, expectedPointerEpoch: number): Commit => ({
  kind: 'commit',
  epoch,
  manifestKey: `j/manifests/${epoch}.json`,
  manifest: { createdAt: 1000 + epoch } as Manifest,
  expectedPointerEpoch,
});
const pointerOf = (epoch: number): CommitPointer => ({ epoch, manifestKey: `j/manifests/${epoch}.json`, committedAt: 1000 + epoch });

/** A store whose next compare-and-set loses to `winner`'s write, made just before it. */
class RacedPointerStore extends MemoryPointerStore {
  constructor(private readonly winner: CommitPointer) {
    super();
  }
  override async compareAndSet<T>(name: string, expectedVersion: number, value: T): Promise<boolean> {
    await super.compareAndSet(name, expectedVersion, this.winner);
    return super.compareAndSet(name, expectedVersion, value);
  }
}

describe('writeCommitPointer', () => {
  it('moves the pointer from the expected epoch to the committing one (the first commit: from none)', async () => {
    const pointers = new MemoryPointerStore();
    expect(await writeCommitPointer(pointers, commit(1, 0))).toEqual({ version: 1, value: pointerOf(1) });
    expect(await writeCommitPointer(pointers, commit(2, 1))).toEqual({ version: 2, value: pointerOf(2) });
    expect(await pointers.read(POINTER_NAME)).toEqual({ version: 2, value: pointerOf(2) });
  });

  it('a retry whose earlier write landed adopts the stored pointer without writing again', async () => {
    const pointers = new MemoryPointerStore();
    await writeCommitPointer(pointers, commit(3, 0));
    expect((await writeCommitPointer(pointers, commit(3, 0))).value).toEqual(pointerOf(3));
    expect((await pointers.read(POINTER_NAME))?.version).toBe(1);
  });

  it('a pointer at another epoch is a conflict naming both epochs, and is left alone', async () => {
    const pointers = new MemoryPointerStore();
    await writeCommitPointer(pointers, commit(5, 0));
    const e = await writeCommitPointer(pointers, commit(7, 4)).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PointerConflictError);
    expect(e).toMatchObject({ expectedEpoch: 4, foundEpoch: 5, retryable: false });
    expect((await pointers.read<CommitPointer>(POINTER_NAME))?.value).toEqual(pointerOf(5));
  });

  it('a lost compare-and-set is adopted when the winner wrote this epoch, and a conflict when it wrote another', async () => {
    expect((await writeCommitPointer(new RacedPointerStore(pointerOf(4)), commit(4, 0))).value).toEqual(pointerOf(4));
    const e = await writeCommitPointer(new RacedPointerStore(pointerOf(9)), commit(4, 0)).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PointerConflictError);
    expect(e).toMatchObject({ expectedEpoch: 0, foundEpoch: 9 });
  });

  it('a writer that knows the stored pointer writes it with one compare-and-set, no read', async () => {
    const pointers = new CountingPointerStore();
    const first = await writeCommitPointer(pointers, commit(1, 0), null);
    const second = await writeCommitPointer(pointers, commit(2, 1), first);
    expect(second).toEqual({ version: 2, value: pointerOf(2) });
    expect(pointers.calls).toEqual(['cas', 'cas']);
    expect(await pointers.read(POINTER_NAME)).toEqual(second);
  });

  it('what the writer knew is stale: it reads the pointer and adopts its epoch or reports the conflict', async () => {
    const pointers = new CountingPointerStore();
    const known = await writeCommitPointer(pointers, commit(1, 0), null);
    // Another writer committed epoch 2 since: for the writer of epoch 3 (expecting 1), a conflict.
    await writeCommitPointer(pointers, commit(2, 1));
    const e = await writeCommitPointer(pointers, commit(3, 1), known).catch((x: unknown) => x);
    expect(e).toMatchObject({ expectedEpoch: 1, foundEpoch: 2 });
    // A retry of epoch 2 that knew only epoch 1: the write landed, adopted.
    expect(await writeCommitPointer(pointers, commit(2, 1), known)).toEqual({ version: 2, value: pointerOf(2) });
    // Knowledge of a version behind, at the expected epoch (a tombstone rewrote it): the compare-and-set fails, the read one lands.
    expect(await writeCommitPointer(pointers, commit(4, 2), { version: 1, value: pointerOf(2) })).toEqual({ version: 3, value: pointerOf(4) });
  });
});

/** Records which primitives were called. */
class CountingPointerStore extends MemoryPointerStore {
  readonly calls: string[] = [];
  override read<T>(name: string) {
    this.calls.push('read');
    return super.read<T>(name);
  }
  override compareAndSet<T>(name: string, expectedVersion: number, value: T) {
    this.calls.push('cas');
    return super.compareAndSet(name, expectedVersion, value);
  }
}
