/**
 * The shape of GET /stats of `sluice dev` (and of `sluice run --dashboard`), which
 * `sluice status --json` prints as is and the dashboard draws (README "Status and dashboard").
 */
import type { SinkLatest } from '../local/dashboard-sink-tap.ts';
import type { ScalingAdvice } from '../runtime/scaling-advice.ts';
import type { CostProjection } from './status-cost.ts';

export interface DevStatus {
  job: string;
  pid: number;
  url: string;
  startedAt: number;
  uptimeMs: number;
  /** Events taken in by the sources. */
  recordsIngested: number;
  /** Records in every partition's input queue, not processed yet. */
  queuedRecords: number;
  rejected: { invalid: number; overBounds: number; requestsRefused: number };
  deadLetters: number;
  deadLetterFile: string | null;
  /** Records windows and joins dropped as late, per operator (operators that dropped none are absent). */
  lateDropped: Record<string, number>;
  /** Records each operator has taken in. */
  recordsIn: Record<string, number>;
  /** Per stage: its watermark (ms), or null before the first / after the last ("end of input"). */
  watermarks: Record<string, number | null>;
  /** The last completed checkpoint's epoch; null before the first (or without checkpoints). */
  lastCheckpoint: number | null;
  /** When this snapshot was taken (ms since the epoch). */
  at: number;
  /** Age in ms of the oldest accepted event not processed yet, over every stream (0: none waits). */
  lagMs: number;
  /** The sum of lateDropped. */
  lateDroppedTotal: number;
  /** Events load shedding dropped (SourceOptions.shed), per ingestion stream and reason (`newest`, `sample`, `priority`). */
  shed: Record<string, Record<string, number>>;
  /** The sum of shed. */
  shedTotal: number;
  stages: StageStatus[];
  /** Key groups: the most partitions a stage can have. */
  maxParallelism: number;
  /** Partitions per stage for the current input rate, from each stage's true rate (lib/runtime/scaling-advice.ts; `sluice status --target-rate` for another rate). */
  scaling: ScalingAdvice;
  operators: OperatorStatus[];
  /** Operator to operator; `shuffle`: the records cross to another stage (by key, or rebalanced). */
  edges: { from: string; to: string; shuffle: boolean }[];
  /** Null when the run takes no checkpoints. */
  checkpoints: { dir: string; intervalMs: number | null; timeline: CheckpointEntry[] } | null;
  /** The latest records each sink wrote. */
  sinks: SinkLatest[];
  cost: CostProjection;
}

export interface StageStatus {
  name: string;
  parallelism: number;
  /** Its operators, in chain order. */
  operators: string[];
  queuedRecords: number;
  /** Records a partition's input queue may hold (upstream waits at that). */
  queueCapacity: number;
  /** Back-pressure: the fullest partition's queue over the capacity, 0 to 1. */
  queueFill: number;
  watermark: number | null;
  /** Every input has ended (bounded sources). */
  endOfInput: boolean;
  /** Now minus the watermark (event-time lag); null without a watermark. */
  watermarkLagMs: number | null;
  /** Keys in the stage's state; null where the state backend does not count them. */
  stateKeys: number | null;
  /** Records its batches took in, the milliseconds its partitions spent in them (useful time), and the records it sent downstream. */
  recordsIn: number;
  busyMs: number;
  recordsOut: number;
}

export interface OperatorStatus {
  name: string;
  kind: string;
  stage: string | null;
  /** The operators it reads from. */
  inputs: string[];
  recordsIn: number;
  /** What the operators after it took in; null for sinks, before a pre-aggregating shuffle, or where a next operator has several inputs. */
  recordsOut: number | null;
  /** Over the last few seconds. */
  inPerSecond: number;
  outPerSecond: number | null;
  lateDropped: number;
}

export interface CheckpointEntry {
  epoch: number;
  status: 'completed' | 'aborted' | 'in progress';
  /** When the epoch opened; null for an aborted one. */
  startedAt: number | null;
  durationMs: number | null;
  /** Bytes of the snapshot objects the epoch wrote. */
  bytes: number | null;
  /** The savepoint label, when the epoch was one. */
  savepoint: string | null;
}
