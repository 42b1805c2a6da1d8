/**
 * A transactional file sink on S3: the records of epoch `e` become visible only when
 * checkpoint `e` commits (two-phase commit driven by the checkpoint steps, as
 * lib/local/committed-sink.ts is by the local driver). Objects are immutable; what is
 * visible is decided by a chain of committed manifests and a pointer readers follow:
 *
 *   <base>data/<tag>/<producer>/<seq>-<n>.jsonl   one delivery (n records) of a producer after
 *                                                barrier <tag>; written by the operator function
 *   <base>prepared/<e>-<p>.json                   prepare(e) with epoch p committed: the data
 *                                                objects epoch e commits (tags p .. e-1);
 *                                                deleted once the manifest holds them
 *   <base>manifests/<e>.json                      commit(e): {epoch, previous, files, records}
 *                                                (none for an epoch without output: the pointer stays)
 *   pointer `sink:s3://<bucket>/<base>`           in the job's state table (DynamoDbPointerStore,
 *                                                `${job}#c`): {epoch, manifestKey, records}
 *
 * Names are deterministic (tag, producer, seq: 12-digit padded), so a redelivered batch
 * writes the same key with the same bytes, which the blob store accepts without a second
 * object; a delivery already seen by this container is skipped by its per-producer
 * high-water mark. The pointer moves by compare-and-set in DynamoDB, because no local
 * emulator honours S3's conditional puts.
 *
 * Why listing tags p..e-1 is exact: a partition acknowledges barrier e only after its
 * sink deliveries before it have landed (the operator function writes sinks, then sends
 * acks), so when the coordinator commits e every object tagged below e exists, and those
 * tagged below p were committed by p. An aborted epoch's objects stay pending and are
 * committed by the next checkpoint that commits (the records' state effects are kept on
 * AWS, so dropping them would lose them); recover(e), for a restore that rolls state
 * back to checkpoint e, deletes everything staged after e, so none of it ever becomes
 * visible.
 */
