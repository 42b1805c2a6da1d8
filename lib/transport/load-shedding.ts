/**
 * Opt-in load shedding of an ingestion stream (SourceOptions.shed): whether the stream is
 * over its bounds, and which of a request's events to drop. Pure but for the sampler's
 * count of events seen while shedding, which the caller keeps per source.
 */
import type { LoadShedding } from '../api/sources.ts';

export type ShedReason = 'newest' | 'sample' | 'priority';

export interface ShedDecision {
  /** Events kept, in order. */
  readonly kept: unknown[];
  /** Indexes (into the events given) of those shed. */
  readonly shed: number[];
  readonly reason: ShedReason;
}

/** Over a bound: queued records at or past whenQueued, or the oldest waiting at or past whenLagMs. */
export function overShedBounds(policy: LoadShedding<unknown>, pressure: { readonly queuedRecords: number; readonly lagMs: number }): boolean {
  return (policy.whenQueued !== undefined && pressure.queuedRecords >= policy.whenQueued) || (policy.whenLagMs !== undefined && pressure.lagMs >= policy.whenLagMs);
}

/**
 * The events to keep while shedding. `seen`: events the sampler saw while shedding before
 * these (a keep of r keeps event n when floor((n + 1) r) > floor(n r)); the caller adds
 * events.length to it. A priority function that throws keeps its event (a bug in it must
 * not drop data).
 */
export function shedEvents(policy: LoadShedding<unknown>, events: readonly unknown[], seen: number): ShedDecision {
  const drop = policy.drop;
  const kept: unknown[] = [];
  const shed: number[] = [];
  if (drop === 'newest') return { kept, shed: events.map((_, i) => i), reason: 'newest' };
  const keeps =
    'keep' in drop
      ? (i: number) => Math.floor((seen + i + 1) * drop.keep) > Math.floor((seen + i) * drop.keep)
      : (i: number) => {
          try {
            return drop.priority(events[i]) >= drop.keepAtLeast;
          } catch {
            return true;
          }
        };
  events.forEach((e, i) => (keeps(i) ? kept.push(e) : shed.push(i)));
  return { kept, shed, reason: 'keep' in drop ? 'sample' : 'priority' };
}
