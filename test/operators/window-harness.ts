/**
 * What the window-operator tests share beyond helpers.ts: count and process jobs over
 * generated streams with late records, a record-at-a-time model of session windows, and
 * a process-window operator over a fake one-key context for layout tests.
 */
import fc from 'fast-check';
import type { AggregateFunction } from '../../lib/api/functions.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { OutputTag } from '../../lib/api/types.ts';
import { type WindowAssigner, Windows } from '../../lib/api/windows.ts';
import { runJob } from '../../lib/local/embedded.ts';
import type { FaultInjector } from '../../lib/local/faults.ts';
import { fixedWindowsOf, type WindowSpec } from '../../lib/graph/window-plan.ts';
import { paneWindowOperator } from '../../lib/operators/window-panes.ts';
import type { WindowOperator } from '../../lib/operators/window-state.ts';
import type { OperatorContext } from '../../lib/operators/contract.ts';
import { oneKey } from '../state/one-key.ts';
import { type Counted, countRow, type Ev, events, perKey, withTimestamps } from './helpers.ts';

export const withMerge: AggregateFunction<unknown, number, number> = {
  createAccumulator: () => 0,
  add: (_v, n) => n + 1,
  getResult: (n) => n,
  merge: (a, b) => a + b,
};
export const withoutMerge: AggregateFunction<unknown, number, number> = { createAccumulator: () => 0, add: (_v, n) => n + 1, getResult: (n) => n };

export interface Run {
  rows: (Counted & { ts: number })[];
  late: Ev[];
}

export interface RunOptions {
  delay: number;
  parallelism: number;
  batch: number;
  /** Allowed lateness in ms (default 0). */
  lateness?: number;
  faults?: FaultInjector;
}

/** Each window's record count, with a late side output. */
export async function counts(items: readonly Ev[], assigner: WindowAssigner, agg: AggregateFunction<unknown, number, number>, o: RunOptions): Promise<Run> {
  const job = new Job('panes', { parallelism: o.parallelism });
  const main = Sinks.collect<Counted & { ts: number }>();
  const late = Sinks.collect<Ev>();
  const tag = new OutputTag<Ev>('late');
  let windowed = events(job, 'in', items, o.delay).keyBy((e) => e.k).window(assigner);
  if (o.lateness) windowed = windowed.allowedLateness(o.lateness);
  const counted = windowed.sideOutputLateData(tag).aggregate(agg, countRow);
  withTimestamps(counted).sinkTo(main);
  counted.getSideOutput(tag).sinkTo(late);
  await runJob(job, { sourceBatchSize: o.batch, maxEnvelopesPerBatch: 2, faults: o.faults });
  return { rows: main.records, late: late.records };
}

/** Sessions through a process function: each firing's row (its record count) and the records it saw, the late ones apart. */
export async function processSessions(items: readonly Ev[], gap: number, o: RunOptions) {
  const job = new Job('process-sessions', { parallelism: o.parallelism });
  const main = Sinks.collect<Counted & { ts: number }>();
  const late = Sinks.collect<Ev>();
  const seen = Sinks.collect<Ev[]>();
  const tag = new OutputTag<Ev>('late');
  let windowed = events<Ev>(job, 'in', items, o.delay).keyBy((e) => e.k).window(Windows.session(gap));
  if (o.lateness) windowed = windowed.allowedLateness(o.lateness);
  const sessions = windowed.sideOutputLateData(tag).process<Counted | Ev[]>((es, { key, window }, out) => {
    out.emit({ key, start: window.start, end: window.end, n: es.length });
    out.emit([...es]);
  });
  withTimestamps(sessions.filter((x): x is Counted => !Array.isArray(x))).sinkTo(main);
  sessions.filter((x): x is Ev[] => Array.isArray(x)).sinkTo(seen);
  sessions.getSideOutput(tag).sinkTo(late);
  const { stats } = await runJob(job, { sourceBatchSize: o.batch, maxEnvelopesPerBatch: 2, faults: o.faults });
  return { rows: main.records, late: late.records, seen: seen.records.flat(), recoveries: stats.recoveries };
}

/** What two runs must share: each key's rows in order, and the late records. */
export const outcome = (r: Run) => ({ rows: perKey(r.rows), late: r.late });

/** Streams whose records fall up to `disorder(delay) - 1` ms behind the latest one. */
export const streamOf = (disorder: (delay: number) => number) =>
  fc
    .record({
      delay: fc.integer({ min: 0, max: 10 }),
      rows: fc.array(fc.record({ k: fc.constantFrom('a', 'b', 'c'), step: fc.integer({ min: 0, max: 12 }), back: fc.nat() }), { maxLength: 50 }),
      start: fc.integer({ min: -100, max: 100 }),
      parallelism: fc.constantFrom(1, 2, 3),
      batch: fc.integer({ min: 1, max: 4 }),
    })
    .map(({ delay, rows, start, parallelism, batch }) => {
      let base = start;
      const items = rows.map((r) => {
        base += r.step;
        return { k: r.k, t: base - (r.back % disorder(delay)) };
      });
      return { items, delay, parallelism, batch };
    });

