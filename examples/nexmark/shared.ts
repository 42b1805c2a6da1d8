/**
 * What every Nexmark query job shares (NEXMARK.md sections 2 and 5): the `events`
 * ingestion stream with its event time and watermark, a schema builder that checks
 * only the fields a query reads, type guards, and the common job parameters.
 */
import { z } from 'zod';
import { type DataStream, Job, WatermarkStrategies } from '../../lib/index.ts';
import type { Auction, Bid, NexmarkEvent, Person } from '../../lib/nexmark/index.ts';

export type { Auction, Bid, NexmarkEvent, Person };

/** Flink's Nexmark DDL declares a 4 s bounded out-of-orderness watermark. */
export const WATERMARK_DELAY_MS = 4000;

export interface NexmarkParams {
  /** Partitions per stage. */
  parallelism?: number;
  /**
   * Validate each event against the query's schema (default true). Benchmarks that
   * feed already-typed generated events in memory turn it off, as a Flink job reading
   * its own generator does not parse either.
   */
  validate?: boolean;
}

type Fields = Record<string, z.ZodType>;

export const int = z.number().int();
export const str = z.string();

/**
 * A schema for the events a query reads: each kind must carry `type` and an integer
 * `dateTime`, plus the fields listed for it. Other fields pass through unchecked, so a
 * line is rejected only for something the query would actually trip over.
 */
export function eventSchema(fields: { person?: Fields; auction?: Fields; bid?: Fields }): z.ZodType<NexmarkEvent> {
  const kind = (type: string, extra: Fields = {}) => z.looseObject({ type: z.literal(type), dateTime: int, ...extra });
  return z.discriminatedUnion('type', [kind('person', fields.person), kind('auction', fields.auction), kind('bid', fields.bid)]) as unknown as z.ZodType<NexmarkEvent>;
}

export function nexmarkJob(name: string, params: NexmarkParams, defaultParallelism?: number): Job {
  const parallelism = params.parallelism ?? defaultParallelism;
  return new Job(name, parallelism === undefined ? {} : { parallelism });
}

/** The `events` stream: event time = dateTime, watermark 4 s behind the latest event. */
export function nexmarkEvents(job: Job, schema: z.ZodType<NexmarkEvent>, params: NexmarkParams): DataStream<NexmarkEvent> {
  return job.ingest<NexmarkEvent>('events', {
    timestamp: (e) => e.dateTime,
    watermark: WatermarkStrategies.boundedOutOfOrderness(WATERMARK_DELAY_MS),
    schema: params.validate === false ? undefined : schema,
  });
}

export const isBid = (e: NexmarkEvent): e is Bid => e.type === 'bid';
export const isAuction = (e: NexmarkEvent): e is Auction => e.type === 'auction';
export const isPerson = (e: NexmarkEvent): e is Person => e.type === 'person';
