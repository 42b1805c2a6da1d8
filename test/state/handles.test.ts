/**
 * The typed state handles over a key's raw fields, committed batch by batch to the
 * in-memory store: list state with and without TTL (expiry in processing time, refreshed
 * by every write).
 */
import { describe, expect, it } from 'vitest';
import { listState } from '../../lib/api/state.ts';
import { ManualClock } from '../../lib/api/types.ts';
import type { KeyedFields } from '../../lib/state/keyed-fields.ts';
import { bindStateHandles } from '../../lib/state/handles.ts';
import { oneKey } from './one-key.ts';

/** One key's state through an operator context, a commit per `commit()`. */
function open() {
  const { state, commit, stored } = oneKey('op');
  const clock = new ManualClock(0);
  const ctx = { node: { name: 'op' }, clock, ...state } as unknown as KeyedFields;
  return { ctx, clock, commit, stored };
}

describe('list state', () => {
  it('with a TTL: adds append and refresh the expiry; an expired list reads as empty, is deleted, and a later add starts anew', () => {
    const { ctx, clock, commit, stored } = open();
    const { l } = bindStateHandles(ctx, { l: listState<number>({ ttlMs: 1000 }) });
    l.add(1);
    commit();
    clock.advance(999);
    l.add(2);
    l.add(3);
    commit();
    // Not expired: the last write was at 999 (it expires at 1999).
    clock.advance(999);
    expect(l.get()).toEqual([1, 2, 3]);
    commit();
    // The elements are stored as a list, as without TTL; the expiry beside them.
    expect(stored()).toEqual(
      new Map<string, unknown>([
        ['l', [1, 2, 3]],
        ['l\u0002expires', 1999],
      ]),
    );
    clock.advance(1);
    expect(l.get()).toEqual([]);
    commit();
    expect(stored().size).toBe(0);
    l.add(4);
    commit();
    clock.advance(500);
    expect(l.get()).toEqual([4]);
    l.update([5, 6]);
    commit();
    clock.advance(999);
    expect(l.get()).toEqual([5, 6]);
    l.update([]);
    commit();
    expect(stored().size).toBe(0);
    l.add(7);
    l.clear();
    commit();
    expect(stored().size).toBe(0);
  });

  it('with a TTL: an add after expiry, in the same batch as reading nothing, keeps only the new element', () => {
    const { ctx, clock, commit } = open();
    const { l } = bindStateHandles(ctx, { l: listState<string>({ ttlMs: 10 }) });
    l.add('old');
    commit();
    clock.advance(10);
    l.add('new');
    expect(l.get()).toEqual(['new']);
    commit();
    expect(l.get()).toEqual(['new']);
  });

  it('without a TTL: the list is its field; update replaces it, an empty update or clear deletes it', () => {
    const { ctx, commit, stored } = open();
    const { l } = bindStateHandles(ctx, { l: listState<number>() });
    l.add(1);
    l.add(2);
    commit();
    expect(stored()).toEqual(new Map([['l', [1, 2]]]));
    // A copy: a change counts only when written back.
    l.get().push(99);
    commit();
    expect(stored()).toEqual(new Map([['l', [1, 2]]]));
    l.update([3]);
    commit();
    expect(stored()).toEqual(new Map([['l', [3]]]));
    l.update([]);
    commit();
    expect(stored().size).toBe(0);
    l.add(4);
    l.clear();
    commit();
    expect(stored().size).toBe(0);
  });
});