/**
 * Session windows, record at a time: parallelism 1 and one record per envelope, so the
 * watermark moves to max t - delay - 1 after each record; sessions whose end - 1 it passes
 * fire by end (compared per key: across keys, one time's firings have no stated order),
 * and live on until it reaches end - 1 + lateness. A record that touches a live session
 * merges with it (never late), and when the merged session's end - 1 is at or behind the
 * watermark it fires at once; a record touching none is late when its own session would
 * be gone already (t + gap - 1 + lateness <= watermark).
 */
export function sessionModel(items: readonly Ev[], gap: number, delay: number, lateness = 0): Run {
  const open = new Map<string, { start: number; end: number; n: number }[]>();
  const rows: Run['rows'] = [];
  const late: Ev[] = [];
  let wm = -Infinity;
  let maxT = -Infinity;
  for (const e of items) {
    const list = open.get(e.k) ?? [];
    const touched = list.filter((s) => s.start <= e.t + gap && e.t <= s.end);
    if (touched.length === 0 && e.t + gap - 1 + lateness <= wm) late.push(e);
    else {
      const merged = {
        start: Math.min(e.t, ...touched.map((s) => s.start)),
        end: Math.max(e.t + gap, ...touched.map((s) => s.end)),
        n: 1 + touched.reduce((n, s) => n + s.n, 0),
      };
      open.set(e.k, [...list.filter((s) => !touched.includes(s)), merged]);
      if (merged.end - 1 <= wm) rows.push({ key: e.k, ...merged, ts: merged.end - 1 });
    }
    maxT = Math.max(maxT, e.t);
    const before = wm;
    wm = Math.max(wm, maxT - delay - 1);
    advance(before, wm);
  }
  advance(wm, Infinity);
  return { rows, late };

  /** The watermark moves from `from` to `to`: sessions whose end - 1 it passes fire; those past their lateness go. */
  function advance(from: number, to: number) {
    const due: { key: string; start: number; end: number; n: number }[] = [];
    for (const [key, list] of open) {
      for (const s of list) if (s.end - 1 > from && s.end - 1 <= to) due.push({ key, ...s });
      open.set(key, list.filter((s) => s.end - 1 + lateness > to));
    }
    due.sort((a, b) => a.end - b.end || ('s' + a.key < 's' + b.key ? -1 : 1));
    for (const d of due) rows.push({ key: d.key, start: d.start, end: d.end, n: d.n, ts: d.end - 1 });
  }
}

/**
 * A window operator of a process function over a fake context: one key, a commit per
 * batch. `make`: the operator from its context and spec (default: the pane operator).
 * `timers` lists the times registered, `deleted` those deleted.
 */
export function operatorOver(assigner: WindowAssigner = Windows.tumbling(10), make?: (ctx: OperatorContext, spec: WindowSpec) => WindowOperator, lateness = 0) {
  const job = new Job('layout', { parallelism: 1 });
  let windowed = job
    .fromItems<{ t: number }>('in', [])
    .keyBy(() => 'k')
    .window(assigner);
  if (lateness) windowed = windowed.allowedLateness(lateness);
  windowed.process<number[]>((es, _info, out) => out.emit(es.map((e) => e.t))).sinkTo(Sinks.collect());
  const node = job.graph.nodes.find((n) => n.spec.kind === 'window')!;
  const { state, commit, stored } = oneKey('win');
  let wm = Number.NEGATIVE_INFINITY;
  const timers: number[] = [];
  const deleted: number[] = [];
  const emitted: unknown[] = [];
  const ctx = {
    node,
    watermark: () => wm,
    currentKey: () => 'k',
    ...state,
    registerTimer: (_d: string, t: number) => void timers.push(t),
    deleteTimer: (_d: string, t: number) => void deleted.push(t),
    emit: (v: unknown) => void emitted.push(v),
  } as unknown as OperatorContext;
  const spec = node.spec as WindowSpec;
  const op = make ? make(ctx, spec) : paneWindowOperator(ctx, spec, fixedWindowsOf(spec.assigner)!, false);
  const record = (t: number) => op.processElement({ value: { t }, timestamp: t }, 0);
  return { op, ctx, commit, stored, record, timers, deleted, emitted, setWatermark: (w: number) => (wm = w) };
}
