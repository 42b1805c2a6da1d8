/**
 * The timer queue's parts (timers.ts): one object per timer, which is both the queue's
 * node and the TimerEntry the backend stores; a key's timers; the per-time buckets.
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
  /** The key's timers this node is filed under. */
  #kt: KeyTimers;
  /** LIVE | IN_HEAP | COMMITTED | CHANGED: one field rather than four (one object per timer). */
  #flags = LIVE | CHANGED;
  /** Where the memory store files this entry (SlottedTimerEntry), -1: nowhere. */
  #storeSlot = -1;

  constructor(node: number, domain: 'event' | 'processing', time: number, kg: number, key: string, ns: string, kt: KeyTimers) {
    this.node = node;
    this.domain = domain;
    this.time = time;
    this.kg = kg;
    this.key = key;
    this.ns = ns;
    this.#kt = kt;
  }

  /** A free node as a new timer of its queue's node and domain (the constructor's work, without the allocation). */
  renew(time: number, kg: number, key: string, ns: string, kt: KeyTimers): this {
    this.time = time;
    this.kg = kg;
    this.key = key;
    this.ns = ns;
    this.#kt = kt;
    this.#flags = LIVE | CHANGED;
    return this;
  }

  get storeSlot(): number {
    return this.#storeSlot;
  }
  set storeSlot(v: number) {
    this.#storeSlot = v;
  }

  get kt(): KeyTimers {
    return this.#kt;
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
 * A key's timers (live, and committed ones deleted in this batch): usually one or two,
 * searched in a list; a map by (namespace, time) only for keys with many. A class with
 * every field set at construction: fields added later would give the objects several
 * shapes and a property store each.
 */
export class KeyTimers {
  list: Node[];
  map: Map<string, Node> | undefined = undefined;
  /** The key's entity string, built once for the key's timers (incremental snapshots track it). */
  entity: string | undefined = undefined;
  /**
   * What the registering context last held for the key (its state entry), handed back when
   * the key's timer fires so that the callback's state needs no look-up by key; the context
   * checks it is still the key's (TimerQueue.firedHint).
   */
  hint: KeyHint | undefined = undefined;
  /** The key as a changed entity, reported as is by every commit that changes the key's timers. */
  dirty: ChangedEntity | undefined = undefined;
  /** The interval, or the call without one, that changedEntities() last reported this key for (NaN: none). */
  reported = Number.NaN;

  constructor() {
    // Room for two: a firing window's key holds its fired timer and its next one until the
    // commit, and a list grown from empty by push takes room for 17.
    // (Emptied by pop: setting the length to 0 would drop the room.)
    const list: Node[] = [undefined as unknown as Node, undefined as unknown as Node];
    list.pop();
    list.pop();
    this.list = list;
  }
}

/** A registration's view of the key's state: its entity string, and whatever the context keeps with it. */
export interface KeyHint {
  readonly entity: string;
}

/** An entity whose timers changed (TrackingUpdate.entities); never changed once built. */
export interface ChangedEntity {
  readonly entity: string;
  readonly kg: number;
}

/** The owner of a queue: its timers' node id and domain, and how a key names its entity. */
export interface TimerOwner {
  readonly node: number;
  readonly domain: 'event' | 'processing';
  entityOf(key: string): string;
}

export const LIST_MAX = 8;

export const slot = (ns: string, time: number) => ns + '\u0001' + time;

/** A key's timer by (namespace, time). */
export function findIn(kt: KeyTimers, ns: string, time: number): Node | undefined {
  if (kt.map !== undefined) return kt.map.get(slot(ns, time));
  for (const n of kt.list) if (n.time === time && n.ns === ns) return n;
  return undefined;
}

/** Remove list[i], keeping the order (splice would allocate the array of what it removes). */
export function removeAt<T>(list: T[], i: number): void {
  for (let j = i + 1; j < list.length; j++) list[j - 1] = list[j];
  list.pop();
}

/** (key, namespace) order within one time. */
export function compare(a: Node, b: Node): number {
  if (a.key !== b.key) return a.key < b.key ? -1 : 1;
  return a.ns < b.ns ? -1 : a.ns > b.ns ? 1 : 0;
}

/** The timers of one time, sorted once firing reaches them; `next` is the firing position. */
export interface Bucket {
  readonly time: number;
  nodes: Node[];
  sorted: boolean;
  next: number;
}
