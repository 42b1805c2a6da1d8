/**
 * What the compiler and the window operators both decide from a window's spec alone,
 * so both sides of an edge agree: how a tumbling or sliding window is cut (fixed
 * windows), whether its state is kept as panes (lib/operators/window-panes.ts), and
 * whether its input edge carries partial aggregates instead of records (a combiner,
 * lib/operators/window-combiner.ts, where the conditions are explained). Pure metadata.
 */
import type { WindowAssigner } from '../api/windows.ts';
import type { NodeSpec } from '../api/logical.ts';

export type WindowSpec = Extract<NodeSpec, { kind: 'window' }>;

/** Tumbling and sliding windows as (size, slide, offset); tumbling is slide = size. */
export interface FixedWindows {
  readonly size: number;
  readonly slide: number;
  readonly offset: number;
}

/** A tumbling or sliding assigner as size, slide and offset (a tumbling window slides by its size); undefined for sessions. */
export function fixedWindowsOf(a: WindowAssigner): FixedWindows | undefined {
  if (a.kind === 'session') return undefined;
  return { size: a.size, slide: a.kind === 'tumbling' ? a.size : a.slide, offset: a.offset };
}

/** The pane length of fixed windows is gcd(size, slide). */
export function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** True when windows of this spec can be kept as panes (see lib/operators/window-panes.ts). */
export function panesApply(spec: WindowSpec, w: FixedWindows): boolean {
  if (spec.allowedLatenessMs !== 0) return false;
  if (gcd(w.size, w.slide) === w.size) return true;
  return spec.fn.kind === 'aggregate' && spec.fn.agg.merge !== undefined;
}

/** True when the window operator of `spec` takes partial aggregates from its (hash) input edge. */
export function combinesInput(spec: NodeSpec): boolean {
  if (spec.kind !== 'window' || spec.preAggregate === false || spec.lateTag !== undefined) return false;
  const w = fixedWindowsOf(spec.assigner);
  if (!w || !panesApply(spec, w)) return false;
  return spec.fn.kind === 'reduce' || (spec.fn.kind === 'aggregate' && spec.fn.agg.merge !== undefined);
}

/**
 * What crosses a combined edge in place of records: the partial accumulator of `records`
 * records of one key and pane (JSON-able like any window state). Its timestamp is the
 * latest of theirs: a time in the pane, so the receiver finds the same pane, windows and
 * lateness, and the envelope's largest timestamp is unchanged.
 */
export interface PartialAggregate {
  partial: unknown;
  records: number;
}