import { type _Object, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { Sink, SinkBatch, TransactionalSink } from '../../api/sinks.ts';
import { PointerConflictError } from '../../checkpoint/driver-errors.ts';
import { SluiceError } from '../../errors.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import { DynamoDbPointerStore } from '../dynamodb/dynamodb-pointers.ts';
import { stateTableName } from '../naming.ts';
import { S3BlobStore } from '../s3/s3-blob-store.ts';
import { type AwsBindableSink, type AwsSinkBinding, type AwsSinkResources, type ResolvedS3FileSinkOptions, SinkRecordsRejectedError } from './sink-options.ts';
import { mapS3Error } from '../transport-errors.ts';

export interface S3FileEntry {
  /** Relative to the sink's base. */
  readonly key: string;
  readonly records: number;
  readonly bytes: number;
}

export interface S3FileManifest {
  readonly epoch: number;
  /** The epoch committed before this one (0: none): readers walk the chain back through it. */
  readonly previous: number;
  /** In (tag, producer, seq) order. */
  readonly files: readonly S3FileEntry[];
  /** Records committed up to and including this epoch. */
  readonly records: number;
}

interface Prepared {
  readonly epoch: number;
  readonly previous: number;
  readonly files: readonly S3FileEntry[];
}

export interface S3FilePointer {
  readonly epoch: number;
  readonly manifestKey: string;
  readonly records: number;
}

/** Where one S3 file sink lives, fully resolved. */
export interface S3FileLocation {
  readonly s3: S3Client;
  readonly dynamodb: DynamoDBClient;
  readonly bucket: string;
  /** Key prefix of the sink's objects, ending in "/". */
  readonly base: string;
  /** The state table and job of the commit pointer. */
  readonly tableName: string;
  readonly job: string;
  readonly accounting?: AwsAccounting;
}

/** The sink was used before a handler bound it to AWS (or without the clients it needs). */
export class SinkNotBoundError extends SluiceError {
  readonly code = 'SINK_NOT_BOUND';
  readonly retryable = false;
  constructor(
    readonly sink: string,
    readonly missing: string,
  ) {
    super(`sink ${sink}: ${missing}; it runs in the AWS handlers (or sluice run --target local-aws), which bind it to the job's clients and bucket`);
  }
}

const PAD = 12;
const pad = (n: number) => String(n).padStart(PAD, '0');
const DATA_KEY = /^data\/(\d{12})\/([^/]+)\/(\d{12})-(\d+)\.jsonl$/;
const utf8 = new TextEncoder();
const json = (v: unknown) => utf8.encode(JSON.stringify(v));
const parseJson = <T>(b: Uint8Array) => JSON.parse(new TextDecoder().decode(b)) as T;

export const manifestKeyOf = (epoch: number) => `manifests/${pad(epoch)}.json`;
const preparedKeyOf = (epoch: number, previous: number) => `prepared/${pad(epoch)}-${pad(previous)}.json`;

export function pointerNameOf(bucket: string, base: string): string {
  return `sink:s3://${bucket}/${base}`;
}

/** Storage of one sink: blobs under its base, its pointer, and listing by key range. */
class SinkStorage {
  readonly blobs: S3BlobStore;
  readonly pointers: DynamoDbPointerStore;
  readonly pointerName: string;
  readonly accounting: AwsAccounting;

  constructor(readonly loc: S3FileLocation) {
    this.accounting = loc.accounting ?? new AwsAccounting();
    this.blobs = new S3BlobStore({ s3: loc.s3, bucket: loc.bucket, prefix: loc.base, accounting: this.accounting });
    this.pointers = new DynamoDbPointerStore({ client: loc.dynamodb, tableName: loc.tableName, job: loc.job, accounting: this.accounting });
    this.pointerName = pointerNameOf(loc.bucket, loc.base);
  }

  async pointer(): Promise<{ value: S3FilePointer; version: number }> {
    const p = await this.pointers.read<S3FilePointer>(this.pointerName);
    return p ?? { value: { epoch: 0, manifestKey: '', records: 0 }, version: 0 };
  }

  async json<T>(key: string): Promise<T | undefined> {
    const b = await this.blobs.get(key);
    return b ? parseJson<T>(b) : undefined;
  }

  /** Objects under `dir` after `startAfter` (relative keys, lexical order), stopping once `stop(key)` says so. */
  async list(dir: string, startAfter: string, stop: (key: string) => boolean = () => false): Promise<_Object[]> {
    const { s3, bucket, base } = this.loc;
    const out: _Object[] = [];
    let token: string | undefined;
    do {
      let page;
      try {
        page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: base + dir, StartAfter: token ? undefined : base + startAfter, ContinuationToken: token }));
        this.accounting.record('s3', 'ListObjectsV2', { requests: 1, items: page.KeyCount ?? page.Contents?.length ?? 0 });
      } catch (e) {
        this.accounting.record('s3', 'ListObjectsV2', { requests: 1, errors: 1 });
        throw mapS3Error(e, 'ListObjectsV2', bucket, base + dir);
      }
      for (const o of page.Contents ?? []) {
        const key = o.Key!.slice(base.length);
        if (stop(key)) return out;
        out.push({ ...o, Key: key });
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return out;
  }

  /** Data objects tagged from `fromTag` (inclusive) to `toTag` (exclusive), in key order. */
  async data(fromTag: number, toTag: number): Promise<S3FileEntry[]> {
    // Keys `data/<pad(t)>/...` sort after `data/<pad(fromTag)>` exactly when t >= fromTag.
    const objects = await this.list('data/', `data/${pad(fromTag)}`, (k) => Number(/^data\/(\d{12})\//.exec(k)?.[1] ?? 0) >= toTag);
    // Keys this sink did not write (a stray upload) are never part of a commit.
    return objects.flatMap((o) => {
      const m = DATA_KEY.exec(o.Key!);
      return m ? [{ key: o.Key!, records: Number(m[4]), bytes: o.Size ?? 0 }] : [];
    });
  }
}

export class S3FileSink<T> implements Sink<T>, TransactionalSink, AwsBindableSink {
  readonly kind = 's3-files';
  readonly transactional = true;
  readonly awsResources: AwsSinkResources;
  /** Deliveries skipped as redeliveries (this container had written them). */
  duplicatesDropped = 0;
  /** Records committed by commit() calls of this process. */
  committedRecords = 0;
  private readonly highWater = new Map<string, number>();
  private binding?: AwsSinkBinding;
  private storage?: SinkStorage;

  constructor(
    readonly options: ResolvedS3FileSinkOptions,
    /** A fully resolved location (tests, readers); otherwise bindAws() supplies it. */
    location?: S3FileLocation,
  ) {
    this.awsResources = { kind: 's3-files', bucket: options.bucket, prefix: options.prefix };
    if (location) this.storage = new SinkStorage(location);
  }

  bindAws(binding: AwsSinkBinding): void {
    this.binding = binding;
    this.storage = undefined;
  }

  /** Where the objects go (bucket and base), once bound. */
  location(): S3FileLocation {
    return this.store().loc;
  }

  private store(): SinkStorage {
    if (this.storage) return this.storage;
    const b = this.binding;
    const name = `s3Files(${this.options.prefix})`;
    if (!b) throw new SinkNotBoundError(name, 'not bound to a job');
    const bucket = this.options.bucket ?? b.bucket;
    if (!bucket) throw new SinkNotBoundError(name, 'no bucket option and no job bucket (SLUICE_BUCKET) in the binding');
    const base = this.options.bucket ? this.options.prefix : `${b.job}/sinks/${this.options.prefix}`;
    this.storage = new SinkStorage({
      s3: b.s3 ?? new S3Client({}),
      dynamodb: b.dynamodb ?? new DynamoDBClient({}),
      bucket,
      base,
      tableName: b.tableName ?? stateTableName(b.job),
      job: b.job,
      accounting: b.accounting,
    });
    return this.storage;
  }

  /** One immutable object per delivery, named by (barrier tag, producer, seq). */
  async write(batch: SinkBatch<T> & { readonly afterBarrier?: number }): Promise<void> {
    const hw = this.highWater.get(batch.producer) ?? 0;
    if (batch.seq <= hw) {
      this.duplicatesDropped++;
      return;
    }
    let text = '';
    let n = 0;
    const rejected: { index: number; record: unknown; error: string }[] = [];
    batch.records.forEach((r, index) => {
      try {
        const line = JSON.stringify(r);
        if (line === undefined) throw new Error('JSON.stringify gives nothing for it (undefined, a function or a symbol)');
        text += line + '\n';
        n++;
      } catch (e) {
        rejected.push({ index, record: r, error: `not JSON: ${(e as Error).message}` });
      }
    });
    if (n) {
      const producer = batch.producer.replace(/[^A-Za-z0-9_.-]/g, '_');
      const key = `data/${pad(batch.afterBarrier ?? 0)}/${producer}/${pad(batch.seq)}-${n}.jsonl`;
      // Same key, same bytes on a redelivery: accepted without a second object.
      await this.store().blobs.put(key, utf8.encode(text));
    }
    this.highWater.set(batch.producer, batch.seq);
    if (rejected.length) throw new SinkRecordsRejectedError(`s3Files(${this.options.prefix})`, batch.producer, batch.seq, rejected);
  }

  /**
   * Durable list of what epoch `epoch` commits. S3 PUTs are durable when they return, so
   * preparing is fixing the list: an immutable object per (epoch, committed base), which a
   * retry or a commit after a crash reads back instead of listing again.
   */
  async prepare(epoch: number): Promise<void> {
    await this.prepared(epoch);
  }

  private async prepared(epoch: number, at?: number): Promise<Prepared | undefined> {
    const s = this.store();
    const previous = at ?? (await s.pointer()).value.epoch;
    if (previous >= epoch) return undefined;
    const key = preparedKeyOf(epoch, previous);
    const stored = await s.json<Prepared>(key);
    if (stored) return stored;
    const prepared: Prepared = { epoch, previous, files: await s.data(previous, epoch) };
    // Nothing to publish: no object, and commit() leaves the pointer where it is.
    if (prepared.files.length) await s.blobs.put(key, json(prepared));
    return prepared;
  }

  /** Publish epoch `epoch`: its manifest (immutable), then the pointer by compare-and-set. Idempotent. */
  async commit(epoch: number): Promise<void> {
    const s = this.store();
    const ptr = await s.pointer();
    if (ptr.value.epoch >= epoch) return;
    const prepared = (await this.prepared(epoch, ptr.value.epoch))!;
    if (!prepared.files.length) return; // an epoch without output of this sink: no manifest, the pointer stays
    const records = prepared.files.reduce((n, f) => n + f.records, 0);
    const manifest: S3FileManifest = { epoch, previous: ptr.value.epoch, files: prepared.files, records: ptr.value.records + records };
    const manifestKey = manifestKeyOf(epoch);
    await s.blobs.put(manifestKey, json(manifest));
    if (!(await s.pointers.compareAndSet<S3FilePointer>(s.pointerName, ptr.version, { epoch, manifestKey, records: manifest.records }))) {
      const again = await s.pointer();
      if (again.value.epoch < epoch) throw new PointerConflictError(epoch, again.value.epoch);
      return;
    }
    this.committedRecords += records;
    // The manifest now holds the list; a retry or a resume returns at the pointer check above.
    await s.blobs.delete([preparedKeyOf(epoch, ptr.value.epoch)]);
  }

  /**
   * After a restore of checkpoint `epoch` (state rolled back to it): the pointer goes back
   * to the newest manifest at or below it, epoch `epoch` is committed when it was not, and
   * everything staged or committed after it is deleted, so the restored run may write the
   * same names again and nothing of the abandoned run ever becomes visible.
   */
  async recover(epoch: number): Promise<void> {
    const s = this.store();
    let ptr = await s.pointer();
    if (ptr.value.epoch > epoch) {
      let m = await s.json<S3FileManifest>(ptr.value.manifestKey);
      while (m && m.epoch > epoch) m = m.previous ? await s.json<S3FileManifest>(manifestKeyOf(m.previous)) : undefined;
      const back: S3FilePointer = m ? { epoch: m.epoch, manifestKey: manifestKeyOf(m.epoch), records: m.records } : { epoch: 0, manifestKey: '', records: 0 };
      if (!(await s.pointers.compareAndSet(s.pointerName, ptr.version, back))) throw new PointerConflictError(ptr.value.epoch, (await s.pointer()).value.epoch);
      ptr = await s.pointer();
    }
    if (epoch > 0) await this.commit(epoch);
    const after = (k: string) => Number(/(\d{12})[^/]*$/.exec(k)?.[1] ?? -1) > epoch;
    const stale = [
      ...(await s.data(epoch, Number.MAX_SAFE_INTEGER)).map((f) => f.key),
      ...(await s.list('manifests/', '')).map((o) => o.Key!).filter(after),
      ...(await s.list('prepared/', '')).map((o) => o.Key!).filter((k) => Number(/prepared\/(\d{12})-/.exec(k)?.[1] ?? -1) > epoch),
    ];
    if (stale.length) await s.blobs.delete(stale);
    this.highWater.clear();
  }

  /** The committed records, in order (epoch, then tag, producer, seq). */
  async readCommitted(options: { afterEpoch?: number } = {}): Promise<{ epoch: number; records: T[] }> {
    return readCommittedFiles<T>(this.store().loc, options);
  }
}

/**
 * Read what an S3 file sink committed: follow its pointer, walk the manifest chain back
 * (to `afterEpoch`, exclusive, or the start), read the files in order. Anything not in a
 * committed manifest is invisible, whatever the bucket holds.
 */
export async function readCommittedFiles<T>(loc: S3FileLocation, options: { afterEpoch?: number } = {}): Promise<{ epoch: number; records: T[] }> {
  const s = new SinkStorage(loc);
  const ptr = (await s.pointer()).value;
  const chain: S3FileManifest[] = [];
  let key = ptr.epoch > 0 ? ptr.manifestKey : undefined;
  while (key) {
    const m = await s.json<S3FileManifest>(key);
    if (!m) throw new SinkManifestMissingError(`s3://${loc.bucket}/${loc.base}${key}`);
    if (m.epoch <= (options.afterEpoch ?? 0)) break;
    chain.push(m);
    key = m.previous > (options.afterEpoch ?? 0) ? manifestKeyOf(m.previous) : undefined;
  }
  const records: T[] = [];
  for (const m of chain.reverse()) {
    for (const f of m.files) {
      const b = await s.blobs.get(f.key);
      if (!b) throw new SinkManifestMissingError(`s3://${loc.bucket}/${loc.base}${f.key}`);
      for (const line of new TextDecoder().decode(b).split('\n')) if (line) records.push(JSON.parse(line) as T);
    }
  }
  return { epoch: ptr.epoch, records };
}

/** A committed manifest names an object that is gone (deleted by hand, or a lifecycle rule). */
export class SinkManifestMissingError extends SluiceError {
  readonly code = 'SINK_MANIFEST_MISSING';
  readonly retryable = false;
  constructor(readonly key: string) {
    super(`committed sink object ${key}: expected it to exist (a committed manifest names it), received no such object`);
  }
}
