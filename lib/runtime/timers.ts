/**
 * One operator's timers in one partition: the committed set plus this batch's
 * changes. Timers fire in time order; one key's timers of one time fire in namespace
 * order, so each key sees its timers in (time, namespace) order however the set was
 * rebuilt. Across keys, the timers of one time fire in the order they were queued
 * (registered, or loaded at a recovery): like Flink's, that order is not part of the
 * contract, since results are per key and a recovered batch's outputs replace its
 * first attempt's (they leave only through its committed outbox).
 *
 * Hot path: every window of every key has a timer, and thousands of keys share each
 * window's end. So a timer costs no string building (timers are found by key, then in
 * the key's short list by namespace and time), and the queue is a min-heap of per-time
 * buckets, each firing its timers as they were appended. (Sorting a bucket by key at
 * firing was 12 % of Nexmark Q5's CPU: a pass over cold nodes and key strings, and then
 * firing in an order unrelated to where the keys' state lies in memory.) Nodes carry a
 * `live` flag, so a deleted timer is skipped when its turn comes rather than searched for.
 * A registration allocates only when the timer is new, one object that is both the
 * queue's node and the backend's TimerEntry, and the batch's changes are one list of
 * nodes (flags say add or delete) rather than sets kept in step.
 */
import type { TimerEntry } from '../state/backend.ts';
import { type Bucket, type ChangedEntity, findIn, firstOfKeyAt, type KeyHint, KeyTimers, LIST_MAX, Node, removeAt, slot, type TimerHome, type TimerOwner } from './timer-nodes.ts';

export type { ChangedEntity, TimerHome, TimerOwner } from './timer-nodes.ts';

let reports = 0;

/**
 * Free nodes kept per queue (a window's firing frees about as many as it registers). A
 * slide's firing frees one node per key of the partition, thousands in Nexmark Q5: a
 * smaller bound made the next slide allocate the rest anew (at most ~4 MB per queue kept).
 */
const FREE_MAX = 65_536;

/** Emptied bucket arrays kept per queue (TimerQueue.spareArrays). */
const SPARE_ARRAYS = 8;

/** A commit's timer adds and deletes, and how many of each collect() has written. */
export interface ChangeLists {
  readonly adds: TimerEntry[];
  readonly deletes: TimerEntry[];
  added: number;
  deleted: number;
}

export class TimerQueue {
  /** Min-heap of the buckets by time; the map finds a time's bucket. */
  private readonly order: Bucket[] = [];
  private readonly buckets = new Map<number, Bucket>();
  /** The bucket the last push went to: a firing window's timers all register the same next end. */
  private lastBucket: Bucket | undefined;
  /**
   * Homes of the queue's own, by key, when the owner files no timers on state entries
   * (TimerOwner.homeOf absent); a key leaves with its last node.
   */
  private readonly byKey: Map<string, KeyTimers> | undefined;
  private liveCount = 0;
  /** Nodes added or deleted since the last commit (each once; its flags say which change is left). */
  private changed: (Node | null)[] = [];
  /**
   * How many of `changed` are this batch's: the array is kept across commits (cleared
   * slots set to null) rather than grown again from empty at every commit.
   */
  private changedCount = 0;
  /** This batch's adds (live, not committed) and deletes (committed, not live), kept as they change (countChanges without a pass). */
  private adds = 0;
  private deletes = 0;

  /**
   * The key of the timer pollUpTo() returned last, and its home: a firing window registers
   * its key's next timer from its callback, which then needs no look-up by key.
   */
  private firedKey: string | undefined;
  private firedHome: TimerHome | undefined;
  /**
   * Nodes of deleted timers that nothing refers to any more (committed deletes the backend
   * has applied, adds cancelled in their batch, out of the heap), reused for new timers: a
   * window's firing deletes one timer per key and registers the next, and a fresh object
   * per registration lived long enough (a slide) to be copied by the young-generation GC.
   */
  private readonly free: Node[] = [];
  /**
   * Node arrays of fired buckets, emptied by pop (which keeps their room): a slide's bucket
   * holds a timer per key of the partition, and growing a fresh array to thousands of nodes
   * for every time was a sixth of Q5's timer allocation.
   */
  private readonly spareArrays: Node[][] = [];

