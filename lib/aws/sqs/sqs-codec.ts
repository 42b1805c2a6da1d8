/**
 * Message bodies on the stage queues (pure functions; sqs-transport.ts sends them).
 *
 * A body is JSON (format version 1), or `gz1:` + base64(gzip(JSON)) when that is
 * smaller: SQS bills per 64 KB chunk, so compression decides cost for repetitive
 * records. Values use the tagged JSON of the state table (dynamodb-layout.ts), so
 * -Infinity watermarks, -0 and undefined survive. Characters SQS refuses (controls,
 * U+FFFE/U+FFFF, lone surrogates; fauxqs also refuses astral ones) only ever occur
 * inside JSON strings, where they are written as \uXXXX escapes.
 *
 *   {"v":1,"k":"e","e":[envelope, ...]}           envelopes for one partition, in order
 *   {"v":1,"k":"s","key":"spill/...","n":1}        one envelope too large for a message,
 *                                                   stored in the blob store (claim check)
 *   {"v":1,"k":"i","s":source,"at":ms,"r":[[ts, event], ...]}   events from the ingest function,
 *                                                   received at `at` (its clock)
 *   {"v":1,"k":"i","s":source,"at":ms,"r":[],"probe":true}   an idle probe (runtime/idleness.ts)
 *   {"v":1,"k":"i","s":source,"r":[],"end":true}   end of a bounded input (watermark +inf)
 *   {"v":1,"k":"i","s":source,"r":[],"b":{...}}     checkpoint barrier (checkpoint-barriers.ts)
 *   {"v":1,"k":"d", ...DeadLetterMessage}          a parked record, on the stage's DLQ
 */
import { createHash } from 'node:crypto';
import { gunzipSync, gzipSync } from 'node:zlib';
import { MAX_WATERMARK, MIN_WATERMARK } from '../../api/types.ts';
import { channelId, type PhysicalPlan } from '../../graph/compile.ts';
import type { DeadLetter, Envelope } from '../../transport/envelope.ts';
import { decodeValue, encodeValue } from '../dynamodb/dynamodb-layout.ts';
import { MessageDecodeError } from '../transport-errors.ts';

/** 256 KiB: what LocalStack and queues created before 2025 accept. */
export const DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024;
/** SQS's limit since 2025 (also for the whole SendMessageBatch payload). */
export const MAX_MESSAGE_BYTES = 1024 * 1024;
/** SQS bills one request per started 64 KB chunk of payload. */
export const SQS_CHUNK_BYTES = 64 * 1024;
const GZIP_PREFIX = 'gz1:';
/** Below this, gzip's header and base64 cannot win. */
const MIN_COMPRESS_BYTES = 512;

/** A barrier as checkpoint-barriers.ts writes it into a source queue. */
export interface BarrierBody {
  readonly epoch: number;
  readonly baseEpoch: number;
  readonly full: readonly string[];
  readonly savepoint: boolean;
}

function checkBarrierBody(b: unknown, messageId: string): BarrierBody {
  const x = b as Partial<BarrierBody> | null;
  const int = (v: unknown, min: number) => typeof v === 'number' && Number.isSafeInteger(v) && v >= min;
  if (!x || typeof x !== 'object' || !int(x.epoch, 1) || !int(x.baseEpoch, 0) || !Array.isArray(x.full) || !x.full.every((f) => typeof f === 'string') || typeof x.savepoint !== 'boolean') {
    throw new MessageDecodeError(messageId, `barrier "b": expected {epoch >= 1, baseEpoch >= 0, full: string[], savepoint: boolean}, received ${JSON.stringify(b)?.slice(0, 120)}`);
  }
  return { epoch: x.epoch as number, baseEpoch: x.baseEpoch as number, full: x.full, savepoint: x.savepoint };
}

export interface DeadLetterMessage extends DeadLetter {
  readonly job: string;
  readonly stage: number;
  readonly partition: number;
  /** The checkpoint epoch that covers it (its record came before that epoch's barrier): a resume from E keeps letters of epochs up to E. */
  readonly epoch?: number;
}

export type MessageBody =
  | { readonly v: 1; readonly k: 'e'; readonly e: Envelope[] }
  | { readonly v: 1; readonly k: 's'; readonly key: string; readonly n: number }
  | { readonly v: 1; readonly k: 'i'; readonly s: string; readonly r: [number, unknown][]; readonly at?: number; readonly probe?: true; readonly end?: true; readonly b?: BarrierBody }
  | ({ readonly v: 1; readonly k: 'd' } & DeadLetterMessage);

