/**
 * Where a source's events come from before they become envelopes: a reader per source
 * binding (items, generator, JSON-lines file, the ingestion buffer), and the step that
 * turns an event into a record (schema, timestamp; at an ingestion endpoint also its
 * event time against arrival). Shared by the embedded runtime (lib/local) and local AWS
 * mode and the ingest handler (lib/aws).
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { validateWithSchema, type SourceBinding, type SourceDef } from '../api/sources.ts';
import type { Clock, StreamRecord } from '../api/types.ts';
import { FieldError } from '../errors.ts';
import { checkEventTime } from './ingest-validation.ts';

/** An event a source could not turn into a record (bad line, bad timestamp). Counted and reported, never dropped silently. */
export interface RejectedInput {
  readonly source: string;
  readonly position: string;
  readonly error: string;
}

/** What a reader's pull returns. */
export interface PullResult {
  readonly events: unknown[];
  readonly done: boolean;
  readonly rejected?: RejectedInput[];
  readonly positions?: string[];
}

export interface SourceReader {
  /**
   * Up to `max` events; `done` once a bounded source is exhausted. `positions`, when
   * given, names where each event came from (file:line) for error reports. The events
   * array is a fresh one, the caller's to keep and change (it may become a chunk's column).
   * Readers of memory answer synchronously, the others with a promise.
   */
  pull(max: number): PullResult | Promise<PullResult>;
  readonly bounded: boolean;
  close?(): void;
  /**
   * Replayable readers (file, items, generator): how far the reader has read, in its own
   * units (file line, item index, generator n), and a way to start again from there.
   * A checkpoint records the cursor at its barrier; a restore seeks back to it.
   */
  cursor?(): number;
  seek?(cursor: number): void;
  /**
   * The reader answers pull() synchronously (memory): the feed then pulls one chunk at a
   * time, and each pull's fresh array becomes a chunk's column without a copy.
   */
  readonly synchronous?: boolean;
}

class ItemsReader implements SourceReader {
  readonly bounded = true;
  readonly synchronous = true;
  private i = 0;
  constructor(private readonly items: readonly unknown[]) {}
  cursor(): number {
    return this.i;
  }
  seek(cursor: number): void {
    this.i = cursor;
  }
  pull(max: number): PullResult {
    const events = this.items.slice(this.i, this.i + max);
    this.i += events.length;
    return { events, done: this.i >= this.items.length };
  }
}

/** A generator's generateBatch returned something else than the events asked for. */
export class GeneratorBatchError extends FieldError {
  readonly code = 'SOURCE_GENERATOR_BATCH';
  constructor(source: string, start: number, end: number, received: unknown) {
    super(
      `source "${source}": generateBatch(${start}, ${end})`,
      `an array of ${end - start} events`,
      Array.isArray(received) ? `an array of ${received.length}` : `${received === null ? 'null' : typeof received}`,
    );
  }
}

class GeneratorReader implements SourceReader {
  readonly bounded: boolean;
  readonly synchronous = true;
  private n = 0;
  private startedAt?: number;
  constructor(
    private readonly gen: { generate: (n: number) => unknown; generateBatch?: (start: number, end: number) => unknown[]; count?: number; ratePerSec?: number },
    private readonly clock: Clock,
    private readonly source: string,
  ) {
    this.bounded = gen.count !== undefined;
  }
  cursor(): number {
    return this.n;
  }
  seek(cursor: number): void {
    this.n = cursor;
  }
  pull(max: number): PullResult {
    let limit = this.gen.count ?? Number.POSITIVE_INFINITY;
    if (this.gen.ratePerSec) {
      this.startedAt ??= this.clock.now();
      limit = Math.min(limit, Math.floor(((this.clock.now() - this.startedAt) * this.gen.ratePerSec) / 1000));
    }
    const start = this.n;
    const end = Math.max(start, Math.min(limit, start + max));
    if (this.gen.generateBatch !== undefined && end > start) {
      // One call for the pull; a throw leaves the cursor at start (nothing of it was read).
      const events = this.gen.generateBatch(start, end);
      if (!Array.isArray(events) || events.length !== end - start) throw new GeneratorBatchError(this.source, start, end, events);
      this.n = end;
      return { events, done: this.gen.count !== undefined && end >= this.gen.count };
    }
    const events: unknown[] = new Array(end - start);
    // Locals in the loop (no field write per event); a throw leaves the cursor at the event that threw, as before.
    const gen = this.gen;
    let n = start;
    try {
      for (; n < end; n++) events[n - start] = gen.generate(n);
    } finally {
      this.n = n;
    }
    return { events, done: this.gen.count !== undefined && n >= this.gen.count };
  }
}

