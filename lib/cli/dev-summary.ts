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
  /** The epoch of the checkpoint taken at the stop; null when none was taken or checkpoints are off. */
  finalCheckpoint: number | null;
  /** The runtime failed (the command exits 1). */
  failed: boolean;
}
