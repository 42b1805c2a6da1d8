/**
 * Logged input on AWS: SQS deletes what a source partition consumed, so the partition
 * keeps it. Each commit that consumed source records writes them (per source channel, in
 * order, with their record counts) as one immutable object
 *
 *   `${job}/input-log/${stage}-${partition}/${after:10}-${version:16}-${sha256}.json.gz`
 *
 * (gzip JSON, the layout's tagged encoding), PUT before the commit's transaction, which
 * names it in one item beside the version item:
 *
 *   segment  pk `${job}#p#${stage}#${partition}`  sk `i#${version:16}`  b (key) | z (inline), e (after), r (per channel: [channel, source, from, n])
 *
 * So a crash cannot lose or duplicate a segment: an object PUT by a commit that did not
 * land is named by nothing, never read, and overwritten with the same bytes or left to
 * the bucket (content-addressed: a retried commit of other records gets another key).
 * One PUT and one small item per commit, never per event or per request; a segment whose
 * gzip fits the item in 4 KB stays inline (`z`, base64) instead: a transactional item
 * costs 2 write units per started KB ($1.25 per million KB), so up to 4 KB inline
 * ($5/M) is cheaper than a PUT ($5/M) plus a 1 KB item ($1.25/M).
 *
 * A barrier commits on its own (the records before it), so segments never mix epochs:
 * `after` is the barrier the records follow. Restore from checkpoint e replays, per source
 * partition, the logged records at or above the checkpoint's positions (the records
 * counts), in their original order. Truncation (the checkpoint's `truncate` step) deletes
 * the segments whose records all lie below the retention point's positions: the item
 * first, then the object (an orphan object is harmless; an item naming nothing is not).
 */
import { createHash } from 'node:crypto';
import { gunzipSync, gzipSync } from 'node:zlib';
import type { StreamRecord } from '../../api/types.ts';
import type { TruncateDecision } from '../../checkpoint/driver.ts';
import type { BlobStore } from '../../checkpoint/storage.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import { InvariantError } from '../../errors.ts';
import type { InputLogAppend, PartitionScope } from '../../state/backend.ts';
import * as L from '../dynamodb/dynamodb-layout.ts';
import type { DynamoDbTable } from '../dynamodb/dynamodb-table.ts';

export const INPUT_LOG_PREFIX = 'i#';
/** Accounting service of the segments written (descriptive, never priced): 'segment object' | 'segment inline', items = records. */
export const INPUT_LOG_SERVICE = 'input-log';
/** Segments whose item stays within this many bytes are kept inline (see above). */
export const INPUT_LOG_INLINE_BYTES = 4096;

export function inputLogSk(version: number): string {
  return `${INPUT_LOG_PREFIX}${String(version).padStart(16, '0')}`;
}

export function inputLogPrefix(scope: PartitionScope): string {
  return `${scope.job}/input-log/${scope.stage}-${scope.partition}/`;
}

/** One channel's run of records in a segment: [channel, source partition, from, count]. */
type RunSummary = [string, string, number, number];

export interface InputLogSegment {
  /** The object to PUT before the transaction; absent when the segment is inline. */
  readonly object?: { readonly key: string; readonly body: Uint8Array };
  /** The item the commit's transaction puts (without pk). */
  readonly item: { sk: string; e: number; r: string; b?: string; z?: string };
}

/** The object and the item for one commit's consumed source records. */
export function inputLogSegment(scope: PartitionScope, version: number, appends: readonly InputLogAppend[], inlineBytes = INPUT_LOG_INLINE_BYTES): InputLogSegment {
  if (!appends.length) throw new InvariantError('an input log segment needs records');
  const after = appends[0].after;
  if (appends.some((a) => a.after !== after)) {
    throw new InvariantError(`one commit of ${scope.job}/${scope.stage}#${scope.partition} consumed source records on both sides of a barrier (after ${[...new Set(appends.map((a) => a.after))].join(', ')}): a barrier must commit on its own`);
  }
  const body = gzipSync(L.encodeValue(appends.map((a) => ({ c: a.channel, s: a.source, f: a.from, r: a.records }))), { level: 6 });
  const runs: RunSummary[] = appends.map((a) => [a.channel, a.source, a.from, a.records.length]);
  const base = { sk: inputLogSk(version), e: after, r: JSON.stringify(runs) };
  const inline = { ...base, z: Buffer.from(body).toString('base64') };
  // pk (about 60 bytes) is not in `inline` yet.
  if (L.itemBytes(inline) + 64 <= inlineBytes) return { item: inline };
  const sha = createHash('sha256').update(body).digest('hex');
  const key = `${inputLogPrefix(scope)}${String(after).padStart(10, '0')}-${String(version).padStart(16, '0')}-${sha}.json.gz`;
  return { object: { key, body }, item: { ...base, b: key } };
}

