/**
 * Local pre-aggregation (a combiner) ahead of the hash shuffle into a pane window
 * (window-panes.ts), as Flink's local-global aggregation does: the sender folds the
 * records of one (key, pane) in one open channel buffer into one partial accumulator,
 * and the window operator merges each partial into its pane instead of adding records.
 *
 * Where it applies (`combinesInput` in lib/graph/window-plan.ts, decided by the compiler for
 * the hash edge into the window and by the operator from the same spec, so both sides agree): tumbling and
 * sliding windows on the pane path with an AggregateFunction that has merge(), or a
 * ReduceFunction (its own merge); no allowed lateness; no late side output (a late
 * record must reach it as itself); not switched off with `.preAggregate(false)`.
 *
 * Why the results are the same: one buffer becomes one envelope, sealed before the
 * sender's watermark moves, and the receiver applies an envelope's watermark after all
 * its records, so every record of a buffer meets the same receiver watermark. The
 * operator's decisions depend only on the pane and that watermark (late when the pane's
 * last window has fired; a fresh pane's first timer), so all records of a (key, pane)
 * in a buffer are decided alike, and one partial decides as they would. Within the pane
 * the records keep arrival order: add() folds them in order, and the receiver merges
 * merge(pane, partial), the earlier records first. This relies on the functions'
 * contracts: merge(a, fold(records)) = fold(a, records) for an aggregate, associativity
 * for a reduce. A function that breaks them can opt out.
 */
import { InvariantError } from '../errors.ts';
import { combinesInput, fixedWindowsOf, type WindowSpec } from '../graph/window-plan.ts';
import { cloneValue } from '../state/txn.ts';
import { PaneGeometry } from './window-panes.ts';
import { checkTimestamp } from './window-state.ts';

/** The sender's half: which pane a record falls in, and the partial accumulator of a pane's records. */
export class PaneCombiner {
  private readonly geo: PaneGeometry;
  /** The last pane looked up, and whether it lies in some window. */
  private pane = Number.NaN;
  private inWindow = false;
  /** A fresh partial from a record's value. */
  readonly first: (value: unknown) => unknown;
  /** The partial with a record's value added (may update it in place). */
  readonly add: (partial: unknown, value: unknown) => unknown;

  constructor(spec: WindowSpec) {
    const w = fixedWindowsOf(spec.assigner);
    if (!w || !combinesInput(spec)) throw new InvariantError(`a combiner for a window that does not pre-aggregate (${spec.assigner.kind}, ${spec.fn.kind})`);
    this.geo = new PaneGeometry(w);
    const fn = spec.fn;
    if (fn.kind === 'aggregate') {
      const agg = fn.agg;
      this.first = (v) => agg.add(v, agg.createAccumulator());
      this.add = (acc, v) => agg.add(v, acc);
    } else if (fn.kind === 'reduce') {
      const reduce = fn.reduce;
      // A copy, as the operator's first element: a reduce that updates its first argument
      // in place must not change the record, which may go to other outputs too.
      this.first = (v) => cloneValue(v);
      this.add = (acc, v) => reduce(acc, v);
    } else throw new InvariantError('a process window function cannot combine');
  }

  /**
   * The start of the pane holding t, or NaN when t lies in no window (a slide longer
   * than the size): such a record changes nothing downstream and is not sent. A
   * timestamp the window would reject (not an integer) throws here, as it would there.
   */
  paneOf(t: number): number {
    checkTimestamp(t);
    const g = this.geo.g;
    if (!(t >= this.pane && t < this.pane + g)) {
      const pane = this.geo.paneOf(t);
      this.pane = pane;
      this.inWindow = this.geo.firstStart(pane) <= this.geo.lastStart(pane);
    }
    return this.inWindow ? this.pane : Number.NaN;
  }
}
