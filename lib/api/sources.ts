/** Source definitions: where a job's input comes from and how its event time is read. */
import type { ZodType } from 'zod';
import type { WatermarkStrategy } from './types.ts';

export type SourceBinding<T> =
  /** A named ingestion stream: events arrive at the HTTP endpoint (or `sluice run --input`). */
  | { readonly kind: 'ingest' }
  /** A bounded JSON-lines file. */
  | { readonly kind: 'file'; readonly path: string }
  /** Event n is generate(n); bounded when count is set; paced when ratePerSec is set. */
  | {
      readonly kind: 'generator';
      readonly generate: (n: number) => T;
      /**
       * Optional batch form: events start..end-1 (end > start) in one call, as generate(n)
       * would give them, in a fresh array the runtime keeps (a chunk's column). The reader
       * then makes one call per pull instead of one per event (an in-memory replay: a slice).
       */
      readonly generateBatch?: (start: number, end: number) => T[];
      readonly count?: number;
      readonly ratePerSec?: number;
    }
  /** A bounded list held in memory (tests, examples). */
  | { readonly kind: 'items'; readonly items: readonly T[] };

/** What an idle source partition's watermark does: move on with processing time, or stay where its data left it. */
export type IdleAdvance = 'processing-time' | 'hold';

export interface SourceOptions<T> {
  /**
   * Event time of an event. Default: the processing time at which the source read it.
   * Must be a pure function of the event: a retried batch or a restore's replay reads it
   * again and must get the same time (a different answer fails the run with an InvariantError).
   */
  readonly timestamp?: (event: T) => number;
  /** Default: bounded out-of-orderness of 0 ms with a 5 s idle timeout. */
  readonly watermark?: WatermarkStrategy;
  /** Source partitions. Default: the job's parallelism. */
  readonly parallelism?: number;
  /** Validates each incoming event (ingestion endpoint, files); invalid events are rejected with the schema's message. */
  readonly schema?: ZodType<T>;
  /**
   * Ingestion streams only (`job.ingest`): the furthest, in ms, an event's timestamp may be
   * ahead of its arrival (the endpoint's processing time). A later event is rejected at
   * the endpoint (the embedded HTTP server and the AWS ingest function alike) with an
   * error naming `timestamp`, this limit and the value received; it is listed among the
   * request's rejected events and never enqueued. Without it one event dated far ahead
   * moves the watermark there and makes every later event late. Default: no bound (how far
   * ahead is plausible depends on the producers' clocks); e.g. 60_000 for clocks within a
   * minute. Not checked when a file is bound to the stream (`sluice run --input`).
   */
  readonly maxFutureMs?: number;
  /**
   * While a partition of this source is idle (nothing for the watermark's idleTimeoutMs),
   * `'processing-time'` moves its watermark on with processing time from where its data
   * left it (watermark + time since its last data), so the last windows fire when every
   * partition is silent, and a record that then arrives behind it is late; `'hold'` keeps
   * it there until data comes. Default: `'processing-time'` on ingestion streams
   * (`job.ingest`), `'hold'` on other sources (a bounded input ends with a final
   * watermark that fires everything, and a pause while reading it must make nothing late).
   * Applies only with an idle timeout, and only while the input is live: a file bound to
   * an ingestion stream (`sluice run --input`) holds.
   */
  readonly idleAdvance?: IdleAdvance;
  /**
   * Ingestion streams only: opt-in load shedding. While the stream's accepted,
   * unprocessed records reach `whenQueued`, or its oldest waits `whenLagMs`, arriving
   * events are dropped by `drop` instead of waiting: `'newest'` drops every one, `{ keep:
   * r }` keeps the fraction r (every 1/r-th, by arrival), `{ priority, keepAtLeast }`
   * keeps those whose priority is at least that. Each shed event is counted per source
   * and reason and named in its request's answer (index and reason); none is enqueued.
   * Set the bounds below the endpoint's 429 bounds (`sluice dev --max-queued`,
   * `--max-lag`), or those refuse first. On AWS the ingest function estimates the queued
   * records from the source stage queue's waiting messages and reads the lag as the age
   * of its oldest message (CloudWatch, a minute or two late). Default: nothing is ever shed.
   */
  readonly shed?: LoadShedding<T>;
}

export interface LoadShedding<T = unknown> {
  readonly whenQueued?: number;
  readonly whenLagMs?: number;
  readonly drop: 'newest' | { readonly keep: number } | { readonly priority: (event: T) => number; readonly keepAtLeast: number };
}

export interface SourceDef<T = unknown> {
  readonly name: string;
  readonly binding: SourceBinding<T>;
  readonly timestamp?: (event: T) => number;
  readonly watermark: WatermarkStrategy;
  readonly schema?: ZodType<T>;
  /** See SourceOptions.maxFutureMs. */
  readonly maxFutureMs?: number;
  /** See SourceOptions.idleAdvance (resolved by the job API; absent in a definition built by hand: 'hold'). */
  readonly idleAdvance?: IdleAdvance;
  /** See SourceOptions.shed. */
  readonly shed?: LoadShedding<T>;
}

/** Turn a schema failure into "field: expected ..., received <value> (<type>)" text. */
export function validateWithSchema<T>(schema: ZodType<T> | undefined, event: unknown): string | undefined {
  if (!schema) return undefined;
  const result = schema.safeParse(event);
  if (result.success) return undefined;
  return result.error.issues
    .map((issue) => {
      const path = issue.path.length ? issue.path.join('.') : '(event)';
      // zod names the received type only; the value is what tells a sender which event and field went wrong.
      const shown = preview(valueAt(event, issue.path));
      const typed = /^(.*), received (\w+)$/s.exec(issue.message);
      if (typed) return `${path}: ${typed[1]}, received ${shown === typed[2] ? shown : `${shown} (${typed[2]})`}`;
      return `${path}: ${issue.message}, received ${shown}`;
    })
    .join('; ');
}

function valueAt(value: unknown, path: readonly PropertyKey[]): unknown {
  let v = value;
  for (const key of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

const PREVIEW_CHARS = 80;

/** A short JSON rendering of a received value (String() where JSON cannot render it). */
function preview(v: unknown): string {
  let s: string;
  try {
    s = JSON.stringify(v) ?? String(v);
  } catch {
    s = String(v);
  }
  return s.length > PREVIEW_CHARS ? `${s.slice(0, PREVIEW_CHARS)}...` : s;
}
