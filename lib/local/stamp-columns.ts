/**
 * A source chunk's columns (values, timestamps, largest timestamp), stamped from its
 * events in one pass that may also run each accepted event through the source stage's
 * chain (SourceFeed, SourceChunk); events that cannot become records are reported with
 * their position. Hot code: see the comments on why its loops are written out.
 */
import type { SourceDef } from '../api/sources.ts';
import type { Clock } from '../api/types.ts';
import { InvariantError } from '../errors.ts';
import type { RecordColumns } from '../transport/envelope.ts';
import { type RejectedInput, toRecord } from '../transport/sources.ts';

/** Whether the extractor gives some event of `values` a finite timestamp (the first, almost always). */
export function anyStampable(values: readonly unknown[], extract: (event: any) => number): boolean {
  for (let j = 0; j < values.length; j++) {
    try {
      const t = extract(values[j]);
      if (typeof t === 'number' && t - t === 0) return true;
    } catch {
      // Rejected when stamped, with its error named there.
    }
  }
  return false;
}

/** The largest timestamp stampAndEmit saw (a module variable, not an object per call). */
let prefixMax = Number.NEGATIVE_INFINITY;

/**
 * The timestamps column of a chunk stamped whole by stampAndEmit: not stored (a store and
 * ~16 KB per 2048-record chunk for columns that are read again only when the partition
 * retries its batch), read again from the events by withTimestamps if they are needed.
 */
export const UNSTORED: readonly number[] = Object.freeze([]);

/**
 * The columns with their timestamps, read again from the events by the extractor that
 * stamped them (what a restore's replay does too: a replayed event's timestamp is its
 * extractor's answer again). Only chunks stampAndEmit accepted whole come here, so every
 * event gave a finite timestamp once; an extractor that answers otherwise now is not a
 * function of its event, and the retry cannot be exact.
 */
export function withTimestamps(columns: RecordColumns, def: SourceDef<any>): RecordColumns {
  const { values } = columns;
  const extract = def.timestamp!;
  const timestamps: number[] = new Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const t = extract(values[i]);
    if (typeof t !== 'number' || t - t !== 0) {
      throw new InvariantError(`source "${def.name}": the timestamp extractor gave event ${i} of a chunk a finite timestamp when the chunk was applied, and ${String(t)} when its batch was retried (an extractor must be a function of its event alone)`);
    }
    timestamps[i] = t;
  }
  return { values, timestamps, maxTimestamp: columns.maxTimestamp };
}

/**
 * The common case of stampColumns, small enough for V8 to inline the chain's entry into
 * it (no heap number per timestamp passed): each event stamped and emitted, up to the first
 * that cannot be stamped, whose index it returns (values.length: none). What emit throws
 * is thrown, at.index naming the event (stamped). Timestamps are not stored: stampColumns
 * reads the prefix's again when the chunk does not end up accepted whole.
 */
function stampAndEmit(values: unknown[], extract: (event: any) => number, emit: (value: unknown, timestamp: number) => void, at: { index: number }): number {
  const m = values.length;
  let max = Number.NEGATIVE_INFINITY;
  let j = 0;
  // Which of the two calls threw: `stamped` is set before emit is called.
  let stamped = -1;
  try {
    for (; j < m; j++) {
      const event = values[j];
      const t = extract(event);
      if (typeof t !== 'number' || t - t !== 0) break;
      if (t > max) max = t;
      stamped = j;
      at.index = j;
      emit(event, t);
    }
  } catch (e) {
    if (stamped === j) throw e;
    // The extractor threw on event j: stampColumns' slow path names the error.
  }
  prefixMax = max;
  return j;
}

/**
 * A chunk's columns (not a record object per event): each event's timestamp, in one pass;
 * events that cannot become records are reported with their position and removed from
 * `values` (in place). `base`: the first event's index in the source's input; `first`: its
 * index in `positions`. `extract`: the timestamp extractor when there is no schema (the
 * fast path). `emit`: each accepted event as it is stamped (at.index: its index among the
 * accepted); if it throws, `failed` gets the error, and the rest is stamped without emit.
 */
export function stampColumns(
  def: SourceDef<any>,
  clock: Clock,
  values: unknown[],
  base: number,
  positions: readonly string[] | undefined,
  first: number,
  rejected: (r: RejectedInput) => void,
  extract: ((event: any) => number) | undefined,
  emit?: (value: unknown, timestamp: number) => void,
  at?: { index: number },
  failed?: (error: unknown) => void,
): RecordColumns {
  const m = values.length;
  let max = Number.NEGATIVE_INFINITY;
  let n = 0;
  let j = 0;
  let timestamps: number[];
  if (emit !== undefined && extract !== undefined) {
    try {
      j = stampAndEmit(values, extract, emit, at!);
    } catch (e) {
      // emit threw on event at.index, stamped: the rest goes on without emit.
      failed!(e);
      emit = undefined;
      j = at!.index + 1;
    }
    n = j;
    max = prefixMax;
    if (j === m && emit !== undefined) return { values, timestamps: UNSTORED, maxTimestamp: max };
    // A rejection or a failure: this chunk's columns are built here, the prefix's timestamps read again.
    timestamps = new Array(m);
    for (let i = 0; i < j; i++) timestamps[i] = extract(values[i]);
  } else timestamps = new Array(m);
  // With an extractor (no schema) it is called here directly, in a loop that stops at the
  // first event it cannot stamp (a throw, or not a finite number); that event goes
  // through toRecord, which says what is wrong, and the loop goes on after it. (One
  // try around the loop, not one per event: a timestamp that may also be undefined
  // would be boxed, a heap number per event.) What an accepted event gets (its slot, its
  // timestamp, the chain) is written out in both branches on purpose: a local function
  // would capture n, max and emit, which the loop then reads from its context, not registers.
  while (j < m) {
    if (extract !== undefined) {
      try {
        for (; j < m; j++) {
          const event = values[j];
          const t = extract(event);
          if (typeof t !== 'number' || t - t !== 0) break;
          if (n !== j) values[n] = event;
          timestamps[n] = t;
          if (t > max) max = t;
          if (emit !== undefined) {
            at!.index = n;
            try {
              emit(event, t);
            } catch (e) {
              failed!(e);
              emit = undefined;
            }
          }
          n++;
        }
      } catch {
        // Event j threw: toRecord below names the error.
      }
      if (j === m) break;
    }
    const event = values[j];
    const r = toRecord(def, event, clock);
    if (typeof r === 'string') rejected({ source: def.name, position: positions?.[first + j] ?? `event ${base + j}`, error: r });
    else {
      const t = r.timestamp;
      if (n !== j) values[n] = event;
      timestamps[n] = t;
      if (t > max) max = t;
      if (emit !== undefined) {
        at!.index = n;
        try {
          emit(event, t);
        } catch (e) {
          failed!(e);
          emit = undefined;
        }
      }
      n++;
    }
    j++;
  }
  if (n < m) {
    values.length = n;
    timestamps.length = n;
  }
  return { values, timestamps, maxTimestamp: max };
}
