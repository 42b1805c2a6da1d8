/**
 * One operator's timers in one partition: the committed set plus this batch's
 * changes, with a min-heap for firing in (time, key, namespace) order. The order is
 * total, so firing is deterministic and does not depend on how the set was rebuilt.
 */
import { type TimerEntry, timerId } from '../state/backend.ts';

function before(a: TimerEntry, b: TimerEntry): boolean {
  if (a.time !== b.time) return a.time < b.time;
  if (a.key !== b.key) return a.key < b.key;
  return a.ns < b.ns;
}

export class TimerQueue {
  private readonly heap: TimerEntry[] = [];
  private readonly live = new Map<string, TimerEntry>();
  /** Changes since the last commit. */
  readonly added = new Map<string, TimerEntry>();
  readonly deleted = new Map<string, TimerEntry>();

  load(t: TimerEntry): void {
    this.live.set(timerId(t), t);
    this.push(t);
  }

  register(t: TimerEntry): void {
    const id = timerId(t);
    if (this.live.has(id)) return;
    this.live.set(id, t);
    this.push(t);
    if (this.deleted.has(id)) this.deleted.delete(id);
    else this.added.set(id, t);
  }

  delete(t: TimerEntry): void {
    const id = timerId(t);
    const cur = this.live.get(id);
    if (!cur) return;
    this.live.delete(id);
    if (this.added.has(id)) this.added.delete(id);
    else this.deleted.set(id, cur);
  }

  /** Earliest live timer time, or +Infinity. */
  peekTime(): number {
    this.dropDead();
    return this.heap.length ? this.heap[0].time : Number.POSITIVE_INFINITY;
  }

  /** Remove and return the earliest live timer at or before `upTo`. */
  pollUpTo(upTo: number): TimerEntry | undefined {
    this.dropDead();
    if (!this.heap.length || this.heap[0].time > upTo) return undefined;
    const t = this.pop()!;
    this.delete(t);
    return t;
  }

  /** Live timers at or before `upTo` without removing them (for prefetching their keys). */
  liveUpTo(upTo: number): TimerEntry[] {
    const out: TimerEntry[] = [];
    for (const t of this.live.values()) if (t.time <= upTo) out.push(t);
    return out;
  }

  get size(): number {
    return this.live.size;
  }

  clearChanges(): void {
    this.added.clear();
    this.deleted.clear();
  }

  private dropDead(): void {
    while (this.heap.length && this.live.get(timerId(this.heap[0])) !== this.heap[0]) this.pop();
  }

  private push(t: TimerEntry): void {
    const h = this.heap;
    h.push(t);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(h[i], h[p])) break;
      [h[i], h[p]] = [h[p], h[i]];
      i = p;
    }
  }

  private pop(): TimerEntry | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length && last) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && before(h[l], h[m])) m = l;
        if (r < h.length && before(h[r], h[m])) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m], h[i]];
        i = m;
      }
    }
    return top;
  }
}
