/**
 * Options of the AWS sinks (S3 files committed per epoch, DynamoDB upsert), validated
 * with zod when the job module builds the sink, so a bad option fails at build or synth
 * time with the field, what was expected and what was received. This module loads only
 * zod (and SDK types): the SDK-backed implementations load on first use (sinks.ts).
 *
 * Binding: a sink built in a job module does not know its job, clients or bucket. The
 * operator function and the checkpoint task call `bindAws()` with them before the first
 * write, prepare or commit (lib/aws/operator/operator-handler.ts, checkpoint-handler.ts).
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { S3Client } from '@aws-sdk/client-s3';
import { z } from 'zod';
import { ConfigError, SluiceError } from '../../errors.ts';
import type { AwsAccounting } from '../cost/accounting.ts';

/** What the AWS handlers know and a sink needs. */
export interface AwsSinkBinding {
  readonly job: string;
  /** The sink's node name in the job. */
  readonly sink: string;
  readonly s3?: S3Client;
  readonly dynamodb?: DynamoDBClient;
  /** The job's snapshot bucket (SLUICE_BUCKET): where an S3 file sink without `bucket` writes. */
  readonly bucket?: string;
  /** The job's state table: where the S3 file sink's commit pointer lives. */
  readonly tableName: string;
  readonly accounting?: AwsAccounting;
}

export interface AwsBindableSink {
  bindAws(binding: AwsSinkBinding): void;
  /** Where the sink writes, for infra grants (SluiceJob) and messages. */
  readonly awsResources: AwsSinkResources;
}

export type AwsSinkResources =
  /** bucket undefined: the job's snapshot bucket, under `${job}/sinks/${prefix}`. */
  | { readonly kind: 's3-files'; readonly bucket?: string; readonly prefix: string }
  | { readonly kind: 'dynamodb-upsert'; readonly table: string };

export function isAwsBindable(s: unknown): s is AwsBindableSink {
  return typeof (s as AwsBindableSink | null)?.bindAws === 'function' && typeof (s as AwsBindableSink).awsResources === 'object';
}

/** Bind every AWS sink of a job's sink map (the handlers call this once). */
export function bindAwsSinks(sinks: Iterable<readonly [string, unknown]>, binding: Omit<AwsSinkBinding, 'sink'>): void {
  for (const [sink, s] of sinks) if (isAwsBindable(s)) s.bindAws({ ...binding, sink });
}

export { SinkRecordsRejectedError } from '../../api/sinks.ts';

// ---- S3 files ---------------------------------------------------------------------------

