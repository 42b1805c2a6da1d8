import type { RuntimeStats } from '../local/embedded-options.ts';
import type { IngestRejections } from '../local/ingest-bounds.ts';

/** What `sluice dev` ends with on either target (dev.ts, target-local-aws.ts; `--json`: this object, the last line on stdout). */
export interface DevSummary {
  job: string;
  target: 'embedded' | 'local-aws';
  url: string;
  recordsIngested: number;
  rejected: {
    /** Events refused as invalid: the endpoint's 400s per event, and events the runtime could not read. */
    invalid: number;
    /** Events refused with 429 (back-pressure: the client is told to retry them). */
    overBounds: number;
    /** Requests refused unread (malformed body, 413, 415): their events are not counted. */
    requestsRefused: number;
  };
  deadLetters: number;
  deadLetterFile: string | null;
  /** Records windows and joins dropped as late, per operator; null where the runtime does not count them (local-aws: the handlers' lateDropped metric). */
  lateDropped: Record<string, number> | null;
  /** Events load shedding dropped, per ingestion stream and reason (on local-aws, from the ingest function's answers). */
  shed: Record<string, Record<string, number>> | null;
  /** The epoch of the checkpoint taken at the stop; null when none was taken or checkpoints are off. */
  finalCheckpoint: number | null;
  /** The runtime failed (the command exits 1). */
  failed: boolean;
}

/** The embedded dev's rejections as DevSummary and DevStatus give them: the endpoint's per status, and the events the runtime could not read. */
export function rejectedCounts(s: Pick<RuntimeStats, 'rejectedInputs'>, endpoint: IngestRejections): DevSummary['rejected'] {
  return { invalid: (endpoint.byStatus[400] ?? 0) + s.rejectedInputs, overBounds: endpoint.byStatus[429] ?? 0, requestsRefused: endpoint.requests };
}
