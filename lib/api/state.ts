/**
 * Keyed state, declared up front by each keyed function so that the runtime knows
 * every state's name and kind (savepoint compatibility, prefetching, TTL).
 * Handles are bound to the key of the record or timer being processed.
 */

export interface StateOptions {
  /**
   * Time to live in processing-time milliseconds, refreshed on every write.
   * An expired value reads as absent. Default: no expiry.
   */
  readonly ttlMs?: number;
}

export type StateDescriptor =
  | { readonly kind: 'value'; readonly ttlMs?: number; readonly __v?: unknown }
  | { readonly kind: 'list'; readonly ttlMs?: number; readonly __v?: unknown }
  | { readonly kind: 'map'; readonly ttlMs?: number; readonly __v?: unknown; readonly __k?: unknown };

export interface ValueStateDescriptor<T> {
  readonly kind: 'value';
  readonly ttlMs?: number;
  readonly __v?: T;
}
export interface ListStateDescriptor<T> {
  readonly kind: 'list';
  readonly ttlMs?: number;
  readonly __v?: T;
}
export interface MapStateDescriptor<K extends string | number, V> {
  readonly kind: 'map';
  readonly ttlMs?: number;
  readonly __k?: K;
  readonly __v?: V;
}

export function valueState<T>(options: StateOptions = {}): ValueStateDescriptor<T> {
  return { kind: 'value', ttlMs: options.ttlMs };
}
export function listState<T>(options: StateOptions = {}): ListStateDescriptor<T> {
  return { kind: 'list', ttlMs: options.ttlMs };
}
export function mapState<K extends string | number, V>(options: StateOptions = {}): MapStateDescriptor<K, V> {
  return { kind: 'map', ttlMs: options.ttlMs };
}

export interface ValueState<T> {
  get(): T | undefined;
  set(value: T): void;
  clear(): void;
}

export interface ListState<T> {
  get(): T[];
  add(value: T): void;
  update(values: readonly T[]): void;
  clear(): void;
}

export interface MapState<K extends string | number, V> {
  get(key: K): V | undefined;
  set(key: K, value: V): void;
  has(key: K): boolean;
  delete(key: K): void;
  entries(): [K, V][];
  keys(): K[];
  clear(): void;
}

export type StateSpec = Record<string, ValueStateDescriptor<any> | ListStateDescriptor<any> | MapStateDescriptor<any, any>>;

/** The handle type for each declared state. */
export type StateHandles<S extends StateSpec> = {
  [N in keyof S]: S[N] extends ValueStateDescriptor<infer T>
    ? ValueState<T>
    : S[N] extends ListStateDescriptor<infer T>
      ? ListState<T>
      : S[N] extends MapStateDescriptor<infer K, infer V>
        ? MapState<K, V>
        : never;
};
