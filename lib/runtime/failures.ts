/**
 * Where user code failed, so that a retry can park exactly that: a record of the input,
 * or a timer or watermark callback. Ids are stable across attempts (the runtime core
 * is deterministic for the same committed state and input).
 */
import { UserCodeError } from '../errors.ts';
import type { TimerEntry } from '../state/backend.ts';

/** Where a record sits in the input, so that a failing one can be parked alone. */
export interface RecordLocation {
  readonly channel: string;
  readonly seq: number;
  readonly index: number;
  /** Log-fed source channels (on AWS the SQS SequenceNumber): the record's position in the input. */
  readonly offset?: string;
}

/**
 * A timer or watermark callback (onTimer, onWatermark, and whatever ran on what it
 * emitted), so that a failing one can be parked alone. `at`: the envelope whose
 * watermark fired it (absent for processing-time timers), where a retry starts.
 */
export interface CallbackLocation {
  readonly operator: string;
  readonly timer?: TimerEntry;
  readonly watermark?: number;
  readonly at?: { readonly channel: string; readonly seq: number };
}

export type FailureLocation = RecordLocation | CallbackLocation;

export function isRecordLocation(l: FailureLocation): l is RecordLocation {
  return 'index' in l;
}

/** The envelope where a failure happened, if any (a processing-time timer has none). */
export function failedEnvelope(l: FailureLocation): { readonly channel: string; readonly seq: number } | undefined {
  return isRecordLocation(l) ? l : l.at;
}

/** Stable across retries: names the same record or callback on every attempt. */
export function locationId(l: FailureLocation): string {
  if (isRecordLocation(l)) return `${l.channel}#${l.offset ?? l.seq}#${l.index}`;
  if (l.timer) return `timer:${l.operator}:${l.timer.domain}:${l.timer.time}:${l.timer.ns}:${l.timer.key}`;
  return `watermark:${l.operator}:${l.watermark}`;
}

/** What a retry parks instead of running: the error and attempts, and the operator that threw. */
export interface ParkedFailure {
  readonly error: string;
  readonly attempts: number;
  readonly operator?: string;
  /** The stack of what user code threw, for the dead letter. */
  readonly stack?: string;
}

/** User code threw on a record or in a callback; carries where, so a retry can skip it into the dead-letter queue. */
export class RecordFailedError extends UserCodeError {
  constructor(
    operator: string,
    record: unknown,
    cause: unknown,
    readonly location: FailureLocation | undefined,
  ) {
    super(operator, record, cause);
  }
}
