/**
 * The timer queue's parts (timers.ts): one object per timer, which is both the queue's
 * node and the TimerEntry the backend stores; where a key's timers are filed (its home);
 * the per-time buckets.
 */
import type { SlottedTimerEntry } from '../state/backend.ts';

/**
 * A timer: the entry the backend stores (its public fields, as a TimerEntry) and the queue's
 * bookkeeping in private fields, which JSON and object spreads leave out: one object per timer.
 */
export class Node implements SlottedTimerEntry {
  // Not readonly to the queue: a node nothing refers to any more is reused for a new timer (TimerQueue.free).
  node: number;
  domain: 'event' | 'processing';
  time: number;
  kg: number;
  key: string;
  ns: string;
  /** Where the key's timers are filed (its state entry, or a home of the queue's own). */
  #home: TimerHome;
  /** LIVE | IN_HEAP | COMMITTED | CHANGED: one field rather than four (one object per timer). */
  #flags = LIVE | CHANGED;
  /** Where the memory store files this entry (SlottedTimerEntry), -1: nowhere. */
  #storeSlot = -1;

  constructor(node: number, domain: 'event' | 'processing', time: number, kg: number, key: string, ns: string, home: TimerHome) {
    this.node = node;
    this.domain = domain;
    this.time = time;
    this.kg = kg;
    this.key = key;
    this.ns = ns;
    this.#home = home;
  }

  /** A free node as a new timer of its queue's node and domain (the constructor's work, without the allocation). */
  renew(time: number, kg: number, key: string, ns: string, home: TimerHome): this {
    this.time = time;
    this.kg = kg;
    this.key = key;
    this.ns = ns;
    this.#home = home;
    this.#flags = LIVE | CHANGED;
    return this;
  }

  get storeSlot(): number {
    return this.#storeSlot;
  }
  set storeSlot(v: number) {
    this.#storeSlot = v;
  }

  get home(): TimerHome {
    return this.#home;
  }
  get live(): boolean {
    return (this.#flags & LIVE) !== 0;
  }
  set live(v: boolean) {
    this.#flags = v ? this.#flags | LIVE : this.#flags & ~LIVE;
  }
  /** Queued in its time's bucket. */
  get inHeap(): boolean {
    return (this.#flags & IN_HEAP) !== 0;
  }
  set inHeap(v: boolean) {
    this.#flags = v ? this.#flags | IN_HEAP : this.#flags & ~IN_HEAP;
  }
  /** The backend has it (loaded at recovery, or added by an earlier commit). */
  get committed(): boolean {
    return (this.#flags & COMMITTED) !== 0;
  }
  set committed(v: boolean) {
    this.#flags = v ? this.#flags | COMMITTED : this.#flags & ~COMMITTED;
  }
  /** In the list of nodes changed since the last commit. */
  get changed(): boolean {
    return (this.#flags & CHANGED) !== 0;
  }
  set changed(v: boolean) {
    this.#flags = v ? this.#flags | CHANGED : this.#flags & ~CHANGED;
  }
}

const LIVE = 1;
const IN_HEAP = 2;
const COMMITTED = 4;
const CHANGED = 8;

/**
 * Where a key's timers are filed: the key's state entry (EntityEntry, which keeps these
 * fields for the runtime), so that a key is one object for its state and its timers, and
 * a timer needs no look-up by key when its registration comes with the entry. The homes
 * hold the timers of both domains of one operator: live ones, and committed ones deleted
 * in this batch (so that registering again revives them): the key's one timer inline (most
 * keys have one: a new array per key was a tenth of Nexmark Q8's profile), a list searched
 * by (domain, namespace, time) once it has more, a map only for keys with many. A home is also what a commit reports
 * as the key's changed entity (ChangedEntity: entity and kg).
 */
export interface TimerHome {
  readonly entity: string;
  readonly kg: number;
  /** The key's timer while it has just one (then timerList and timerMap are unused). */
  timerOne: Node | undefined;
  /** Undefined until the key's second timer. */
  timerList: Node[] | undefined;
  timerMap: Map<string, Node> | undefined;
  /** The interval, or the call without one, that changedEntities() last reported this key for (NaN: none). */
  timersReported: number;
}

/** A home of the queue's own, for owners without state entries (TimerOwner.homeOf absent: tests, tools). */
export class KeyTimers implements TimerHome {
  timerOne: Node | undefined = undefined;
  timerList: Node[] | undefined = undefined;
  timerMap: Map<string, Node> | undefined = undefined;
  timersReported = Number.NaN;
  constructor(
    readonly entity = '',
    readonly kg = 0,
  ) {}
}

/** A registration's view of the key's state: its state entry, which the queue files the key's timers on. */
export type KeyHint = TimerHome;

/** An entity whose timers changed (TrackingUpdate.entities); never changed once built. */
export interface ChangedEntity {
  readonly entity: string;
  readonly kg: number;
}

/** The owner of a queue: its timers' node id and domain, and where a key's timers are filed. */
export interface TimerOwner {
  readonly node: number;
  readonly domain: 'event' | 'processing';
  entityOf(key: string): string;
  /**
   * The key's home (its state entry), made when `create` and absent. Without it the queue
   * keeps homes of its own, by key. A home given out here must stay the key's while it
   * files timers (the overlay keeps such entries: EntityEntry.holdsTimers).
   */
  homeOf?(key: string, kg: number, create: boolean): TimerHome | undefined;
}

export const LIST_MAX = 8;

export const slot = (domain: 'event' | 'processing', ns: string, time: number) => (domain === 'event' ? 'e' : 'p') + ns + '\u0001' + time;

/** A key's timer by (domain, namespace, time). */
export function findIn(h: TimerHome, domain: 'event' | 'processing', ns: string, time: number): Node | undefined {
  const one = h.timerOne;
  if (one !== undefined) return one.time === time && one.ns === ns && one.domain === domain ? one : undefined;
  if (h.timerMap !== undefined) return h.timerMap.get(slot(domain, ns, time));
  const list = h.timerList;
  if (list === undefined) return undefined;
  for (let i = 0; i < list.length; i++) {
    const n = list[i];
    if (n.time === time && n.ns === ns && n.domain === domain) return n;
  }
  return undefined;
}

/** Remove list[i], keeping the order (splice would allocate the array of what it removes). */
export function removeAt<T>(list: T[], i: number): void {
  for (let j = i + 1; j < list.length; j++) list[j - 1] = list[j];
  list.pop();
}

/**
 * The live timer of `n`'s key, domain and time with the least namespace (`n` itself when
 * none is less): one key's timers of one time fire in namespace order.
 */
export function firstOfKeyAt(h: TimerHome, n: Node): Node {
  let best = n;
  const list = h.timerList;
  if (list !== undefined) {
    for (let i = 0; i < list.length; i++) if (firesBefore(list[i], best, n)) best = list[i];
  } else if (h.timerMap !== undefined) {
    for (const x of h.timerMap.values()) if (firesBefore(x, best, n)) best = x;
  }
  return best;
}

/** `x` is live, of `n`'s time and domain, and of a lesser namespace than `best` (a function, not a closure: one per call would allocate). */
function firesBefore(x: Node, best: Node, n: Node): boolean {
  return x.ns < best.ns && x.live && x.time === n.time && x.domain === n.domain;
}

/** The timers of one time, in the order they were queued; `next` is the firing position. */
export interface Bucket {
  readonly time: number;
  nodes: Node[];
  next: number;
}
