/**
 * Lingering: a partition fed by another stage may wait a few scheduling rounds before it
 * takes its queue, so that one batch (one commit) holds the records of several upstream
 * rounds instead of one. Downstream envelopes are small (a filtered source chunk, one
 * envelope per watermark step): Q8's join stage got ~40 records per round, and a commit
 * per 40 records cost more than the records (a commit cycle is ~15-20 µs of flushing,
 * progress copies, the store's commit and the watermark). Like Flink's buffer timeout
 * or Kafka's linger.ms, it trades a bounded delay for throughput; the bound is in rounds,
 * so it never waits on the clock:
 * - only while input keeps arriving (the slot was fed in the round before): a stalled or
 *   finished upstream is never waited for, so an idle job does not delay its last records;
 * - at most `rounds` rounds in a row, and never once a full batch is queued (`records`,
 *   or `envelopes`: a backlog of more than one batch would take several rounds to drain);
 * - never while a checkpoint is in flight: barriers and their alignment go as fast as
 *   without lingering, so checkpoints take as many rounds as before.
 * Pure: the scheduler (embedded.ts) keeps the counters and asks.
 */

export interface LingerPolicy {
  /** Rounds a partition may wait in a row; 0 turns lingering off. */
  readonly rounds: number;
  /** Queued records at which a partition takes its queue at once. */
  readonly records: number;
  /** Queued envelopes at which a partition takes its queue at once (the most one batch takes). */
  readonly envelopes: number;
}

/** What the decision reads of a scheduler slot. */
export interface LingerState {
  /** Fed only by other stages (a source stage's envelopes are full chunks already). */
  readonly downstream: boolean;
  /** The last round in which something was put in its queue. */
  readonly fedRound: number;
  /** Rounds it has waited in a row. */
  readonly lingered: number;
  readonly queuedRecords: number;
  readonly queuedEnvelopes: number;
}

/** Whether the slot should wait this round (`round`) rather than take its queue. `checkpointing`: an epoch is in flight. */
export function shouldLinger(slot: LingerState, round: number, policy: LingerPolicy, checkpointing: boolean): boolean {
  return !checkpointing && slot.downstream && slot.fedRound === round - 1 && slot.lingered < policy.rounds && slot.queuedRecords < policy.records && slot.queuedEnvelopes < policy.envelopes;
}
