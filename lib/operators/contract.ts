/**
 * The contract between the partition runtime and operators. An operator instance
 * lives in one partition; the runtime sets the current key before calling it for a
 * keyed record or timer, and routes what it emits (same stage: a direct call; other
 * stages: the outbox). All calls are synchronous; I/O happens around the batch.
 * The runtime (lib/runtime/context.ts) implements the context.
 */
import type { Key, StreamRecord } from '../api/types.ts';
import type { KeyedFields } from '../state/keyed-fields.ts';

export type TimeDomain = 'event' | 'processing';

export interface OperatorContext extends KeyedFields {
  readonly partition: number;
  readonly parallelism: number;
  /** The partition's current input watermark. */
  watermark(): number;

  /** Keyed operators only: the key of the record or timer being processed. */
  currentKey(): Key;
  /** Switch the current key (operators that fan out over keys, rarely needed). */
  setCurrentKey(key: Key): void;

  /** Timers of the current key; registering an existing timer is a no-op. ns separates an operator's uses. */
  registerTimer(domain: TimeDomain, time: number, ns?: string): void;
  deleteTimer(domain: TimeDomain, time: number, ns?: string): void;

  /** Emit to the main output or a side-output port. */
  emit(value: unknown, timestamp: number, port?: string): void;
}

export interface StreamOperator {
  /** The runtime may reuse `record` for the next one (columnar envelopes): keep its value, never the record. */
  processElement(record: StreamRecord, input: number): void;
  /** A timer of the current key fired. */
  onTimer?(domain: TimeDomain, time: number, ns: string): void;
  /** Called after every event-time timer at or before wm has fired. */
  onWatermark?(wm: number): void;
  /** Records this instance dropped as late (no late-data side output): read after each batch, so none goes uncounted. */
  readonly droppedLate?: number;
}

export type OperatorFactory = (ctx: OperatorContext) => StreamOperator;
