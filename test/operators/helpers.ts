/** Shared test helpers for the operator tests: small jobs run end to end on the embedded runtime. */
import type { AggregateFunction } from '../../lib/api/functions.ts';
import type { DataStream, Job } from '../../lib/api/stream.ts';
import { type Key, WatermarkStrategies } from '../../lib/api/types.ts';
import type { EmbeddedRuntime } from '../../lib/local/embedded.ts';

export interface Ev {
  readonly k: string;
  readonly t: number;
  readonly v?: number;
}

/** A bounded source of events stamped with `t`, watermark = max t - delay - 1. */
export function events<T extends { t: number }>(job: Job, name: string, items: readonly T[], delayMs = 0): DataStream<T> {
  return job.fromItems(name, items, { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(delayMs) });
}

export const count: AggregateFunction<unknown, number, number> = {
  createAccumulator: () => 0,
  add: (_v, acc) => acc + 1,
  getResult: (acc) => acc,
  merge: (a, b) => a + b,
};

export interface Counted {
  readonly key: Key;
  readonly start: number;
  readonly end: number;
  readonly n: number;
}

export const countRow = (n: number, info: { key: Key; window: { start: number; end: number } }): Counted => ({
  key: info.key,
  start: info.window.start,
  end: info.window.end,
  n,
});

/** Attach each record's event timestamp (what the upstream operator emitted it with). */
export function withTimestamps<T>(stream: DataStream<T>): DataStream<T & { ts: number }> {
  return stream.keyBy(() => 'all').process<T & { ts: number }>({
    processElement(value, ctx) {
      ctx.emit({ ...value, ts: ctx.timestamp });
    },
  });
}

/** Stable order for comparing multisets of rows. */
export function sorted<T>(rows: readonly T[]): T[] {
  return [...rows].sort((a, b) => {
    const x = JSON.stringify(a);
    const y = JSON.stringify(b);
    return x < y ? -1 : x > y ? 1 : 0;
  });
}

/**
 * Rows grouped by their `key`, each key's in the order they came: what the runtime orders
 * (per key); across keys, timers of one time fire in no stated order.
 */
export function perKey<T extends { key: Key }>(rows: readonly T[]): [string, T[]][] {
  const by = new Map<string, T[]>();
  for (const r of rows) {
    const k = JSON.stringify(r.key);
    let list = by.get(k);
    if (list === undefined) by.set(k, (list = []));
    list.push(r);
  }
  return [...by].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * Sum of the `droppedLate` counters of an operator's instances. The runtime does not
 * expose operator instances, so this reaches into its private partitions.
 */
export function droppedLate(runtime: EmbeddedRuntime, operator: string): number {
  type Internals = { slots: { runtime: { nodes: Map<number, { node: { name: string }; op: { droppedLate?: number } }> } }[][] };
  let n = 0;
  for (const row of (runtime as unknown as Internals).slots) {
    for (const slot of row) {
      for (const node of slot.runtime.nodes.values()) if (node.node.name === operator) n += node.op.droppedLate ?? 0;
    }
  }
  return n;
}

/** The stage an operator runs in (for InMemoryStateBackend.entityCount). */
export function stageOf(runtime: EmbeddedRuntime, operator: string): number {
  const node = runtime.plan.job.nodes.find((n) => n.name === operator);
  if (!node) throw new Error(`no operator ${operator}`);
  return runtime.plan.stageOfNode[node.id];
}
