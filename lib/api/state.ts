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

/**
 * A state handle whose kind and value type are unknown to the compiler: what
 * `ctx.state.name` is when a keyed function's state spec was not inferred (see
 * {@link UntypedStateHandles}).
 */
export type UntypedStateHandle = ValueState<any> & ListState<any> & MapState<any, any>;

/**
 * The handles of a state spec TypeScript could not infer: `KeyedStream.process<Out>(fn)`
 * gives the output type alone, and a call's type arguments are either all given or all
 * inferred, so the spec stays the wide {@link StateSpec} and every name reads as an
 * {@link UntypedStateHandle}. The runtime binds the same handles either way.
 */
export type UntypedStateHandles = Record<string, UntypedStateHandle>;

/**
 * The handle type for each declared state: `ctx.state.total` is a `ValueState<number>`
 * for `state: { total: valueState<number>() }`. For the wide {@link StateSpec} (a spec
 * not inferred), {@link UntypedStateHandles}.
 */
export type StateHandles<S extends StateSpec> = string extends keyof S ? UntypedStateHandles : DeclaredStateHandles<S>;

/** The handles of a spec whose names are known. */
export type DeclaredStateHandles<S extends StateSpec> = {
  [N in keyof S]: S[N] extends ValueStateDescriptor<infer T>
    ? ValueState<T>
    : S[N] extends ListStateDescriptor<infer T>
      ? ListState<T>
      : S[N] extends MapStateDescriptor<infer K, infer V>
        ? MapState<K, V>
        : never;
};
