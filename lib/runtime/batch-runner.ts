/**
 * The batch failure policy of one stage partition, the same on both runtimes: the
 * embedded scheduler and the operator handler's SQS grouping each run their batches
 * through a BatchRunner and only decide what comes next (the embedded queue keeps the
 * batch and runs it again; the handler commits the messages before a failed record and
 * reports the rest to SQS).
 *
 * - Open and recover: a PartitionRuntime from the committed state; the outbox a crashed
 *   predecessor committed but did not deliver is delivered, then cleared.
 * - A batch: process (or fire due processing-time timers) with the skip list, commit,
 *   deliver the outbox (batch-runner-outbox.ts), clear it; the caller then acknowledges
 *   its input. Locations the commit parked leave the skip list and the attempt counts.
 * - Any failure discards the runtime: it may hold uncommitted changes or an undelivered
 *   outbox; the next run (or open) recovers from committed state.
 * - User code that threw on a record or callback (RecordFailedError with its location):
 *   one more attempt is counted (AttemptCounter: in memory on the embedded runtime, the
 *   partition's attempts item in DynamoDB on AWS); at maxAttempts, or when the caller
 *   says so (a message at SQS's receive limit), the location goes into the skip list and
 *   the next run parks it as a dead letter with its error instead of running it.
 */
import { SluiceError } from '../errors.ts';
import type { Envelope } from '../transport/envelope.ts';
import { deliverOutbox, type OutboxPorts } from './batch-runner-outbox.ts';
import { type FailureLocation, locationId, type ParkedFailure, RecordFailedError } from './failures.ts';
import type { PartitionRuntime } from './partition.ts';
import type { BatchResult } from './partition-deps.ts';

export type { EpochDeadLetter, OutboxPorts } from './batch-runner-outbox.ts';

/** What user code threw on its last attempt at a location. */
export type AttemptFailure = Omit<ParkedFailure, 'attempts'>;

/** How often each failing location of one partition has been tried. */
export interface AttemptCounter {
  /**
   * One more failed attempt at `location`; the attempts so far, never more than `limit`: a
   * location already at the limit was parked by an overlapping owner (an SQS redelivery
   * while the first invocation still ran), and its extra run does not count again.
   */
  failed(location: string, failure: AttemptFailure, limit: number): Promise<number> | number;
  /** Locations whose dead letters were committed (best effort: a stale count only costs space). */
  forget(locations: readonly string[]): Promise<void> | void;
}

/** Attempt counts in memory (the embedded runtime: the process is the partition's only owner). */
export class MemoryAttempts implements AttemptCounter {
  private readonly counts = new Map<string, number>();

  failed(location: string, _failure: AttemptFailure, limit: number): number {
    const n = Math.min(limit, (this.counts.get(location) ?? 0) + 1);
    this.counts.set(location, n);
    return n;
  }

  forget(locations: readonly string[]): void {
    for (const l of locations) this.counts.delete(l);
  }
}

/** The points between the steps of a batch (fault sites and injected crashes on the embedded runtime). */
export type BatchStep = 'committed' | 'delivered' | 'cleared';

export interface BatchRunnerOptions {
  /** A PartitionRuntime from the partition's committed state. */
  readonly open: () => Promise<PartitionRuntime>;
  readonly outbox: OutboxPorts;
  readonly attempts: AttemptCounter;
  /** Failures of one location before it is parked. */
  readonly maxAttempts: number;
  /** Crossed after each step of a batch; may throw (a crash there). */
  readonly step?: (step: BatchStep) => void;
}

/** User code failed at a location: its attempts, and whether the next run parks it (it is in the skip list). */
export interface FailedLocation {
  readonly id: string;
  readonly location: FailureLocation;
  readonly failure: AttemptFailure;
  /** Undefined when counting failed (outcome.error is then the counter's error). */
  readonly attempts?: number;
  readonly parked: boolean;
}

