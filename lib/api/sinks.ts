/**
 * Sinks. The runtime hands a sink the records of one committed batch at a time,
 * named by (producer, seq): a producer's seq only grows, so a sink that remembers
 * the highest seq per producer drops redelivered batches and writes each record once.
 */
import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { dirname } from 'node:path';
import type { Writable } from 'node:stream';
import { SluiceError } from '../errors.ts';

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

/** A sink whose output is tied to checkpoints: the checkpoint driver (local or on AWS) prepares
 * it before the checkpoint's commit point and commits it once the checkpoint committed. */
export interface TransactionalSink {
  readonly transactional: true;
  prepare(epoch: number): void | Promise<void>;
  commit(epoch: number): void | Promise<void>;
  /** After a restore of checkpoint `epoch`: finish its commit, then drop everything staged after it. */
  recover(epoch: number): void | Promise<void>;
  /**
   * Before a resume or a restore changes anything: throws when this sink cannot continue
   * the output its checkpoints committed (another file, say), so the run is refused
   * with the checkpoint directory as it was.
   */
  check?(): void;
}

export function isTransactional(s: unknown): s is TransactionalSink {
  return (s as TransactionalSink | null)?.transactional === true;
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
    const written = this.writeRecords(batch.records);
    // The mark moves only once the batch is written: a failed write must not turn its retry into a "duplicate".
    if (!written) {
      this.highWater.set(batch.producer, batch.seq);
      return;
    }
    return written.then(() => {
      if ((this.highWater.get(batch.producer) ?? 0) < batch.seq) this.highWater.set(batch.producer, batch.seq);
    });
  }

  protected abstract writeRecords(records: readonly T[]): Promise<void> | void;
}

/**
 * Some records of a delivery could not be written (the sink's key or item function threw
 * or returned the wrong type, a value is not serialisable); the others were. Both runtimes
 * park the rejected ones as dead letters with their error (lib/runtime/batch-runner.ts), so
 * one bad record neither wedges the partition (its outbox would fail forever) nor
 * disappears, nor ends the run.
 */
export class SinkRecordsRejectedError extends SluiceError {
  readonly code = 'SINK_RECORDS_REJECTED';
  readonly retryable = false;
  constructor(
    readonly sink: string,
    readonly producer: string,
    readonly seq: number,
    readonly rejected: readonly { readonly index: number; readonly record: unknown; readonly error: string }[],
  ) {
    super(`sink ${sink}: ${rejected.length} record(s) of delivery ${producer}#${seq} rejected; first: record ${rejected[0]?.index}: ${rejected[0]?.error}`);
  }
}

/** A sink's stream failed (EPIPE, ENOSPC, ...): what it was writing cannot be counted as delivered. */
export class SinkWriteError extends SluiceError {
  readonly code = 'SINK_WRITE';
  readonly retryable = false;
  constructor(
    readonly sink: string,
    cause: unknown,
  ) {
    super(`${sink} sink: write failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

/**
 * Text to a Writable with back-pressure: each write resolves only once the stream has
 * handed its bytes to the OS (its write callback), so a runtime that awaits it holds at
 * most one batch in the process's buffers and counts a batch delivered only when it left
 * them. A stream error rejects this write and every later one instead of crashing the
 * process as an unhandled 'error' event would.
 */
export class StreamWriter {
  private failure?: SinkWriteError;
  private attached?: Writable;
  private readonly onError = (err: Error) => {
    this.failure ??= new SinkWriteError(this.sink, err);
  };

  constructor(private readonly sink: string) {}

  write(stream: Writable, text: string): Promise<void> {
    if (this.attached !== stream) {
      this.detach();
      stream.on('error', this.onError);
      this.attached = stream;
    }
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      stream.write(text, (err) => {
        if (err) this.onError(err);
        if (this.failure) reject(this.failure);
        else resolve();
      });
    });
  }

  /** Stop listening for the stream's errors (the sink is closed). */
  detach(): void {
    this.attached?.off('error', this.onError);
    this.attached = undefined;
  }
}

/** Keeps every record in memory, in arrival order. For tests. */
export class CollectSink<T> extends IdempotentSink<T> {
  readonly kind = 'collect';
  readonly records: T[] = [];
  protected writeRecords(records: readonly T[]): void {
    for (const r of records) this.records.push(r);
  }
}

/**
 * Prints each record as one line (JSON unless a format function is given) to `out`
 * (default process.stdout). A batch counts as delivered once its lines reached the OS:
 * a slow reader slows the job instead of filling memory.
 */
export class StdoutSink<T> extends IdempotentSink<T> {
  readonly kind = 'stdout';
  private readonly writer = new StreamWriter('stdout');
  constructor(
    private readonly format: (record: T) => string = (r) => JSON.stringify(r),
    private readonly out: () => Writable = () => process.stdout,
  ) {
    super();
  }
  protected writeRecords(records: readonly T[]): Promise<void> | void {
    if (records.length === 0) return;
    let text = '';
    for (const r of records) text += this.format(r) + '\n';
    return this.writer.write(this.out(), text);
  }
  close(): void {
    this.writer.detach();
  }
}

/**
 * Appends each record as a JSON line to a file (created, with its directory, on open).
 * A batch counts as delivered once the OS took it (not fsynced: see the transactional
 * file sink for output that survives a power loss).
 */
export class JsonLinesFileSink<T> extends IdempotentSink<T> {
  readonly kind = 'jsonl-file';
  private stream?: WriteStream;
  private readonly writer = new StreamWriter('jsonl-file');
  constructor(readonly path: string) {
    super();
  }
  open(): void {
    mkdirSync(dirname(this.path), { recursive: true });
    this.stream = createWriteStream(this.path, { flags: 'w' });
  }
  protected writeRecords(records: readonly T[]): Promise<void> | void {
    if (!this.stream) this.open();
    if (records.length === 0) return;
    let text = '';
    for (const r of records) text += JSON.stringify(r) + '\n';
    return this.writer.write(this.stream!, text);
  }
  close(): Promise<void> {
    const s = this.stream;
    this.stream = undefined;
    if (!s) return Promise.resolve();
    return new Promise<void>((resolve, reject) => s.end((err?: Error | null) => (err ? reject(new SinkWriteError(this.kind, err)) : resolve()))).finally(() => this.writer.detach());
  }
}

export const Sinks = {
  collect: <T>() => new CollectSink<T>(),
  stdout: <T>(format?: (record: T) => string) => new StdoutSink<T>(format),
  jsonLinesFile: <T>(path: string) => new JsonLinesFileSink<T>(path),
};
