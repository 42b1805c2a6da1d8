/**
 * Time slicing of the embedded scheduler: how many records one batch (and one source
 * chunk) may take so that one uninterrupted stretch of user code lasts about `sliceMs`,
 * by the measured cost per record. The HTTP endpoint, the live table, timers and signals
 * share the event loop with the scheduler; they run only between batches.
 *
 * - A job-wide limit: an envelope cannot be split, and a stage's envelopes are the output
 *   of upstream batches, so a slow stage must make every batch (and chunk) upstream of it
 *   small too. The limit is the slice over the costliest stage's cost per record.
 * - A batch informs the estimate only when it says something about the cost per record:
 *   it lasted at least half a slice, or held at least INFORMATIVE_RECORDS records. A small
 *   short batch is mostly the fixed cost of a commit (15-30 µs); read as a cost per record,
 *   it would shrink every batch of a fast job.
 * - The estimate rises at once and falls slowly (a slow stretch is the one to avoid).
 * - Cold start: before the first batches are measured, the limit starts at FIRST_RECORDS
 *   and doubles per batch measured, so a slow operator's first batch is short too, and a
 *   fast job is at its full batch sizes within a dozen batches.
 * Off (no instance), batches go by record counts alone and the schedule is a pure
 * function of the job, its input and its configuration.
 */

export const FIRST_RECORDS = 32;
export const INFORMATIVE_RECORDS = 256;
/** Weight of a new measurement when the cost falls. */
const FALL = 0.2;

export class TimeSlicer {
  /** Milliseconds per record, per stage (measured stages only). */
  private readonly cost = new Map<number, number>();
  private measured = 0;
  /** The limit, recomputed when an estimate changes. */
  private limit = FIRST_RECORDS;

  constructor(readonly sliceMs: number) {}

  /** Records one batch or chunk may take (at least 1, at most `max`). */
  records(max: number): number {
    return Math.max(1, Math.min(max, this.limit));
  }

  /** A batch of `records` records at `stage` took `ms` milliseconds (the whole batch: commit and delivery included). */
  observe(stage: number, records: number, ms: number): void {
    if (records <= 0) return;
    this.measured++;
    if (ms >= this.sliceMs / 2 || records >= INFORMATIVE_RECORDS) {
      const perRecord = ms / records;
      const before = this.cost.get(stage);
      this.cost.set(stage, before === undefined || perRecord > before ? perRecord : before + FALL * (perRecord - before));
    }
    let worst = 0;
    for (const c of this.cost.values()) if (c > worst) worst = c;
    const byCost = worst > 0 ? Math.floor(this.sliceMs / worst) : Number.POSITIVE_INFINITY;
    const byStart = FIRST_RECORDS * 2 ** Math.min(this.measured, 30);
    this.limit = Math.max(1, Math.min(byCost, byStart));
  }

  /** Estimated records per second of the costliest stage (undefined before a measurement). */
  recordsPerSecond(): number | undefined {
    let worst = 0;
    for (const c of this.cost.values()) if (c > worst) worst = c;
    return worst > 0 ? 1000 / worst : undefined;
  }
}