  /**
   * `reuse`: the backend keeps no reference to a deleted timer's entry
   * (StateBackend.releasesTimerEntries), so committed-deleted nodes may be reused.
   */
  constructor(
    private readonly owner: TimerOwner = { node: 0, domain: 'event', entityOf: (key) => key },
    private readonly reuse = false,
  ) {
    this.byKey = owner.homeOf === undefined ? new Map() : undefined;
  }

  load(t: TimerEntry): void {
    if (this.find(t.key, t.ns, t.time)) return;
    const n = this.insert(t.node, t.domain, t.time, t.kg, t.key, t.ns, this.homeFor(t.key, t.kg));
    n.committed = true;
    n.changed = false;
    this.adds--;
    this.changed[--this.changedCount] = null;
  }

  register(t: TimerEntry): void {
    const n = this.find(t.key, t.ns, t.time);
    if (n === undefined) this.insert(t.node, t.domain, t.time, t.kg, t.key, t.ns, this.homeFor(t.key, t.kg));
    else if (!n.live) this.revive(n);
  }

  /**
   * register() for this queue's node and domain, the entry built only when the timer is new.
   * `hint`: the key's state entry when the caller holds it (the owner's home of the key,
   * TimerOwner.homeOf): the timer is filed on it without a look-up by key, and firedHint
   * hands it back at the key's firing. Ignored by a queue that keeps homes of its own.
   */
  registerAt(time: number, key: string, kg: number, ns: string, hint?: KeyHint): void {
    const home = this.registrationHome(key, kg, hint);
    const n = findIn(home, this.owner.domain, ns, time);
    if (n === undefined) this.insert(this.owner.node, this.owner.domain, time, kg, key, ns, home);
    else if (!n.live) this.revive(n);
  }

  /** Where a registration files its timer: the caller's entry, the fired key's home (a window registering its next end), or the key's by look-up. */
  private registrationHome(key: string, kg: number, hint: KeyHint | undefined): TimerHome {
    if (hint !== undefined && this.byKey === undefined) return hint;
    const fired = this.firedHome;
    // The fired key's home, while it is still the key's (one of the queue's own leaves with its
    // last node; an entry is kept while it files timers, and firedHome goes at the batch's end).
    if (key === this.firedKey && fired !== undefined && (this.byKey === undefined || this.byKey.get(key) === fired)) return fired;
    return this.homeFor(key, kg);
  }

  /** The key's home, made if absent. */
  private homeFor(key: string, kg: number): TimerHome {
    const byKey = this.byKey;
    if (byKey === undefined) return this.owner.homeOf!(key, kg, true)!;
    let h = byKey.get(key);
    if (h === undefined) byKey.set(key, (h = new KeyTimers(this.owner.entityOf(key), kg)));
    return h;
  }

  /** The key's home if it has one. */
  private homeOf(key: string): TimerHome | undefined {
    return this.byKey === undefined ? this.owner.homeOf!(key, 0, false) : this.byKey.get(key);
  }

  delete(t: TimerEntry): void {
    this.deleteAt(t.time, t.key, t.ns);
  }

  deleteAt(time: number, key: string, ns: string): void {
    const n = this.find(key, ns, time);
    if (n !== undefined && n.live) this.kill(n);
  }

  /** Deleted earlier in this batch: the deletion is cancelled. */
  private revive(n: Node): void {
    // Only committed nodes stay filed once dead: reviving one cancels its delete.
    if (n.committed) this.deletes--;
    else this.adds++;
    n.live = true;
    this.liveCount++;
    if (!n.inHeap) this.push(n);
  }

