/**
 * Back-pressure at the embedded ingestion endpoint (contract point 5): a request that
 * would take a stream past the bounds the user set is refused whole with a 429 and a
 * Retry-After, and enqueues nothing. Two bounds, either optional:
 * - queued records: accepted and not processed yet; with the request's valid events
 *   they may not exceed `maxQueuedRecords` (so the endpoint's memory is bounded by it);
 * - lag: the age of the oldest accepted event not processed yet; at or past `maxLagMs`,
 *   requests are refused until the job catches up.
 * Also the endpoint's count of what it refused, per status and per event (ingest-server.ts).
 */
import { type IngestAnswer, saturatedAnswer } from '../transport/ingest-validation.ts';
import type { IngestPressure } from './ingest-target.ts';

export interface IngestBounds {
  readonly maxQueuedRecords?: number;
  readonly maxLagMs?: number;
}

/** Shortest and longest Retry-After the bounds ask for. */
const MIN_RETRY_MS = 1000;
const MAX_RETRY_MS = 60_000;

const clampRetry = (ms: number) => Math.min(MAX_RETRY_MS, Math.max(MIN_RETRY_MS, Math.ceil(ms / 1000) * 1000));

/**
 * The 429 for `events` more valid events on `stream`, or undefined when they fit. Retry-After:
 * the time the excess takes to drain at the measured rate (1 s without one), or the lag past the bound.
 */
export function overBounds(stream: string, events: number, p: IngestPressure | undefined, b: IngestBounds): IngestAnswer | undefined {
  if (!p) return undefined;
  if (b.maxQueuedRecords !== undefined && p.queuedRecords + events > b.maxQueuedRecords) {
    const excess = p.queuedRecords + events - b.maxQueuedRecords;
    const ms = p.recordsPerSecond ? (excess / p.recordsPerSecond) * 1000 : MIN_RETRY_MS;
    return saturatedAnswer(
      stream,
      clampRetry(ms),
      `has ${p.queuedRecords} records queued; with these ${events} it would pass the bound of ${b.maxQueuedRecords} (--max-queued)`,
    );
  }
  if (b.maxLagMs !== undefined && p.lagMs >= b.maxLagMs) {
    return saturatedAnswer(stream, clampRetry(p.lagMs - b.maxLagMs), `lags ${p.lagMs} ms behind, at or past the bound of ${b.maxLagMs} ms (--max-lag)`);
  }
  return undefined;
}

/** What the endpoint refused: events per status, and requests refused before their events could be counted. */
export interface IngestRejections {
  /** Events refused, all statuses together (a 202's rejected events included). */
  readonly events: number;
  /** Events refused per status: 400 (invalid), 429 (over a bound or saturated). */
  readonly byStatus: Readonly<Record<number, number>>;
  /** Requests refused unread or unparsed (400 malformed, 413, 415): their events are not known. */
  readonly requests: number;
}

export class RejectionCounter {
  private events = 0;
  private requests = 0;
  private readonly byStatus: Record<number, number> = {};

  /** `events` refused with `status`; undefined: a request whose events are unknown. */
  add(status: number, events?: number): void {
    if (events === undefined) {
      this.requests++;
      return;
    }
    if (events === 0) return;
    this.events += events;
    this.byStatus[status] = (this.byStatus[status] ?? 0) + events;
  }

  snapshot(): IngestRejections {
    return { events: this.events, byStatus: { ...this.byStatus }, requests: this.requests };
  }
}
