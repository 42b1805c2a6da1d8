/**
 * Sinks. The runtime hands a sink the records of one committed batch at a time,
 * named by (producer, seq): a producer's seq only grows, so a sink that remembers
 * the highest seq per producer drops redelivered batches and writes each record once.
 */
import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { dirname } from 'node:path';
import type { DynamoDbUpsertSinkOptions, S3FileSinkOptions } from '../aws/sink-options.ts';
import { DynamoDbUpsert, S3FilesSink } from './aws-sinks.ts';

export interface SinkBatch<T> {
  /** The partition that produced the batch (stable across retries). */
  readonly producer: string;
  /** Strictly increasing per producer; a redelivery repeats a seq. */
  readonly seq: number;
  readonly records: readonly T[];
}

export interface Sink<T> {
  /** What kind of sink this is (for messages and metrics). */
  readonly kind: string;
  open?(): Promise<void> | void;
  write(batch: SinkBatch<T>): Promise<void> | void;
  close?(): Promise<void> | void;
}

/** Policy for idempotent sinks: drop batches at or below the producer's high-water mark. */
export abstract class IdempotentSink<T> implements Sink<T> {
  abstract readonly kind: string;
  private readonly highWater = new Map<string, number>();
  /** Batches dropped as redeliveries (for tests and metrics). */
  duplicatesDropped = 0;

  write(batch: SinkBatch<T>): Promise<void> | void {
    const hw = this.highWater.get(batch.producer) ?? 0;
    if (batch.seq <= hw) {
      this.duplicatesDropped++;
      return;
    }
    this.highWater.set(batch.producer, batch.seq);
    return this.writeRecords(batch.records);
  }

  protected abstract writeRecords(records: readonly T[]): Promise<void> | void;
}

/** Keeps every record in memory, in arrival order. For tests. */
export class CollectSink<T> extends IdempotentSink<T> {
  readonly kind = 'collect';
  readonly records: T[] = [];
  protected writeRecords(records: readonly T[]): void {
    for (const r of records) this.records.push(r);
  }
}

/** Prints each record as one line (JSON unless a format function is given). */
export class StdoutSink<T> extends IdempotentSink<T> {
  readonly kind = 'stdout';
  constructor(private readonly format: (record: T) => string = (r) => JSON.stringify(r)) {
    super();
  }
  protected writeRecords(records: readonly T[]): void {
    if (records.length === 0) return;
    process.stdout.write(records.map((r) => this.format(r)).join('\n') + '\n');
  }
}

/** Appends each record as a JSON line to a file (created, with its directory, on open). */
export class JsonLinesFileSink<T> extends IdempotentSink<T> {
  readonly kind = 'jsonl-file';
  private stream?: WriteStream;
  constructor(readonly path: string) {
    super();
  }
  open(): void {
    mkdirSync(dirname(this.path), { recursive: true });
    this.stream = createWriteStream(this.path, { flags: 'w' });
  }
  protected writeRecords(records: readonly T[]): void {
    if (!this.stream) this.open();
    if (records.length === 0) return;
    let text = '';
    for (const r of records) text += JSON.stringify(r) + '\n';
    this.stream!.write(text);
  }
  close(): Promise<void> {
    const s = this.stream;
    this.stream = undefined;
    if (!s) return Promise.resolve();
    return new Promise((resolve, reject) => s.end((err?: Error | null) => (err ? reject(err) : resolve())));
  }
}

export const Sinks = {
  collect: <T>() => new CollectSink<T>(),
  stdout: <T>(format?: (record: T) => string) => new StdoutSink<T>(format),
  jsonLinesFile: <T>(path: string) => new JsonLinesFileSink<T>(path),
  /**
   * AWS: JSON-lines objects in S3, visible only once the checkpoint of their epoch
   * commits (a committed manifest chain; read it with `readCommitted()`). Needs the
   * checkpoint state machine; bucket defaults to the job's snapshot bucket.
   */
  s3Files: <T>(options: S3FileSinkOptions) => new S3FilesSink<T>(options),
  /** AWS: one DynamoDB item per record key, last write per key wins, idempotent under redelivery. */
  dynamodbUpsert: <T>(options: DynamoDbUpsertSinkOptions<T>) => new DynamoDbUpsert<T>(options),
};