  /** Timers to add to the backend since the last commit. */
  get added(): TimerEntry[] {
    const out: TimerEntry[] = [];
    this.changesTo(out, undefined);
    return out;
  }

  /** Timers to delete from the backend since the last commit. */
  get deleted(): TimerEntry[] {
    const out: TimerEntry[] = [];
    this.changesTo(undefined, out);
    return out;
  }

  get hasChanges(): boolean {
    return this.changedCount > 0;
  }

  /** Append the adds and deletes since the last commit. */
  changesTo(adds: TimerEntry[] | undefined, deletes: TimerEntry[] | undefined): void {
    for (let i = 0; i < this.changedCount; i++) {
      const n = this.changed[i]!;
      if (n.live === n.committed) continue;
      if (n.live) adds?.push(n);
      else deletes?.push(n);
    }
  }

  /** Add this batch's adds and deletes to `counts` (a commit sizes its lists before collect()). */
  countChanges(counts: { adds: number; deletes: number }): void {
    counts.adds += this.adds;
    counts.deletes += this.deletes;
  }

  /**
   * A commit's changes in one pass: the adds and deletes written into `into`'s lists from its
   * positions on (sized by countChanges(), so no list grows), and with `entities`,
   * changedEntities(entities, interval) (the stamps work the same).
   */
  collect(into: ChangeLists, entities: ChangedEntity[] | undefined, interval: number | undefined): void {
    const call = entities === undefined ? 0 : (interval ?? -++reports);
    for (let i = 0; i < this.changedCount; i++) {
      const n = this.changed[i]!;
      if (n.live === n.committed) continue;
      if (n.live) into.adds[into.added++] = n;
      else into.deletes[into.deleted++] = n;
      if (entities === undefined) continue;
      const h = n.home;
      if (h.timersReported === call) continue;
      h.timersReported = call;
      entities.push(h);
    }
  }

  /**
   * Append the entities whose timers changed since the last commit, each once. `interval`:
   * the tracked interval the commit goes to (incremental snapshots); a key reported for it by
   * an earlier commit is left out (it is tracked already). Without it, every changed key.
   */
  changedEntities(out: ChangedEntity[], interval?: number): void {
    // Calls without an interval get a stamp of their own, below any interval's.
    const call = interval ?? -++reports;
    for (let i = 0; i < this.changedCount; i++) {
      const n = this.changed[i]!;
      if (n.live === n.committed) continue;
      const h = n.home;
      if (h.timersReported === call) continue;
      h.timersReported = call;
      out.push(h);
    }
  }

  /** Earliest live timer time, or +Infinity. */
  peekTime(): number {
    const b = this.firstBucket();
    return b === undefined ? Number.POSITIVE_INFINITY : b.time;
  }

  /** The state entry of the key of the timer pollUpTo() returned last (its home; undefined: a queue with homes of its own). */
  get firedHint(): KeyHint | undefined {
    return this.byKey === undefined ? this.firedHome : undefined;
  }

  /** Remove and return the earliest live timer at or before `upTo`. */
  pollUpTo(upTo: number): TimerEntry | undefined {
    if (this.order.length === 0 || this.order[0].time > upTo) return undefined;
    const b = this.firstBucket();
    if (b === undefined || b.time > upTo) return undefined;
    let n = b.nodes[b.next];
    // A key with more than one timer: its timer of this time with the least namespace fires
    // first. Fired ahead of its place, it is dead when its place comes (skipped there);
    // the node at the firing position stays for the next poll. No namespace is less than ''
    // (the windows' timers without lateness): their key's other timers are not looked at.
    if (n.ns !== '' && n.home.timerOne === undefined) n = firstOfKeyAt(n.home, n);
    if (n === b.nodes[b.next]) {
      b.next++;
      n.inHeap = false;
    }
    this.kill(n);
    this.firedKey = n.key;
    this.firedHome = n.home;
    return n;
  }

