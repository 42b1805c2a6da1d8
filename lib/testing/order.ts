/**
 * Per-key order for the exactly-once checker: the records of one key must appear in the
 * output in the reference's relative order. Only outputs whose order the contract
 * defines carry it (records of one key that crossed the same channels: a keyed
 * operator's emits for that key, in a sink fed by that key's partition); across keys, or
 * where several partitions feed one key, interleavings legitimately differ.
 */

/** A record of one key that is not where the reference's order puts it. */
export interface OrderViolation {
  /** The record's order key. */
  readonly key: string;
  readonly record: unknown;
  /** A record of the same key it is on the wrong side of. */
  readonly neighbour: unknown;
  /** 'after': the record came after `neighbour`, which the reference has after it; 'before': the reverse. */
  readonly side: 'after' | 'before';
  /** Position of the record in the output. */
  readonly index: number;
}

interface Placed {
  /** Position among the reference's records of this key. */
  readonly rank: number;
  readonly record: unknown;
  readonly index: number;
}

/**
 * Records of each key out of the reference's order: per key, the fewest records that,
 * moved, restore it (those outside a longest increasing run of reference positions).
 * An output record is matched to the n-th reference record of its identity and key by
 * its n-th occurrence; extra copies and unexpected records are the multiset check's
 * business and are skipped here. `orderKey` undefined: the record carries no order.
 */
export function orderViolations(
  reference: readonly unknown[],
  actual: readonly unknown[],
  identity: (record: unknown) => string,
  orderKey: (record: unknown) => string | undefined,
): { violations: OrderViolation[]; keys: number } {
  // Per key, per identity: the ranks of its occurrences in the reference.
  const ranks = new Map<string, Map<string, number[]>>();
  const sizes = new Map<string, number>();
  for (const record of reference) {
    const key = orderKey(record);
    if (key === undefined) continue;
    const rank = sizes.get(key) ?? 0;
    sizes.set(key, rank + 1);
    let byId = ranks.get(key);
    if (!byId) ranks.set(key, (byId = new Map()));
    const id = identity(record);
    const list = byId.get(id);
    if (list) list.push(rank);
    else byId.set(id, [rank]);
  }

  const placed = new Map<string, Placed[]>();
  const seen = new Map<string, number>();
  actual.forEach((record, index) => {
    const key = orderKey(record);
    if (key === undefined) return;
    const id = identity(record);
    const list = ranks.get(key)?.get(id);
    if (!list) return;
    const occurrence = `${key}\u0000${id}`;
    const n = seen.get(occurrence) ?? 0;
    seen.set(occurrence, n + 1);
    if (n >= list.length) return;
    let run = placed.get(key);
    if (!run) placed.set(key, (run = []));
    run.push({ rank: list[n]!, record, index });
  });

  const violations: OrderViolation[] = [];
  for (const [key, run] of placed) violations.push(...outOfOrder(key, run));
  violations.sort((a, b) => a.index - b.index);
  return { violations, keys: sizes.size };
}

/** The records of one key outside a longest increasing subsequence of ranks (patience sorting). */
function outOfOrder(key: string, run: readonly Placed[]): OrderViolation[] {
  const tails: number[] = []; // tails[l]: index into run of the smallest tail of an increasing run of length l+1
  const previous: number[] = new Array(run.length).fill(-1);
  for (let i = 0; i < run.length; i++) {
    let lo = 0;
    let hi = tails.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (run[tails[mid]!]!.rank < run[i]!.rank) lo = mid + 1;
      else hi = mid;
    }
    if (lo > 0) previous[i] = tails[lo - 1]!;
    tails[lo] = i;
  }
  if (tails.length === run.length) return [];
  const inOrder = new Set<number>();
  for (let i = tails[tails.length - 1]!; i >= 0; i = previous[i]!) inOrder.add(i);

  // For each misplaced record, a neighbour it is on the wrong side of: the highest-ranked
  // record before it, or else the lowest-ranked one after it.
  const maxBefore: number[] = [];
  for (let i = 0, best = -1; i < run.length; i++) {
    maxBefore.push(best);
    if (best < 0 || run[i]!.rank > run[best]!.rank) best = i;
  }
  const minAfter: number[] = new Array(run.length);
  for (let i = run.length - 1, best = -1; i >= 0; i--) {
    minAfter[i] = best;
    if (best < 0 || run[i]!.rank < run[best]!.rank) best = i;
  }
  const out: OrderViolation[] = [];
  for (let i = 0; i < run.length; i++) {
    if (inOrder.has(i)) continue;
    const p = run[i]!;
    const before = maxBefore[i]!;
    if (before >= 0 && run[before]!.rank > p.rank) {
      out.push({ key, record: p.record, neighbour: run[before]!.record, side: 'after', index: p.index });
    } else {
      out.push({ key, record: p.record, neighbour: run[minAfter[i]!]!.record, side: 'before', index: p.index });
    }
  }
  return out;
}
