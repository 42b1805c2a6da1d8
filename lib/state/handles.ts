/**
 * Typed state handles over an operator context's raw fields (keyed-fields.ts). Policy only (TTL,
 * field naming); the storage primitives are the backend's.
 * Field layout: value and list states use their name; a map entry uses
 * `${name}\u0002${JSON of the map key}`. With TTL a value or map entry is stored wrapped
 * with its expiry (`{v, x}`); a list keeps its elements in its field, as without TTL, and
 * its expiry in `${name}\u0002expires` (so an add appends, not rewrites the list).
 */
import type { ListState, MapState, StateDescriptor, StateSpec, StateHandles, ValueState } from '../api/state.ts';
import type { KeyedFields } from './keyed-fields.ts';

interface Expiring {
  readonly v: unknown;
  readonly x: number;
}

const MAP_SEP = '\u0002';

/** TTL wrapper: an expired value reads as absent and is deleted. */
class TtlCell {
  constructor(
    private readonly ctx: KeyedFields,
    private readonly ttlMs: number | undefined,
  ) {}

  read(field: string): unknown {
    const raw = this.ctx.stateGet(field);
    if (raw === undefined || this.ttlMs === undefined) return raw;
    const e = raw as Expiring;
    if (e.x <= this.ctx.clock.now()) {
      this.ctx.stateDelete(field);
      return undefined;
    }
    return e.v;
  }

  write(field: string, value: unknown): void {
    this.ctx.stateSet(field, this.ttlMs === undefined ? value : { v: value, x: this.ctx.clock.now() + this.ttlMs });
  }

  live(raw: unknown): { ok: boolean; value: unknown } {
    if (this.ttlMs === undefined) return { ok: true, value: raw };
    const e = raw as Expiring;
    return e.x <= this.ctx.clock.now() ? { ok: false, value: undefined } : { ok: true, value: e.v };
  }
}

function valueHandle<T>(ctx: KeyedFields, name: string, d: StateDescriptor): ValueState<T> {
  const cell = new TtlCell(ctx, d.ttlMs);
  return {
    get: () => cell.read(name) as T | undefined,
    set: (v) => cell.write(name, v),
    clear: () => ctx.stateDelete(name),
  };
}

function listHandle<T>(ctx: KeyedFields, name: string, d: StateDescriptor): ListState<T> {
  const ttl = d.ttlMs;
  // An add appends (the list grows in the batch's overlay and, in memory, in place: no copy
  // of the list per add); with TTL the expiry is a field of its own, refreshed by each write.
  if (ttl === undefined) {
    return {
      get: () => (ctx.stateGet(name) as T[] | undefined) ?? [],
      add: (v) => void ctx.stateAppend(name, v),
      update: (vs) => (vs.length ? ctx.stateSet(name, [...vs]) : ctx.stateDelete(name)),
      clear: () => ctx.stateDelete(name),
    };
  }
  const expires = name + MAP_SEP + 'expires';
  const clear = () => {
    ctx.stateDelete(name);
    ctx.stateDelete(expires);
  };
  const touch = () => ctx.stateSet(expires, ctx.clock.now() + ttl);
  /** Is there a list that has not expired? An expired one is deleted. */
  const live = (): boolean => {
    const x = ctx.statePeek(expires) as number | undefined;
    if (x === undefined) return ctx.statePeek(name) !== undefined;
    if (x > ctx.clock.now()) return true;
    clear();
    return false;
  };
  return {
    get: () => (live() ? ((ctx.stateGet(name) as T[] | undefined) ?? []) : []),
    add: (v) => {
      live();
      ctx.stateAppend(name, v);
      touch();
    },
    update: (vs) => {
      if (vs.length === 0) return clear();
      ctx.stateSet(name, [...vs]);
      touch();
    },
    clear,
  };
}

function mapHandle<K extends string | number, V>(ctx: KeyedFields, name: string, d: StateDescriptor): MapState<K, V> {
  const cell = new TtlCell(ctx, d.ttlMs);
  const prefix = name + MAP_SEP;
  const field = (k: K) => prefix + JSON.stringify(k);
  const live = (): [K, V][] => {
    const out: [K, V][] = [];
    for (const [f, raw] of ctx.stateFields(prefix)) {
      const { ok, value } = cell.live(raw);
      if (ok) out.push([JSON.parse(f.slice(prefix.length)) as K, value as V]);
      else ctx.stateDelete(f);
    }
    return out;
  };
  return {
    get: (k) => cell.read(field(k)) as V | undefined,
    set: (k, v) => cell.write(field(k), v),
    has: (k) => cell.read(field(k)) !== undefined,
    delete: (k) => ctx.stateDelete(field(k)),
    entries: live,
    keys: () => live().map(([k]) => k),
    clear: () => {
      for (const [f] of ctx.stateFields(prefix)) ctx.stateDelete(f);
    },
  };
}

/** Build the handles a keyed function declared; they follow the context's current key. */
export function bindStateHandles<S extends StateSpec>(ctx: KeyedFields, spec: S | undefined): StateHandles<S> {
  const out: Record<string, unknown> = {};
  for (const [name, d] of Object.entries(spec ?? {})) {
    if (name.includes('\u0002') || name.startsWith('__')) {
      throw new RangeError(`state "${name}" of operator "${ctx.node.name}": names may not start with "__" or contain U+0002`);
    }
    const desc = d as StateDescriptor;
    out[name] = desc.kind === 'value' ? valueHandle(ctx, name, desc) : desc.kind === 'list' ? listHandle(ctx, name, desc) : mapHandle(ctx, name, desc);
  }
  return out as StateHandles<S>;
}
