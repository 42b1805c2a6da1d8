/**
 * One operator's timers in one partition: the committed set plus this batch's
 * changes, with a min-heap for firing in (time, key, namespace) order. The order is
 * total, so firing is deterministic and does not depend on how the set was rebuilt.
 *
 * Hot path: every window of every key has a timer, so a timer costs no string
 * building. Timers are found by key, then (when a key has several) by namespace and
 * time; the heap holds nodes whose `live` flag says whether they still count, so a
 * deleted timer is dropped when it reaches the top instead of being searched for.
 */
import type { TimerEntry } from '../state/backend.ts';

interface Node {
  readonly time: number;
  readonly key: string;
  readonly ns: string;
  readonly entry: TimerEntry;
  live: boolean;
  inHeap: boolean;
  /** The backend has it (loaded at recovery, or added by an earlier commit). */
  committed: boolean;
}

/** A key's timers: usually one, so no map until there are two. */
interface KeyTimers {
  one?: Node;
  many?: Map<string, Node>;
}

const slot = (ns: string, time: number) => ns + '\u0001' + time;

function before(a: Node, b: Node): boolean {
  if (a.time !== b.time) return a.time < b.time;
  if (a.key !== b.key) return a.key < b.key;
  return a.ns < b.ns;
}

export class TimerQueue {
  private readonly heap: Node[] = [];
  /** Live timers, and committed ones deleted in this batch (so that registering again revives them). */
  private readonly byKey = new Map<string, KeyTimers>();
  private liveCount = 0;
  /** Nodes added or deleted since the last commit. */
  private changed: Node[] = [];
  /** Changes since the last commit (entries to add to / delete from the backend). */
  readonly added = new Set<TimerEntry>();
  readonly deleted = new Set<TimerEntry>();

  load(t: TimerEntry): void {
    if (this.find(t.key, t.ns, t.time)) return;
    const n = this.insert(t);
    n.committed = true;
  }

  register(t: TimerEntry): void {
    const n = this.find(t.key, t.ns, t.time);
    if (n === undefined) {
      this.added.add(this.insert(t).entry);
    } else if (!n.live) {
      // Deleted earlier in this batch: the deletion is cancelled.
      n.live = true;
      this.liveCount++;
      this.deleted.delete(n.entry);
      if (!n.inHeap) this.push(n);
    }
  }

  delete(t: TimerEntry): void {
    const n = this.find(t.key, t.ns, t.time);
    if (n !== undefined && n.live) this.kill(n);
  }

  /** Earliest live timer time, or +Infinity. */
  peekTime(): number {
    this.dropDead();
    return this.heap.length ? this.heap[0].time : Number.POSITIVE_INFINITY;
  }

  /** Remove and return the earliest live timer at or before `upTo`. */
  pollUpTo(upTo: number): TimerEntry | undefined {
    this.dropDead();
    const h = this.heap;
    if (h.length === 0 || h[0].time > upTo) return undefined;
    const n = this.pop();
    this.kill(n);
    return n.entry;
  }

  /** Live timers at or before `upTo` without removing them (for prefetching their keys). */
  liveUpTo(upTo: number): TimerEntry[] {
    const out: TimerEntry[] = [];
    const take = (n: Node) => {
      if (n.live && n.time <= upTo) out.push(n.entry);
    };
    for (const kt of this.byKey.values()) {
      if (kt.one) take(kt.one);
      else for (const n of kt.many!.values()) take(n);
    }
    return out;
  }

  get size(): number {
    return this.liveCount;
  }

  clearChanges(): void {
    for (const n of this.changed) {
      if (n.live) n.committed = true;
      else if (n.committed) {
        n.committed = false;
        this.remove(n);
      }
    }
    this.changed = [];
    this.added.clear();
    this.deleted.clear();
  }

  private find(key: string, ns: string, time: number): Node | undefined {
    const kt = this.byKey.get(key);
    if (kt === undefined) return undefined;
    if (kt.one !== undefined) return kt.one.time === time && kt.one.ns === ns ? kt.one : undefined;
    return kt.many!.get(slot(ns, time));
  }

  private insert(t: TimerEntry): Node {
    const n: Node = { time: t.time, key: t.key, ns: t.ns, entry: t, live: true, inHeap: false, committed: false };
    const kt = this.byKey.get(t.key);
    if (kt === undefined) this.byKey.set(t.key, { one: n });
    else if (kt.one !== undefined) {
      kt.many = new Map([
        [slot(kt.one.ns, kt.one.time), kt.one],
        [slot(n.ns, n.time), n],
      ]);
      kt.one = undefined;
    } else kt.many!.set(slot(n.ns, n.time), n);
    this.liveCount++;
    this.changed.push(n);
    this.push(n);
    return n;
  }

  /** No longer live: cancel an uncommitted add, or record the deletion of a committed timer. */
  private kill(n: Node): void {
    n.live = false;
    this.liveCount--;
    if (n.committed) {
      this.deleted.add(n.entry);
      this.changed.push(n);
    } else {
      this.added.delete(n.entry);
      this.remove(n);
    }
  }

  private remove(n: Node): void {
    const kt = this.byKey.get(n.key);
    if (kt === undefined) return;
    if (kt.one === n) this.byKey.delete(n.key);
    else if (kt.many !== undefined && kt.many.get(slot(n.ns, n.time)) === n) {
      kt.many.delete(slot(n.ns, n.time));
      if (kt.many.size === 0) this.byKey.delete(n.key);
    }
  }

  private dropDead(): void {
    const h = this.heap;
    while (h.length && !h[0].live) this.pop();
  }

  private push(n: Node): void {
    n.inHeap = true;
    const h = this.heap;
    h.push(n);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(n, h[p])) break;
      h[i] = h[p];
      i = p;
    }
    h[i] = n;
  }

  private pop(): Node {
    const h = this.heap;
    const top = h[0];
    top.inHeap = false;
    const last = h.pop()!;
    if (h.length) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= h.length) break;
        const r = l + 1;
        const m = r < h.length && before(h[r], h[l]) ? r : l;
        if (!before(h[m], last)) break;
        h[i] = h[m];
        i = m;
      }
      h[i] = last;
    }
    return top;
  }
}
