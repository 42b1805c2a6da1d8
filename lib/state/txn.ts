/**
 * The per-batch view of keyed state: reads fall through to the backend's committed
 * values, writes stay in an overlay until the batch commits. Values read are copied,
 * so a change counts only when written back (as with DynamoDB or RocksDB), and a
 * crash before the commit leaves committed state untouched.
 */
import type { PartitionScope, StateBackend, StateWrite } from './backend.ts';

const DELETED: unique symbol = Symbol('deleted');

interface EntityOverlay {
  readonly kg: number;
  readonly values: Map<string, unknown>;
  readonly dirty: Set<string>;
  /** The entity's committed fields, looked up once per batch (null: not yet). */
  committed: ReadonlyMap<string, unknown> | undefined | null;
}

/** Copies JSON-like values (state must be JSON-serialisable to live in DynamoDB). */
export function cloneValue<T>(v: T): T {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) {
    // Window state is mostly flat arrays of numbers: copy in one go, then deepen where needed.
    const out = v.slice();
    for (let i = 0; i < out.length; i++) {
      const x = out[i];
      if (x !== null && typeof x === 'object') out[i] = cloneValue(x);
    }
    return out as T;
  }
  const out: Record<string, unknown> = {};
  for (const k in v) out[k] = cloneValue((v as Record<string, unknown>)[k]);
  return out as T;
}

export class StateTxn {
  private overlay = new Map<string, EntityOverlay>();
  /** Operators touch one key several times in a row: skip the map lookup then. */
  private lastEntity?: string;
  private lastOverlay?: EntityOverlay;

  constructor(
    private readonly backend: StateBackend,
    private readonly scope: PartitionScope,
  ) {}

  private entityOverlay(kg: number, entity: string): EntityOverlay {
    if (entity === this.lastEntity) return this.lastOverlay!;
    let o = this.overlay.get(entity);
    if (!o) this.overlay.set(entity, (o = { kg, values: new Map(), dirty: new Set(), committed: null }));
    this.lastEntity = entity;
    this.lastOverlay = o;
    return o;
  }

  get(kg: number, entity: string, field: string): unknown {
    const o = this.entityOverlay(kg, entity);
    // The overlay never holds undefined (absent is DELETED): one lookup answers.
    const v = o.values.get(field);
    if (v !== undefined) return v === DELETED ? undefined : v;
    // Nothing commits during a batch, so one peek per entity serves all its fields.
    if (o.committed === null) o.committed = this.backend.peek(this.scope, kg, entity);
    const copy = cloneValue(o.committed?.get(field));
    o.values.set(field, copy === undefined ? DELETED : copy);
    return copy;
  }

  set(kg: number, entity: string, field: string, value: unknown): void {
    const o = this.entityOverlay(kg, entity);
    o.values.set(field, value === undefined ? DELETED : value);
    o.dirty.add(field);
  }

  delete(kg: number, entity: string, field: string): void {
    this.set(kg, entity, field, undefined);
  }

  /** Every live field of an entity whose name starts with prefix (committed merged with the overlay). */
  fields(kg: number, entity: string, prefix: string): [string, unknown][] {
    const o = this.entityOverlay(kg, entity);
    const out = new Map<string, unknown>();
    const committed = this.backend.peek(this.scope, kg, entity);
    if (committed) {
      for (const [f, v] of committed) if (f.startsWith(prefix) && !o.values.has(f)) out.set(f, cloneValue(v));
    }
    for (const [f, v] of o.values) if (f.startsWith(prefix) && v !== DELETED) out.set(f, v);
    return [...out].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  /** The writes to commit: every dirty field once, with its final value. */
  writes(): StateWrite[] {
    const out: StateWrite[] = [];
    for (const [entity, o] of this.overlay) {
      for (const field of o.dirty) {
        const v = o.values.get(field);
        out.push({ kg: o.kg, entity, field, value: v === DELETED ? undefined : v });
      }
    }
    return out;
  }

  /** Entities touched in this batch (for incremental snapshots). */
  touchedEntities(): number {
    return this.overlay.size;
  }

  reset(): void {
    this.overlay = new Map();
    this.lastEntity = undefined;
    this.lastOverlay = undefined;
  }
}