  /** Live timers at or before `upTo` without removing them (for prefetching their keys), in no particular order. */
  liveUpTo(upTo: number): TimerEntry[] {
    const out: TimerEntry[] = [];
    // Every live timer is queued, once (dead ones may linger in their bucket until skipped).
    for (const b of this.order) {
      if (b.time > upTo) continue;
      for (const n of b.nodes) if (n.live) out.push(n);
    }
    return out;
  }

  /** Live timers of one key (incremental snapshots: a changed key's timers travel with its state). */
  liveOf(key: string): TimerEntry[] {
    const out: TimerEntry[] = [];
    this.liveInto(key, out);
    return out;
  }

  /** liveOf, appended to `out`. */
  liveInto(key: string, out: TimerEntry[]): void {
    const h = this.homeOf(key);
    if (h === undefined) return;
    const domain = this.owner.domain;
    const one = h.timerOne;
    if (one !== undefined) {
      if (one.live && one.domain === domain) out.push(one);
    } else if (h.timerMap !== undefined) {
      for (const n of h.timerMap.values()) if (n.live && n.domain === domain) out.push(n);
    } else if (h.timerList !== undefined) for (const n of h.timerList) if (n.live && n.domain === domain) out.push(n);
  }

  get size(): number {
    return this.liveCount;
  }

  clearChanges(): void {
    // The batch is over: a key fired in it may lose its entry (forgotten with its last timer).
    this.firedKey = undefined;
    this.firedHome = undefined;
    // Nothing added or deleted (added and deleted hold changed nodes only): nothing to clear,
    // and Map/Set clear() would allocate fresh tables for every queue at every commit.
    if (this.changedCount === 0) return;
    const changed = this.changed;
    for (let i = 0; i < this.changedCount; i++) {
      const n = changed[i]!;
      changed[i] = null;
      n.changed = false;
      if (n.live) n.committed = true;
      else {
        if (n.committed) {
          n.committed = false;
          this.remove(n);
        }
        // Out of every list now (the backend applied its delete, if it had it): reusable.
        if (this.reuse && !n.inHeap && this.free.length < FREE_MAX) this.free.push(n);
      }
    }
    this.changedCount = 0;
    this.adds = 0;
    this.deletes = 0;
    // A batch far larger than usual (a recovery's firings) does not keep its slots for good.
    if (changed.length > 65_536) this.changed = [];
  }

  private find(key: string, ns: string, time: number): Node | undefined {
    const h = this.homeOf(key);
    return h === undefined ? undefined : findIn(h, this.owner.domain, ns, time);
  }

  /** `home`: the key's home (looked up, or handed in, by the caller). */
  private insert(node: number, domain: 'event' | 'processing', time: number, kg: number, key: string, ns: string, home: TimerHome): Node {
    const free = this.free;
    const n = free.length > 0 && node === this.owner.node && domain === this.owner.domain ? free.pop()!.renew(time, kg, key, ns, home) : new Node(node, domain, time, kg, key, ns, home);
    if (home.timerMap !== undefined) home.timerMap.set(slot(n.domain, n.ns, n.time), n);
    else if (home.timerList !== undefined) {
      if (home.timerList.length < LIST_MAX) home.timerList.push(n);
      else {
        home.timerMap = new Map(home.timerList.map((x) => [slot(x.domain, x.ns, x.time), x]));
        home.timerMap.set(slot(n.domain, n.ns, n.time), n);
        home.timerList = undefined;
      }
    } else if (home.timerOne === undefined || (this.reuse && !home.timerOne.live)) {
      // No timer yet, or the key's one timer deleted in this batch (a window's fired timer,
      // whose firing registers the next): the new one takes its place, no list. The deleted
      // one stays in `changed` for the commit's delete; registering it again makes a new
      // node for the same timer, so a commit may delete one object and add another of the
      // same timer: only for a store that files timers by object (`reuse`: the in-memory
      // store, which applies deletes first). DynamoDB refuses two operations on one item in
      // a transaction: there the deleted timer stays filed and a registration revives it.
      home.timerOne = n;
    } else {
      home.timerList = [home.timerOne, n];
      home.timerOne = undefined;
    }
    this.liveCount++;
    this.adds++;
    this.changed[this.changedCount++] = n;
    this.push(n);
    return n;
  }