/** A run of logged records of one channel, as replayed. */
export interface LoggedRun {
  readonly channel: string;
  readonly source: string;
  /** Index (records count) of records[0] on the channel. */
  readonly from: number;
  readonly after: number;
  readonly records: readonly StreamRecord[];
}

interface SegmentRef {
  readonly version: number;
  /** The object; undefined when inline. */
  readonly key?: string;
  readonly inline?: string;
  readonly after: number;
  readonly runs: readonly RunSummary[];
}

/**
 * Reads and truncates the input log of source partitions. `table` is the state table the
 * commits wrote (the log's items), `blobs` the store the objects went to (keys as above).
 */
export class AwsInputLog {
  constructor(
    private readonly table: DynamoDbTable,
    private readonly blobs: BlobStore,
  ) {}

  /** The partition's committed segments, oldest first (one Query). */
  async segments(scope: PartitionScope): Promise<SegmentRef[]> {
    const items = await this.table.query('#pk = :pk AND begins_with(#sk, :p)', { ':pk': L.controlPk(scope), ':p': INPUT_LOG_PREFIX });
    return items.map((it) => ({ version: Number(String(it.sk).slice(INPUT_LOG_PREFIX.length)), key: typeof it.b === 'string' ? it.b : undefined, inline: typeof it.z === 'string' ? it.z : undefined, after: Number(it.e), runs: JSON.parse(String(it.r)) as RunSummary[] }));
  }

  /**
   * The logged records at or above `positions` (per source partition, `${source}#${p}`;
   * absent: 0), in the order they were consumed. A segment the log names but the store
   * lacks is an InvariantError: replaying around the hole would lose records silently.
   */
  async replay(scope: PartitionScope, positions: Readonly<Record<string, number>>): Promise<LoggedRun[]> {
    const out: LoggedRun[] = [];
    for (const seg of await this.segments(scope)) {
      if (seg.runs.every(([, source, from, n]) => from + n <= (positions[source] ?? 0))) continue;
      const body = seg.key === undefined ? Buffer.from(seg.inline ?? '', 'base64') : await this.blobs.get(seg.key);
      if (!body) throw new InvariantError(`input log segment ${seg.key} (version ${seg.version} of ${scope.job}/${scope.stage}#${scope.partition}) is named by the state table but missing from the store: its records cannot be replayed`);
      const runs = L.decodeValue(gunzipSync(body).toString('utf8')) as { c: string; s: string; f: number; r: StreamRecord[] }[];
      for (const run of runs) {
        const skip = Math.max(0, (positions[run.s] ?? 0) - run.f);
        if (skip >= run.r.length) continue;
        out.push({ channel: run.c, source: run.s, from: run.f + skip, after: seg.after, records: run.r.slice(skip) });
      }
    }
    return out;
  }

  /**
   * Delete the segments whose records all lie below `belowPositions` (the retention
   * point's positions): items first, then objects. Returns the keys of the objects deleted
   * (inline segments have none).
   */
  async truncate(scope: PartitionScope, belowPositions: Readonly<Record<string, number>>): Promise<string[]> {
    const dead = (await this.segments(scope)).filter((seg) => seg.runs.every(([, source, from, n]) => from + n <= (belowPositions[source] ?? 0)));
    if (!dead.length) return [];
    const pk = L.controlPk(scope);
    await this.table.batchWrite(dead.map((seg) => ({ DeleteRequest: { Key: { pk, sk: inputLogSk(seg.version) } } })));
    const keys = dead.flatMap((seg) => (seg.key === undefined ? [] : [seg.key]));
    if (keys.length) await this.blobs.delete(keys);
    return keys;
  }
}

/** The source stages' partitions of a plan: the ones that log input. */
export function loggingPartitions(plan: PhysicalPlan): PartitionScope[] {
  const out: PartitionScope[] = [];
  plan.stages.forEach((stage, i) => {
    if (!stage.inputs.some((e) => plan.edges[e].from.kind === 'source')) return;
    for (let p = 0; p < stage.parallelism; p++) out.push({ job: plan.job.name, stage: i, partition: p });
  });
  return out;
}

/**
 * The checkpoint steps' `truncateLogs`: release, in every source partition, the segments
 * the retention point's positions cover (decision.logs null: the point did not move).
 */
export function inputLogTruncation(plan: PhysicalPlan, log: AwsInputLog): (d: TruncateDecision) => Promise<void> {
  const partitions = loggingPartitions(plan);
  return async (d) => {
    if (!d.logs) return;
    const below = d.logs.belowPositions;
    await Promise.all(partitions.map((scope) => log.truncate(scope, below)));
  };
}
