/**
 * The only surface the HTTP ingestion endpoint sees of the embedded runtime.
 * Keeping it this narrow lets the server be tested with a fake and lets the
 * runtime own durability: the server answers 202 only after `offer` said ok.
 */
import type { ShedDecision, ShedReason } from '../transport/load-shedding.ts';
import type { Remembered } from '../transport/idempotency.ts';
import type { KeyedOffer } from './ingest-keys.ts';

/** Result of offering a batch: accepted as a whole, or refused as a whole with a retry delay. */
export type OfferResult =
  /** `durable`: resolves once the events are on disk; the answer waits for it (a rejection means they may not be). */
  | { ok: true; durable?: Promise<void> }
  | { ok: false; retryAfterMs: number };

/** What the target remembers of an Idempotency-Key, and its clock's time. */
export interface Recalled {
  readonly remembered: (Remembered & { readonly stream: string }) | undefined;
  readonly now: number;
}

/** How far behind a stream's processing is: what the endpoint's bounds (429) are checked against. */
export interface IngestPressure {
  /** Records accepted and not processed yet (by the stage the stream feeds). */
  readonly queuedRecords: number;
  /** Age of the oldest accepted event not processed yet, in ms (0: none waits). */
  readonly lagMs: number;
  /** The measured processing rate, when known: how long a queue takes to drain. */
  readonly recordsPerSecond?: number;
}

/** Events of a request the stream's load shedding dropped, and why. */
export interface ShedCount {
  readonly reason: ShedReason;
  readonly count: number;
}

export interface IngestTarget {
  /** Names of the job's ingestion streams. */
  streams(): readonly string[];
  /** Validate one event for a stream; return an error message (which field, expected, received) or undefined. */
  validate(stream: string, event: unknown): string | undefined;
  /** Enqueue valid events atomically (all or none). Returns accepted, or saturated with a retry delay. Never partially enqueues; throws when it enqueued nothing for another reason. */
  offer(stream: string, events: readonly unknown[], keyed?: KeyedOffer, shed?: ShedCount): OfferResult;
  /**
   * Optional: the stream's opt-in load shedding (SourceOptions.shed): which of these events
   * to drop now under `pressure` (the stream's, as `pressure()` gave it), or undefined when
   * nothing is to be shed (no policy, or under its bounds).
   * The endpoint offers the rest, with the count, which the target counts once the offer succeeds.
   */
  shed?(stream: string, events: readonly unknown[], pressure: IngestPressure): ShedDecision | undefined;
  /**
   * Optional: what is remembered of an Idempotency-Key. A target with it remembers `keyed`
   * offers, durably with their events when they are logged; without it, keys are ignored.
   * @internal
   */
  recall?(key: string): Recalled;
  /** Optional: the stream's queue and lag, for the endpoint's bounds (absent: only `offer` refuses). */
  pressure?(stream: string): IngestPressure | undefined;
}