// Allowed by SQS: #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF. Astral characters are
// escaped too (as their two surrogates): valid for SQS, and fauxqs refuses them.
// eslint-disable-next-line no-control-regex
const SQS_UNSAFE = /[^\x09\x0A\x0D\x20-\uD7FF\uE000-\uFFFD]/g;

/** JSON text with every character SQS might refuse written as a \uXXXX escape (valid only for JSON text). */
export function sqsSafeJson(json: string): string {
  return json.replace(SQS_UNSAFE, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
}

/** Tagged, SQS-safe JSON of a value (one part of a packed body). */
export function encodePart(value: unknown): string {
  return sqsSafeJson(encodeValue(value));
}

/** The body as sent: plain JSON, or gzip+base64 when `compress` and that is smaller. */
export function finishBody(json: string, compress: boolean): { body: string; bytes: number; compressed: boolean } {
  const plain = Buffer.byteLength(json);
  if (compress && plain >= MIN_COMPRESS_BYTES) {
    const gz = GZIP_PREFIX + gzipSync(json, { level: 6 }).toString('base64');
    // Pays when it saves at least a tenth: gzip costs CPU on both ends.
    if (gz.length < plain * 0.9) return { body: gz, bytes: gz.length, compressed: true };
  }
  return { body: json, bytes: plain, compressed: false };
}

export function decodeBody(body: string, messageId = '?'): MessageBody {
  let json = body;
  try {
    if (body.startsWith(GZIP_PREFIX)) json = gunzipSync(Buffer.from(body.slice(GZIP_PREFIX.length), 'base64')).toString('utf8');
  } catch (e) {
    throw new MessageDecodeError(messageId, `gzip: ${(e as Error).message}`, { cause: e });
  }
  let value: unknown;
  try {
    value = decodeValue(json);
  } catch (e) {
    throw new MessageDecodeError(messageId, `JSON: ${(e as Error).message}`, { cause: e });
  }
  const b = value as { v?: unknown; k?: unknown } | null;
  if (!b || typeof b !== 'object' || b.v !== 1 || !['e', 's', 'i', 'd'].includes(b.k as string)) {
    throw new MessageDecodeError(messageId, `expected a Sluice message of format 1 (kind e, s, i or d), received ${json.slice(0, 80)}`);
  }
  if (b.k === 'e' && !Array.isArray((b as { e?: unknown }).e)) throw new MessageDecodeError(messageId, 'envelope message without envelopes');
  if (b.k === 'i' && (!Array.isArray((b as { r?: unknown }).r) || typeof (b as { s?: unknown }).s !== 'string')) throw new MessageDecodeError(messageId, 'ingest message without source or records');
  if (b.k === 'i' && 'at' in b && !Number.isFinite((b as { at?: unknown }).at)) throw new MessageDecodeError(messageId, `ingest message: "at" must be epoch milliseconds, received ${JSON.stringify((b as { at?: unknown }).at)}`);
  if (b.k === 'i' && 'probe' in b && ((b as { probe?: unknown }).probe !== true || (b as unknown as { r: unknown[] }).r.length > 0 || !('at' in b))) throw new MessageDecodeError(messageId, 'idle probe: expected "probe": true with "at" and no records');
  return value as MessageBody;
}

export const FRAMES = {
  envelopes: (parts: string) => `{"v":1,"k":"e","e":[${parts}]}`,
  /** `at`: when the ingest function received the events (its clock), for idle probes. */
  ingest: (source: string, at?: number) => (parts: string) => `{"v":1,"k":"i","s":${sqsSafeJson(JSON.stringify(source))}${at === undefined ? '' : `,"at":${at}`},"r":[${parts}]}`,
};

/** An idle probe for one source partition, sent at `at` (runtime/idleness.ts). */
export function probeBody(source: string, at: number): string {
  return sqsSafeJson(JSON.stringify({ v: 1, k: 'i', s: source, at, r: [], probe: true }));
}

/**
 * A message without envelopes: it only invokes the partition of its group (an in-place
 * restore wakes source partitions that replay the input log, restore.ts), or, in a group
 * that is no partition, releases abandoned local polls (local/queues.ts). Always accepted.
 */
export const WAKE_BODY = '{"v":1,"k":"e","e":[]}';

export function spillBody(key: string): string {
  return JSON.stringify({ v: 1, k: 's', key, n: 1 });
}

export function endOfInputBody(source: string): string {
  return sqsSafeJson(JSON.stringify({ v: 1, k: 'i', s: source, r: [], end: true }));
}

export interface Packed {
  /** Parts [start, end) of the input. */
  readonly start: number;
  readonly end: number;
  /** undefined: the single part at `start` does not fit in a message even compressed. */
  readonly body?: string;
  readonly bytes: number;
  readonly compressed: boolean;
}

/**
 * Pack encoded parts, in order, into bodies of at most maxBytes. Greedy on the plain
 * size with an allowance for compression that adapts to the ratio just seen, shrinking
 * a candidate in proportion when the finished body is still too large. Deterministic:
 * the same parts give the same messages (so deduplication ids repeat on redelivery).
 */
export function pack(parts: readonly string[], frame: (joined: string) => string, maxBytes: number, compress: boolean): Packed[] {
  const sizes = parts.map((p) => Buffer.byteLength(p));
  const overhead = Buffer.byteLength(frame(''));
  const out: Packed[] = [];
  let ratio = compress ? 4 : 1;
  for (let i = 0; i < parts.length; ) {
    let j = i + 1;
    let plain = overhead + sizes[i];
    while (j < parts.length && plain + 1 + sizes[j] <= maxBytes * ratio) plain += 1 + sizes[j++];
    for (;;) {
      const joined = parts.slice(i, j).join(',');
      const fin = finishBody(frame(joined), compress);
      if (fin.bytes <= maxBytes) {
        out.push({ start: i, end: j, body: fin.body, bytes: fin.bytes, compressed: fin.compressed });
        if (compress) ratio = Math.min(16, Math.max(1, (Buffer.byteLength(joined) / fin.bytes) * 0.9));
        break;
      }
      if (j === i + 1) {
        out.push({ start: i, end: j, bytes: fin.bytes, compressed: fin.compressed });
        break;
      }
      j = i + Math.max(1, Math.min(j - i - 1, Math.floor((j - i) * (maxBytes / fin.bytes) * 0.95)));
      if (compress) ratio = Math.max(1, ratio * (maxBytes / fin.bytes) * 0.95);
    }
    i = out[out.length - 1].end;
  }
  return out;
}

/** Deterministic deduplication id (64 hex characters; SQS allows 128). */
export function dedupId(scope: string, ids: readonly string[]): string {
  const h = createHash('sha256').update(scope);
  for (const id of ids) h.update('\n').update(id);
  return h.digest('hex');
}

export function envelopeId(e: Envelope): string {
  return `${e.channel}>${e.toPartition}#${e.offset ?? e.seq}`;
}

/**
 * Sequence number of a source envelope fed from an SQS message: SQS sequence numbers
 * exceed the safe integers, and the runtime orders source channels by `offset`, so seq
 * only names the envelope in record locations; a hash keeps it stable across redeliveries.
 */
export function seqOfOffset(offset: string): number {
  return parseInt(createHash('sha256').update(offset).digest('hex').slice(0, 12), 16) + 1;
}

/** SQS sequence numbers as the runtime compares them: decimal without leading zeros (fauxqs pads to 20 digits). */
export function normaliseOffset(sequenceNumber: string): string {
  return sequenceNumber.replace(/^0+(?=\d)/, '');
}

/** The envelope an ingest message becomes in partition `partition` of the source's stage. */
export function sourceEnvelope(plan: PhysicalPlan, stage: number, partition: number, body: Extract<MessageBody, { k: 'i' }>, sequenceNumber: string, messageId = '?'): Envelope {
  const edge = plan.edges.find((e) => e.toStage === stage && e.from.kind === 'source' && e.from.source === body.s);
  if (!edge) throw new MessageDecodeError(messageId, `stage ${stage} of job ${plan.job.name} has no source "${body.s}"`);
  const offset = normaliseOffset(sequenceNumber);
  return {
    channel: channelId(edge.id, partition),
    edge: edge.id,
    toPartition: partition,
    seq: seqOfOffset(offset),
    offset,
    records: body.r.map(([timestamp, value]) => ({ value, timestamp })),
    // The runtime derives source watermarks from the records; the end marker closes event time.
    watermark: body.end ? MAX_WATERMARK : MIN_WATERMARK,
    ...(body.at !== undefined ? { arrivedAt: body.at } : {}),
    ...(body.probe ? { probe: true as const } : {}),
    // The partition fills in the barrier's source position (records it consumed on this channel before it).
    ...(body.b !== undefined ? { barrier: checkBarrierBody(body.b, messageId) } : {}),
  };
}

/** SQS billing: one request per started 64 KB chunk of a request's payload (at least one). */
export function billedChunks(payloadBytes: number): number {
  return Math.max(1, Math.ceil(payloadBytes / SQS_CHUNK_BYTES));
}
