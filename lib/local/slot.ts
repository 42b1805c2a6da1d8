/**
 * The embedded scheduler's view of one stage partition: its batch runner, its FIFO input
 * queue (an array read from `head`, compacted as it drains), its skip list, and what
 * lingering (linger.ts) keeps of it. The queue operations here are the scheduler's only
 * writes to it.
 */
import type { BatchRunner } from '../runtime/batch-runner.ts';
import type { ParkedFailure, PartitionRuntime } from '../runtime/partition.ts';
import { type Envelope, recordCount } from '../transport/envelope.ts';

export interface Slot {
  readonly stage: number;
  readonly partition: number;
  readonly runner: BatchRunner;
  /** The runner's open runtime. */
  readonly runtime: PartitionRuntime;
  queue: Envelope[];
  head: number;
  queuedRecords: number;
  /** Envelopes in the queue from head on. */
  readonly queuedEnvelopes: number;
  /** Fed only by other stages; the round it was last fed in and the rounds it has waited since (linger.ts). */
  readonly downstream: boolean;
  fedRound: number;
  lingered: number;
  /** Locations tried maxAttempts times, parked by the next run. */
  readonly skip: Map<string, ParkedFailure>;
}

export function newSlot(stage: number, partition: number, runner: BatchRunner, downstream: boolean): Slot {
  return {
    stage,
    partition,
    runner,
    get runtime() {
      return runner.runtime;
    },
    queue: [],
    head: 0,
    queuedRecords: 0,
    get queuedEnvelopes() {
      return this.queue.length - this.head;
    },
    downstream,
    fedRound: -1,
    lingered: 0,
    skip: new Map(),
  };
}

/** An envelope into the slot's queue in scheduling round `round`. */
export function enqueueTo(slot: Slot, env: Envelope, round: number): void {
  slot.queue.push(env);
  slot.queuedRecords += recordCount(env);
  slot.fedRound = round;
}

/** The next batch from the head: up to `maxEnvelopes` envelopes, stopping once they hold `batchRecords` records. */
export function nextBatch(slot: Slot, maxEnvelopes: number, batchRecords: number): Envelope[] {
  const last = Math.min(slot.queue.length, slot.head + maxEnvelopes);
  let end = slot.head;
  for (let records = 0; end < last && records < batchRecords; end++) records += recordCount(slot.queue[end]);
  return end === slot.head + 1 ? [slot.queue[slot.head]] : slot.queue.slice(slot.head, end);
}

/** The first `envelopes` queued envelopes are done: drop them, compacting the array now and then. */
export function ackFrom(slot: Slot, envelopes: number): void {
  for (let i = 0; i < envelopes; i++) slot.queuedRecords -= recordCount(slot.queue[slot.head + i]);
  slot.head += envelopes;
  if (slot.head === slot.queue.length) {
    slot.queue = [];
    slot.head = 0;
  } else if (slot.head > 1024) {
    slot.queue = slot.queue.slice(slot.head);
    slot.head = 0;
  }
}