class FileReader implements SourceReader {
  readonly bounded = true;
  private lines?: AsyncIterator<string>;
  private lineNo = 0;
  /** Lines to skip on open (a restore: line numbers are the positions). */
  private skipTo = 0;
  constructor(
    private readonly path: string,
    private readonly source: string,
  ) {}
  cursor(): number {
    return this.lineNo;
  }
  seek(cursor: number): void {
    if (this.lines) throw new Error('FileReader.seek after the first pull');
    this.skipTo = cursor;
  }
  async pull(max: number): Promise<PullResult> {
    if (!this.lines) {
      this.lines = createInterface({ input: createReadStream(this.path), crlfDelay: Infinity })[Symbol.asyncIterator]();
      while (this.lineNo < this.skipTo && !(await this.lines.next()).done) this.lineNo++;
    }
    const events: unknown[] = [];
    const positions: string[] = [];
    const rejected: RejectedInput[] = [];
    while (events.length < max) {
      const next = await this.lines.next();
      if (next.done) return { events, done: true, rejected, positions };
      this.lineNo++;
      const line = next.value.trim();
      if (!line) continue;
      try {
        events.push(JSON.parse(line));
        positions.push(`${this.path}:${this.lineNo}`);
      } catch (e) {
        rejected.push({ source: this.source, position: `${this.path}:${this.lineNo}`, error: `expected one JSON value per line: ${(e as Error).message}` });
      }
    }
    return { events, done: false, rejected, positions };
  }
}

/** Events accepted at the ingestion endpoint wait here until the scheduler pulls them. */
export class IngestBuffer implements SourceReader {
  readonly bounded = false;
  readonly synchronous = true;
  private buffer: unknown[] = [];
  private head = 0;
  pull(max: number): PullResult {
    const events = this.buffer.slice(this.head, this.head + max);
    this.head += events.length;
    if (this.head > 4096 && this.head * 2 > this.buffer.length) {
      this.buffer = this.buffer.slice(this.head);
      this.head = 0;
    }
    return { events, done: false };
  }
  push(events: readonly unknown[]): void {
    for (const e of events) this.buffer.push(e);
  }
  get size(): number {
    return this.buffer.length - this.head;
  }
}

export function createReader(binding: SourceBinding<unknown>, source: string, clock: Clock): SourceReader {
  switch (binding.kind) {
    case 'items':
      return new ItemsReader(binding.items);
    case 'generator':
      return new GeneratorReader(binding, clock, source);
    case 'file':
      return new FileReader(binding.path, source);
    case 'ingest':
      return new IngestBuffer();
  }
}

/** Validate an event and read its timestamp; an error message when it cannot become a record. */
export function toRecord(def: SourceDef<any>, event: unknown, clock: Clock): StreamRecord | string {
  const invalid = validateWithSchema(def.schema, event);
  if (invalid) return invalid;
  let timestamp: unknown;
  try {
    timestamp = def.timestamp ? def.timestamp(event) : clock.now();
  } catch (e) {
    return `timestamp: the extractor threw: ${(e as Error).message}`;
  }
  if (typeof timestamp !== 'number' || !Number.isFinite(timestamp)) return `timestamp: expected a finite number of epoch milliseconds, received ${JSON.stringify(timestamp) ?? String(timestamp)} (${typeof timestamp})`;
  return { value: event, timestamp };
}

/**
 * toRecord for an event arriving at an ingestion endpoint (the embedded HTTP server and
 * the AWS ingest function alike), at `arrival`: its event time must also be an integer
 * within the source's maxFutureMs of arrival. Only there: a file or a log replayed later
 * has no arrival to be measured against. (The endpoints bound its depth before this.)
 */
export function toIngestRecord(def: SourceDef<any>, event: unknown, clock: Clock, arrival = clock.now()): StreamRecord | string {
  const r = toRecord(def, event, clock);
  if (typeof r === 'string') return r;
  return checkEventTime(r.timestamp, arrival, def.maxFutureMs) ?? r;
}
