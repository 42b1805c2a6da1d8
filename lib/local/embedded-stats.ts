/** The embedded runtime's statistics, read off the scheduler's slots (slot.ts). */
import { MAX_WATERMARK, MIN_WATERMARK } from '../api/types.ts';
import type { PhysicalPlan } from '../graph/compile.ts';
import type { DeadLetterStore } from '../checkpoint/dead-letter-store.ts';
import type { RuntimeStats } from './embedded-options.ts';
import type { Slot } from './slot.ts';

export interface RuntimeCounters {
  sourceRecords: number;
  duplicatesDropped: number;
  commits: number;
  recoveries: number;
  /** Records dropped as late per operator, from committed batches (BatchResult.lateDropped). */
  readonly lateDropped: Record<string, number>;
  /** Per stage (by id): milliseconds its partitions spent in batches, and the records those batches took in. */
  readonly busyMs: number[];
  readonly batchRecords: number[];
  /** Per stage: records it sent to the stages downstream. */
  readonly recordsOut: number[];
  /** Events load shedding dropped, per ingestion stream and reason. */
  readonly shed: Record<string, Record<string, number>>;
}

export function newCounters(stages: number): RuntimeCounters {
  return { sourceRecords: 0, duplicatesDropped: 0, commits: 0, recoveries: 0, lateDropped: {}, busyMs: new Array<number>(stages).fill(0), batchRecords: new Array<number>(stages).fill(0), recordsOut: new Array<number>(stages).fill(0), shed: {} };
}

/** Adds a batch's late drops to the run's. */
export function addLateDropped(counters: RuntimeCounters, batch: Readonly<Record<string, number>>): void {
  for (const op in batch) counters.lateDropped[op] = (counters.lateDropped[op] ?? 0) + batch[op];
}

/** Records in per operator, the watermark per stage (minimum over its partitions that are not idle), the counters. */
export function runtimeStats(plan: PhysicalPlan, slots: readonly (readonly Slot[])[], counters: RuntimeCounters, deadLetters: DeadLetterStore, rejectedInputs: number): RuntimeStats {
  const recordsIn: Record<string, number> = {};
  const watermarks: Record<string, number> = {};
  for (const row of slots) {
    // As the next stage sees it: the minimum over partitions that are not idle; all idle, the furthest.
    let active = MAX_WATERMARK;
    let furthest = MIN_WATERMARK;
    let anyActive = false;
    for (const slot of row) {
      for (const s of slot.runtime.operatorStats()) recordsIn[s.name] = (recordsIn[s.name] ?? 0) + s.recordsIn;
      const wm = slot.runtime.watermark;
      furthest = Math.max(furthest, wm);
      if (!slot.runtime.idle) {
        anyActive = true;
        active = Math.min(active, wm);
      }
    }
    watermarks[plan.stages[row[0].stage].name] = anyActive ? active : furthest;
  }
  let queuedRecords = 0;
  for (const row of slots) for (const s of row) queuedRecords += s.queuedRecords;
  return {
    recordsIn,
    watermarks,
    shed: Object.fromEntries(Object.entries(counters.shed).map(([k, v]) => [k, { ...v }])),
    load: Object.fromEntries(plan.stages.map((st) => [st.name, { recordsIn: counters.batchRecords[st.id], busyMs: counters.busyMs[st.id], recordsOut: counters.recordsOut[st.id] }])),
    sourceRecords: counters.sourceRecords,
    queuedRecords,
    deadLetters: deadLetters.count,
    ...(deadLetters.path !== undefined ? { deadLetterFile: deadLetters.path } : {}),
    rejectedInputs,
    duplicatesDropped: counters.duplicatesDropped,
    lateDropped: { ...counters.lateDropped },
    commits: counters.commits,
    recoveries: counters.recoveries,
  };
}

/** Per stage: its partitions' queued input records, and the fullest partition's share of the queue capacity (back-pressure: at 1 upstream waits). */
export interface StageQueue {
  readonly queuedRecords: number;
  readonly capacity: number;
  readonly fill: number;
}

export function stageQueues(plan: PhysicalPlan, slots: readonly (readonly Slot[])[], capacity: number): Record<string, StageQueue> {
  const out: Record<string, StageQueue> = {};
  for (const row of slots) {
    let queued = 0;
    let fullest = 0;
    for (const s of row) {
      queued += s.queuedRecords;
      fullest = Math.max(fullest, s.queuedRecords);
    }
    out[plan.stages[row[0].stage].name] = { queuedRecords: queued, capacity, fill: Math.min(1, fullest / capacity) };
  }
  return out;
}
