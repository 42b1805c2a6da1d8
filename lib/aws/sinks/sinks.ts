/**
 * The AWS sinks as a job module builds them (`AwsSinks` from `sluice/aws`): options
 * validated at once (zod, so a bad option fails when the job module is built, or at
 * synth), the SDK-backed implementation (s3-file-sink.ts, dynamodb-upsert-sink.ts)
 * loaded and built on first use, after the handler has bound the sink.
 */
import type { Sink, SinkBatch } from '../../api/sinks.ts';
import type { DynamoDbUpsertSink } from './dynamodb-upsert-sink.ts';
import type { S3FileSink } from './s3-file-sink.ts';
import { type AwsBindableSink, type AwsSinkBinding, type AwsSinkResources, type DynamoDbUpsertSinkOptions, parseS3FileSinkOptions, parseUpsertOptions, type S3FileSinkOptions } from './sink-options.ts';

abstract class LazyAwsSink<T, S extends Sink<T> & AwsBindableSink> implements Sink<T>, AwsBindableSink {
  abstract readonly kind: string;
  private impl?: Promise<S>;
  private loaded?: S;
  private binding?: AwsSinkBinding;

  constructor(readonly awsResources: AwsSinkResources) {}

  protected abstract load(): Promise<S>;

  bindAws(binding: AwsSinkBinding): void {
    this.binding = binding;
    this.loaded?.bindAws(binding);
  }

  /** The implementation (loaded and bound). */
  resolve(): Promise<S> {
    return (this.impl ??= this.load().then((s) => {
      if (this.binding) s.bindAws(this.binding);
      this.loaded = s;
      return s;
    }));
  }

  async write(batch: SinkBatch<T>): Promise<void> {
    await (await this.resolve()).write(batch);
  }
}

/** AwsSinks.s3Files: JSON-lines objects committed per checkpoint epoch (s3-file-sink.ts). */
export class S3FilesSink<T> extends LazyAwsSink<T, S3FileSink<T>> {
  readonly kind = 's3-files';
  readonly transactional = true;
  private readonly resolved: ReturnType<typeof parseS3FileSinkOptions>;

  constructor(options: S3FileSinkOptions) {
    const resolved = parseS3FileSinkOptions(options);
    super({ kind: 's3-files', bucket: resolved.bucket, prefix: resolved.prefix });
    this.resolved = resolved;
  }

  protected async load(): Promise<S3FileSink<T>> {
    const { S3FileSink } = await import('./s3-file-sink.ts');
    return new S3FileSink<T>(this.resolved);
  }

  async prepare(epoch: number): Promise<void> {
    await (await this.resolve()).prepare(epoch);
  }

  async commit(epoch: number): Promise<void> {
    await (await this.resolve()).commit(epoch);
  }

  async recover(epoch: number): Promise<void> {
    await (await this.resolve()).recover(epoch);
  }

  /** The committed records in order (follows the committed manifest chain). */
  async readCommitted(options?: { afterEpoch?: number }): Promise<{ epoch: number; records: T[] }> {
    return (await this.resolve()).readCommitted(options);
  }
}

/** AwsSinks.dynamodbUpsert: one item per record key, idempotent (dynamodb-upsert-sink.ts). */
export class DynamoDbUpsert<T> extends LazyAwsSink<T, DynamoDbUpsertSink<T>> {
  readonly kind = 'dynamodb-upsert';
  private readonly resolved: ReturnType<typeof parseUpsertOptions<T>>;

  constructor(options: DynamoDbUpsertSinkOptions<T>) {
    const resolved = parseUpsertOptions(options);
    super({ kind: 'dynamodb-upsert', table: resolved.table });
    this.resolved = resolved;
  }

  protected async load(): Promise<DynamoDbUpsertSink<T>> {
    const { DynamoDbUpsertSink } = await import('./dynamodb-upsert-sink.ts');
    return new DynamoDbUpsertSink<T>(this.resolved);
  }
}

/** The AWS sinks; they run on the AWS path (`sluice deploy`, `--target local-aws|assembly`). */
export const AwsSinks = {
  /**
   * JSON-lines objects in S3, visible only once the checkpoint of their epoch commits (a
   * committed manifest chain; read it with `readCommitted()`). Needs the checkpoint state
   * machine; bucket defaults to the job's snapshot bucket.
   */
  s3Files: <T>(options: S3FileSinkOptions) => new S3FilesSink<T>(options),
  /** One DynamoDB item per record key, last write per key wins, idempotent under redelivery. */
  dynamodbUpsert: <T>(options: DynamoDbUpsertSinkOptions<T>) => new DynamoDbUpsert<T>(options),
};
