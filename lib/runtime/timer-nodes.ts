/**
 * The timer queue's parts (timers.ts): one object per timer, which is both the queue's
 * node and the TimerEntry the backend stores; a key's timers; the per-time buckets.
 */
import type { TimerEntry } from '../state/backend.ts';

/**
 * A timer: the entry the backend stores (its public fields, as a TimerEntry) and the queue's
 * bookkeeping in private fields, which JSON and object spreads leave out: one object per timer.
 */
export class Node implements TimerEntry {
  readonly node: number;
  readonly domain: 'event' | 'processing';
  readonly time: number;
  readonly kg: number;
  readonly key: string;
  readonly ns: string;
  /** The key's timers this node is filed under. */
  #kt: KeyTimers;
  #live = true;
  #inHeap = false;
  /** The backend has it (loaded at recovery, or added by an earlier commit). */
  #committed = false;
  /** In the list of nodes changed since the last commit. */
  #changed = true;

  constructor(node: number, domain: 'event' | 'processing', time: number, kg: number, key: string, ns: string, kt: KeyTimers) {
    this.node = node;
    this.domain = domain;
    this.time = time;
    this.kg = kg;
    this.key = key;
    this.ns = ns;
    this.#kt = kt;
  }

  get kt(): KeyTimers {
    return this.#kt;
  }
  get live(): boolean {
    return this.#live;
  }
  set live(v: boolean) {
    this.#live = v;
  }
  get inHeap(): boolean {
    return this.#inHeap;
  }
  set inHeap(v: boolean) {
    this.#inHeap = v;
  }
  get committed(): boolean {
    return this.#committed;
  }
  set committed(v: boolean) {
    this.#committed = v;
  }
  get changed(): boolean {
    return this.#changed;
  }
  set changed(v: boolean) {
    this.#changed = v;
  }
}

/**
 * A key's timers (live, and committed ones deleted in this batch): usually one or two,
 * searched in a list; a map by (namespace, time) only for keys with many.
 */
export interface KeyTimers {
  list: Node[];
  map?: Map<string, Node>;
  /** The key's entity string, built once for the key's timers (incremental snapshots track it). */
  entity?: string;
  /** The key as a changed entity, reported as is by every commit that changes the key's timers. */
  dirty?: ChangedEntity;
  /** The interval, or the call without one, that changedEntities() last reported this key for (NaN: none). */
  reported: number;
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