/** S3's bucket naming rules (general purpose buckets). */
const BUCKET = /^(?!xn--)(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
/** Key characters S3 documents as safe, so keys need no encoding anywhere. */
const PREFIX = /^[A-Za-z0-9!_.*'()/-]+$/;

const s3FilesSchema = z.object({
  bucket: z.string().regex(BUCKET, 'an S3 bucket name (3 to 63 of a-z, 0-9, ".", "-")').optional(),
  prefix: z
    .string()
    .min(1, 'a non-empty key prefix')
    .max(512, 'at most 512 characters')
    .regex(PREFIX, 'letters, digits and !_.*\'()/- (S3 safe characters)')
    .refine((p) => !p.startsWith('/') && !p.includes('//'), 'no leading "/" and no empty path segment'),
});

export interface S3FileSinkOptions {
  /**
   * The bucket the files go to.
   * @default - the job's snapshot bucket, under `${job}/sinks/${prefix}`
   */
  readonly bucket?: string;
  /** Key prefix of this sink's objects (`data/`, `prepared/`, `manifests/` below it). */
  readonly prefix: string;
}

export interface ResolvedS3FileSinkOptions {
  readonly bucket?: string;
  /** Ends with "/". */
  readonly prefix: string;
}

export function parseS3FileSinkOptions(options: unknown): ResolvedS3FileSinkOptions {
  const o = parse('AwsSinks.s3Files', s3FilesSchema, options);
  return { bucket: o.bucket, prefix: o.prefix.endsWith('/') ? o.prefix : `${o.prefix}/` };
}

// ---- DynamoDB upsert --------------------------------------------------------------------

export type KeyValue = string | number;

const fn = z.custom<(...args: never[]) => unknown>((v) => typeof v === 'function', 'a function');
const attribute = z.string().min(1, 'a non-empty attribute name').max(255, 'at most 255 characters');

const upsertSchema = z.object({
  table: z.string().regex(/^[A-Za-z0-9_.-]{3,255}$/, 'a DynamoDB table name (3 to 255 of A-Z, a-z, 0-9, "_", "-", ".")'),
  key: fn,
  item: fn.optional(),
  partitionKey: attribute.optional(),
  sortKey: attribute.optional(),
  concurrency: z.number().int('an integer').min(1, 'at least 1').max(256, 'at most 256').optional(),
  maxAttempts: z.number().int('an integer').min(1, 'at least 1').max(20, 'at most 20').optional(),
  sleep: fn.optional(),
});

export interface DynamoDbUpsertSinkOptions<T> {
  /** The table the items go to (its key schema: `partitionKey`, and `sortKey` when set). */
  readonly table: string;
  /**
   * The record's key: one value (the partition key) or, with a sort key, `[partition, sort]`.
   * Records with the same key are one item; the last one a producer emitted wins.
   */
  readonly key: (record: T) => KeyValue | readonly [KeyValue, KeyValue];
  /** The item's other attributes. @default - the record itself when it is an object, else `{ value: record }` */
  readonly item?: (record: T) => Record<string, unknown>;
  /** @default 'pk' */
  readonly partitionKey?: string;
  /** @default - none: the table has a partition key only */
  readonly sortKey?: string;
  /** Conditional writes in flight per delivery. @default 16 */
  readonly concurrency?: number;
  /** Attempts per item when DynamoDB throttles or the answer is lost, before the delivery fails (and is redelivered). @default 8 */
  readonly maxAttempts?: number;
  /** Backoff between attempts (tests pass a fake). @default setTimeout */
  readonly sleep?: (ms: number) => Promise<void>;
}

export interface ResolvedUpsertOptions<T> {
  readonly table: string;
  readonly key: (record: T) => KeyValue | readonly [KeyValue, KeyValue];
  readonly item?: (record: T) => Record<string, unknown>;
  readonly partitionKey: string;
  readonly sortKey?: string;
  readonly concurrency: number;
  readonly maxAttempts: number;
  readonly sleep: (ms: number) => Promise<void>;
}

/** Attributes the sink keeps on every item (which producer wrote it, at which delivery). */
export const PRODUCER_ATTRIBUTE = 'sluice_producer';
export const SEQ_ATTRIBUTE = 'sluice_seq';

export function parseUpsertOptions<T>(options: DynamoDbUpsertSinkOptions<T>): ResolvedUpsertOptions<T> {
  const o = parse('AwsSinks.dynamodbUpsert', upsertSchema, options);
  const partitionKey = o.partitionKey ?? 'pk';
  for (const [field, name] of [['partitionKey', partitionKey], ['sortKey', o.sortKey]] as const) {
    if (name === PRODUCER_ATTRIBUTE || name === SEQ_ATTRIBUTE) throw new ConfigError(`AwsSinks.dynamodbUpsert.${field}`, `an attribute other than ${PRODUCER_ATTRIBUTE} and ${SEQ_ATTRIBUTE} (the sink's own)`, JSON.stringify(name));
  }
  if (o.sortKey !== undefined && o.sortKey === partitionKey) throw new ConfigError('AwsSinks.dynamodbUpsert.sortKey', 'an attribute other than the partition key', JSON.stringify(o.sortKey));
  return {
    table: o.table,
    key: options.key,
    item: options.item,
    partitionKey,
    sortKey: o.sortKey,
    concurrency: o.concurrency ?? 16,
    maxAttempts: o.maxAttempts ?? 8,
    sleep: options.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms))),
  };
}

function parse<S extends z.ZodType>(what: string, schema: S, value: unknown): z.infer<S> {
  if (typeof value !== 'object' || value === null) throw new ConfigError(what, 'an options object', value === null ? 'null' : typeof value);
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  const path = issue.path.map(String).join('.');
  const got = path.split('.').reduce<unknown>((v, k) => (v as Record<string, unknown> | undefined)?.[k], value);
  throw new ConfigError(`${what}.${path}`, issue.message, describe(got));
}

function describe(v: unknown): string {
  if (v === undefined) return 'undefined';
  if (typeof v === 'function') return 'a function';
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}
