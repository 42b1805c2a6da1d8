/**
 * Changed-key tracking of the DynamoDB state backend (StateBackend.tracksChanges), kept
 * durably with the partition and written in the same transaction as the batch it
 * describes, so a crash between barriers never loses a dirty key:
 *
 *   tracked  pk controlPk(scope)   sk `k#${after:12}#${version:16}#${chunk:4}`   v: JSON [[entity, kg], ...]
 *   version  (head item `#`)       ti: JSON [after, ...], the live intervals, oldest first
 *
 * A commit writes one item (chunked past ~300 KB) with the entities that are new to the
 * current interval (the first write of a key in an interval, not every write), and the
 * head's `ti`. An aligned barrier starts a new interval and drops the ones before its
 * base epoch in `ti` (same transaction); their items are deleted afterwards, best effort:
 * recover() ignores items of intervals `ti` does not name (and deletes them).
 *
 * The working copy (what tracked() answers) is loaded by recover() and advanced after
 * each successful commit; the version fence makes any other writer's commit fail ours.
 */
import type { TrackedInterval, TrackingUpdate } from '../../state/backend.ts';
import * as L from './dynamodb-layout.ts';

export const TRACK_PREFIX = 'k#';
/** The head attribute naming the live intervals. */
export const INTERVALS_ATTR = 'ti';

export function trackSk(after: number, version: number, chunk: number): string {
  return `${TRACK_PREFIX}${String(after).padStart(12, '0')}#${String(version).padStart(16, '0')}#${String(chunk).padStart(4, '0')}`;
}

function parseTrackSk(sk: string): { after: number; version: number } {
  return { after: Number(sk.slice(2, 14)), version: Number(sk.slice(15, 31)) };
}

interface Interval {
  readonly after: number;
  readonly entities: Map<string, number>;
  /** Sort keys of its items (to delete them when the interval is dropped). */
  readonly sks: string[];
}

/** One partition's tracked intervals as committed. */
export class PartitionTracking {
  private constructor(
    private intervals: Interval[],
    /** The committed progress's lastBarrier: where a first interval starts. */
    private lastBarrier: number,
  ) {}

  /** From the head item and the `k#` items of recover(); also returns the sort keys of stale items. */
  static load(head: Record<string, unknown> | undefined, lastBarrier: number, items: readonly Record<string, unknown>[]): { tracking: PartitionTracking; stale: string[] } {
    const live = head?.[INTERVALS_ATTR] !== undefined ? (JSON.parse(String(head[INTERVALS_ATTR])) as number[]) : [];
    const intervals: Interval[] = live.map((after) => ({ after, entities: new Map(), sks: [] }));
    const byAfter = new Map(intervals.map((i) => [i.after, i]));
    const stale: string[] = [];
    // Items come sorted by sk: chunks of one commit are adjacent and in order.
    let text = '';
    let current: { after: number; version: number } | undefined;
    const flush = () => {
      if (!current) return;
      const target = byAfter.get(current.after);
      if (target) for (const [entity, kg] of JSON.parse(text) as [string, number][]) target.entities.set(entity, kg);
      text = '';
    };
    for (const it of items) {
      const sk = String(it.sk);
      const at = parseTrackSk(sk);
      const interval = byAfter.get(at.after);
      if (!interval) {
        stale.push(sk);
        continue;
      }
      interval.sks.push(sk);
      if (!current || current.after !== at.after || current.version !== at.version) {
        flush();
        current = at;
      }
      text += String(it.v);
    }
    flush();
    return { tracking: new PartitionTracking(intervals, lastBarrier), stale };
  }

  /** What tracked() returns: live intervals, oldest first (read only). */
  get view(): readonly TrackedInterval[] {
    return this.intervals;
  }

  /**
   * The items and head attribute a commit at `version` adds, and how to apply them once
   * it landed. `written`: the entities of the batch's writes.
   */
  plan(version: number, written: ReadonlyArray<{ entity: string; kg: number }>, update: TrackingUpdate, nextLastBarrier: number): { items: Record<string, string>[]; intervals: string; apply: () => string[] } {
    const existing = this.intervals.at(-1);
    const after = existing?.after ?? this.lastBarrier;
    const fresh = new Map<string, number>();
    for (const list of [written, update.entities]) {
      for (const { entity, kg } of list) if (!existing?.entities.has(entity) && !fresh.has(entity)) fresh.set(entity, kg);
    }
    const items: Record<string, string>[] = [];
    if (fresh.size) {
      L.splitText(JSON.stringify([...fresh])).forEach((v, i) => items.push({ sk: trackSk(after, version, i), v }));
    }
    let afters = [...this.intervals.map((i) => i.after)];
    if (!existing) afters.push(after);
    if (update.next) {
      afters = afters.filter((a) => a >= update.next!.dropBefore);
      afters.push(update.next.after);
    }
    const apply = (): string[] => {
      let cur = existing;
      if (!cur) this.intervals.push((cur = { after, entities: new Map(), sks: [] }));
      for (const [e, kg] of fresh) cur.entities.set(e, kg);
      cur.sks.push(...items.map((i) => i.sk));
      this.lastBarrier = nextLastBarrier;
      if (!update.next) return [];
      const dropped = this.intervals.filter((i) => i.after < update.next!.dropBefore);
      this.intervals = this.intervals.filter((i) => i.after >= update.next!.dropBefore);
      this.intervals.push({ after: update.next.after, entities: new Map(), sks: [] });
      return dropped.flatMap((i) => i.sks);
    };
    return { items, intervals: JSON.stringify(afters), apply };
  }
}

/**
 * The entity a state item belongs to (the inverse of entityKey in dynamodb-layout.ts):
 * the `e` attribute when the name was hashed, otherwise the unescaped sort-key prefix.
 */
export function entityOfStateItem(item: { sk: string; e?: string }): string {
  if (item.e !== undefined) return item.e;
  const key = item.sk.slice(0, item.sk.indexOf('\u0001'));
  return key.replace(/\u0002([\u0002\u0003])/g, (_, c: string) => (c === '\u0002' ? '\u0002' : '\u0001'));
}