export type BatchOutcome =
  | { readonly ok: true; readonly result: BatchResult }
  | {
      readonly ok: false;
      readonly error: unknown;
      /** Whether running again may succeed (user code, a crash, a retryable SluiceError). */
      readonly retryable: boolean;
      /** User code threw at this location. */
      readonly failed?: FailedLocation;
    };

export class BatchRunner {
  private current: PartitionRuntime | undefined;

  constructor(private readonly options: BatchRunnerOptions) {}

  /** Whether a runtime is open (a failure discards it). */
  get isOpen(): boolean {
    return this.current !== undefined;
  }

  /** The open runtime. */
  get runtime(): PartitionRuntime {
    const rt = this.current;
    if (rt === undefined) throw new Error('BatchRunner.runtime: the partition is not open (open() after a failure)');
    return rt;
  }

  /** Open from committed state and deliver, then clear, the recovered outbox. */
  async open(): Promise<PartitionRuntime> {
    this.current = undefined;
    const rt = await this.options.open();
    const recovered = rt.recoveredOutbox;
    if (recovered.length) {
      const delivered = deliverOutbox(this.options.outbox, recovered, rt.lastBarrier);
      if (delivered) await delivered;
      await rt.outboxDelivered(rt.currentVersion);
    }
    this.current = rt;
    return rt;
  }

  /** The open runtime, or a newly opened one. */
  ready(): Promise<PartitionRuntime> | PartitionRuntime {
    return this.current ?? this.open();
  }

  /** Forget the open runtime (its owner failed outside a run). */
  discard(): void {
    this.current = undefined;
  }

  /**
   * One batch: `input`'s envelopes, or (undefined) the processing-time timers due.
   * `skip` is the caller's skip list (updated here); `mustPark` may park a failing location
   * before its maxAttempts-th failure. Never throws: a failure comes back as the outcome.
   */
  async run(input: readonly Envelope[] | undefined, skip: Map<string, ParkedFailure>, mustPark?: (location: FailureLocation) => boolean): Promise<BatchOutcome> {
    const step = this.options.step;
    try {
      const rt = this.current ?? (await this.open());
      const skipping = skip.size ? skip : undefined;
      const result = await (input ? rt.process(input, skipping) : rt.tick(skipping));
      step?.('committed');
      const delivered = deliverOutbox(this.options.outbox, result.outbox, rt.lastBarrier);
      if (delivered) await delivered;
      step?.('delivered');
      if (result.outbox.length) await rt.outboxDelivered(result.version);
      step?.('cleared');
      if (result.parked.length) await this.parked(result.parked, skip);
      return { ok: true, result };
    } catch (e) {
      this.current = undefined;
      return this.failure(e, skip, mustPark);
    }
  }

  /** Parked for good: a timer registered again later must fire, and the count is not needed. */
  private async parked(ids: readonly string[], skip: Map<string, ParkedFailure>): Promise<void> {
    for (const id of ids) skip.delete(id);
    try {
      await this.options.attempts.forget(ids);
    } catch {
      // Best effort (AttemptCounter.forget).
    }
  }

  private async failure(e: unknown, skip: Map<string, ParkedFailure>, mustPark: ((location: FailureLocation) => boolean) | undefined): Promise<BatchOutcome> {
    const retryable = e instanceof SluiceError && e.retryable;
    if (!(e instanceof RecordFailedError) || !e.location) return { ok: false, error: e, retryable };
    const location = e.location;
    const id = locationId(location);
    const cause = e.cause instanceof Error ? e.cause : e;
    const failure: AttemptFailure = { error: e.message, operator: e.operator, ...(cause.stack ? { stack: cause.stack } : {}) };
    let attempts: number;
    try {
      attempts = await this.options.attempts.failed(id, failure, this.options.maxAttempts);
    } catch (err) {
      return { ok: false, error: err, retryable: err instanceof SluiceError && err.retryable, failed: { id, location, failure, parked: false } };
    }
    const parked = attempts >= this.options.maxAttempts || (mustPark?.(location) ?? false);
    if (parked) skip.set(id, { ...failure, attempts });
    return { ok: false, error: e, retryable, failed: { id, location, failure, attempts, parked } };
  }
}