  /** No longer live: cancel an uncommitted add, or record the deletion of a committed timer. */
  private kill(n: Node): void {
    n.live = false;
    this.liveCount--;
    if (n.committed) this.deletes++;
    else this.adds--;
    if (n.committed) {
      if (!n.changed) {
        n.changed = true;
        this.changed[this.changedCount++] = n;
      }
    } else this.remove(n);
  }

  /** Unfile a node from its key's home (a home of the queue's own goes with its last node). */
  private remove(n: Node): void {
    const h = n.home;
    if (h.timerMap !== undefined) {
      const s = slot(n.domain, n.ns, n.time);
      if (h.timerMap.get(s) !== n) return;
      h.timerMap.delete(s);
      if (h.timerMap.size === 0) this.homeEmptied(h, n.key);
      return;
    }
    if (h.timerOne !== undefined) {
      if (h.timerOne !== n) return;
      h.timerOne = undefined;
      this.homeEmptied(h, n.key);
      return;
    }
    // A node is filed once, and a home of the queue's own leaves byKey only with its last node.
    const list = h.timerList;
    const i = list === undefined ? -1 : list.indexOf(n);
    if (i < 0) return;
    removeAt(list!, i);
    if (list!.length === 0) this.homeEmptied(h, n.key);
  }

  private homeEmptied(h: TimerHome, key: string): void {
    // Back to one inline: a key with many timers once may hold few later.
    h.timerMap = undefined;
    h.timerList = undefined;
    if (this.byKey !== undefined && this.byKey.get(key) === h) this.byKey.delete(key);
  }

  /** The bucket of the earliest time with a live timer, positioned on it (dead ones skipped, empty buckets dropped). */
  private firstBucket(): Bucket | undefined {
    while (this.order.length > 0) {
      const b = this.order[0];
      const nodes = b.nodes;
      while (b.next < nodes.length && !nodes[b.next].live) nodes[b.next++].inHeap = false;
      if (b.next < nodes.length) return b;
      this.buckets.delete(b.time);
      if (this.lastBucket === b) this.lastBucket = undefined;
      this.popBucket();
      this.spare(nodes);
    }
    return undefined;
  }

  /** Queue a node for firing: at the end of its time's bucket (also of one being fired). */
  private push(n: Node): void {
    n.inHeap = true;
    const last = this.lastBucket;
    const b = last !== undefined && last.time === n.time ? last : this.buckets.get(n.time);
    if (b === undefined) {
      const nodes = this.spareArrays.pop() ?? [];
      nodes.push(n);
      const fresh: Bucket = { time: n.time, nodes, next: 0 };
      this.buckets.set(n.time, fresh);
      this.pushBucket(fresh);
      this.lastBucket = fresh;
      return;
    }
    this.lastBucket = b;
    b.nodes.push(n);
  }

  /** Keep a dropped bucket's array for a later bucket (a few: the slides to come). */
  private spare(nodes: Node[]): void {
    if (this.spareArrays.length >= SPARE_ARRAYS) return;
    while (nodes.length > 0) nodes.pop();
    this.spareArrays.push(nodes);
  }

  private pushBucket(b: Bucket): void {
    const h = this.order;
    let i = h.length;
    h.push(b);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (h[p].time <= b.time) break;
      h[i] = h[p];
      i = p;
    }
    h[i] = b;
  }

  private popBucket(): void {
    const h = this.order;
    const last = h.pop()!;
    if (h.length === 0) return;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= h.length) break;
      const r = l + 1;
      const m = r < h.length && h[r].time < h[l].time ? r : l;
      if (h[m].time >= last.time) break;
      h[i] = h[m];
      i = m;
    }
    h[i] = last;
  }
}
