/**
 * Feeding a source's events into its stage queue in local-AWS mode, chunked as the
 * embedded runtime chunks them (chunk i of `chunkSize` events goes to partition
 * i mod P), so both runtimes see the same per-partition record order and watermarks:
 *
 * - an ingestion source goes through the real ingest handler, one request per chunk
 *   (without an Idempotency-Key its partitions are round-robin per request, starting at
 *   0); 429 waits Retry-After and resends, a lost answer resends with the key it names;
 * - any other source (items, generator, file in the job itself) has no ingest function
 *   on AWS, so the feeder writes ingest messages to the queue directly, validating and
 *   stamping events as the ingest handler does;
 * - at the end of a bounded input, the end marker on every partition closes event time.
 */
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import type { SourceDef } from '../../api/sources.ts';
import type { Clock } from '../../api/types.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import { InvariantError } from '../../errors.ts';
import { type RejectedInput, type SourceReader, toRecord } from '../../transport/sources.ts';
import type { AwsAccounting } from '../../aws/cost/accounting.ts';
import type { IngestHandler } from '../../aws/ingest/ingest-handler.ts';
import { queueBacklog } from '../../aws/sqs/sqs-queues.ts';
import * as C from '../../aws/sqs/sqs-codec.ts';
import type { OutgoingMessage, SqsTransport } from '../../aws/sqs/sqs-transport.ts';

export interface FeedTarget {
  readonly def: SourceDef<any>;
  readonly stage: number;
  readonly partitions: number;
  /** Through the ingest handler (an ingestion source) or straight to the queue. */
  readonly ingest?: IngestHandler;
  /**
   * Straight feeding only: per partition, the first records to leave out (a restore: the
   * partition consumed them before; the checkpoint or the input log holds them). Chunks
   * still take their turns, so every record goes to the partition it went to before.
   */
  readonly skip?: readonly number[];
}

export interface FeederContext {
  readonly plan: PhysicalPlan;
  readonly sqs: SQSClient;
  readonly transport: SqsTransport;
  readonly accounting: AwsAccounting;
  readonly clock: Clock;
  readonly chunkSize: number;
  /** A resume's restore epoch (0: none): part of every deduplication id, so what is fed again is not dropped as a duplicate. */
  readonly restoreEpoch?: number;
  /** Direct feeding waits while the queue holds more messages than this (as the ingest handler answers 429). */
  readonly maxBacklogMessages: number;
  /** Queues whose backlog counts (default: the source's own); all stage queues keep the feeder close behind every stage. */
  readonly backlogQueues?: readonly string[];
  /** Lambda usage of the ingest function (invocations, billed ms). */
  readonly onIngestInvocation: (billedMs: number) => void;
  readonly rejected: RejectedInput[];
  readonly shouldStop: () => boolean;
  /** After each chunk went out (checkpoints: touch the activity item; --crash-after). */
  readonly afterChunk?: (records: number) => Promise<void>;
}

/** Feed a reader to the end (bounded) or until shouldStop(); returns the events accepted. */
export async function feedSource(ctx: FeederContext, target: FeedTarget, reader: SourceReader): Promise<number> {
  let chunk = 0;
  /** Chunks with at least one valid event: the embedded partitioner advances only for those. */
  const turn = { n: 0 };
  let accepted = 0;
  const name = target.def.name;
  const skip = [...(target.skip ?? [])];
  if (target.ingest && skip.some((n) => n > 0)) throw new InvariantError(`source "${name}": skipping restored records needs straight feeding, not the ingest handler`);
  while (!ctx.shouldStop()) {
    const { events, done, rejected, positions } = await reader.pull(ctx.chunkSize * target.partitions);
    if (rejected?.length) ctx.rejected.push(...rejected);
    for (let i = 0; i < events.length; i += ctx.chunkSize) {
      const slice = events.slice(i, i + ctx.chunkSize);
      const first = chunk++ * ctx.chunkSize;
      const where = (j: number) => positions?.[i + j] ?? `event ${first + j}`;
      const n = target.ingest ? await postChunk(ctx, target.ingest, name, slice, where) : await sendChunk(ctx, target, slice, where, turn, skip);
      accepted += n;
      await ctx.afterChunk?.(n);
    }
    if (done) {
      await ctx.transport.sendEndOfInput(target.stage, name, target.partitions, ctx.restoreEpoch ? `end-r${ctx.restoreEpoch}` : 'end');
      break;
    }
    // An unbounded, paced source with nothing yet: do not spin.
    if (events.length === 0) await sleep(20);
  }
  return accepted;
}

async function postChunk(ctx: FeederContext, ingest: IngestHandler, stream: string, events: unknown[], where: (j: number) => string): Promise<number> {
  let key: string | undefined;
  for (let attempt = 0; ; attempt++) {
    const t0 = performance.now();
    const body = JSON.stringify(events);
    const res = await ingest(apiEvent(stream, body, key));
    ctx.onIngestInvocation(Math.ceil(performance.now() - t0));
    // HTTP APIs meter the request payload (per 512 KB).
    ctx.accounting.record('httpapi', 'Request', { requests: 1, bytes: Buffer.byteLength(body) });
    const answer = JSON.parse(String(res.body ?? '{}')) as { accepted?: number; rejected?: { index: number; error: string }[]; idempotencyKey?: string; message?: string };
    const status = res.statusCode ?? 500;
    if (status === 202 || (status === 400 && answer.rejected)) {
      for (const r of answer.rejected ?? []) ctx.rejected.push({ source: stream, position: where(r.index), error: r.error });
      return answer.accepted ?? 0;
    }
    if (attempt >= 100) throw new InvariantError(`the ingest handler kept answering ${status}: ${answer.message ?? res.body}`);
    if (status === 503 && answer.idempotencyKey) key = answer.idempotencyKey;
    else if (status !== 429 && status !== 503) throw new InvariantError(`the ingest handler answered ${status}: ${answer.message ?? res.body}`);
    await sleep(retryAfterMs(res));
  }
}

async function sendChunk(ctx: FeederContext, target: FeedTarget, events: unknown[], where: (j: number) => string, turn: { n: number }, skip: number[]): Promise<number> {
  const parts: string[] = [];
  for (let j = 0; j < events.length; j++) {
    const rec = toRecord(target.def, events[j], ctx.clock);
    if (typeof rec === 'string') ctx.rejected.push({ source: target.def.name, position: where(j), error: rec });
    else parts.push(C.encodePart([rec.timestamp, events[j]]));
  }
  if (!parts.length) return 0;
  const chunkNo = turn.n++;
  const partition = chunkNo % target.partitions;
  const drop = Math.min(skip[partition] ?? 0, parts.length);
  if (drop > 0) {
    skip[partition] -= drop;
    parts.splice(0, drop);
    if (!parts.length) return 0;
  }
  await sendParts(ctx, target, partition, parts, `chunk ${chunkNo}`);
  return parts.length;
}

/** One partition's encoded records to the source queue, once the backlog allows. */
async function sendParts(ctx: FeederContext, target: FeedTarget, partition: number, parts: string[], id: string): Promise<void> {
  const url = await ctx.transport.queues.queueUrl(target.stage);
  const backlog = async () => {
    let n = 0;
    for (const u of ctx.backlogQueues ?? [url]) n += await queueBacklog(ctx.sqs, u);
    return n;
  };
  while ((await backlog()) > ctx.maxBacklogMessages) await sleep(ctx.backlogQueues ? 50 : 200);
  const messages: OutgoingMessage[] = C.pack(parts, C.FRAMES.ingest(target.def.name), ctx.transport.maxMessageBytes, true).map((m, k) => ({
    groupId: String(partition),
    body: m.body!,
    bytes: m.bytes,
    dedupId: C.dedupId(`${ctx.plan.job.name}/feed/${target.def.name}${ctx.restoreEpoch ? `/r${ctx.restoreEpoch}` : ''}`, [id, `message ${k}`]),
  }));
  await ctx.transport.sendAll(url, messages, true);
}

/** An HTTP API v2 request as API Gateway hands it to the ingest function. */
export function apiEvent(stream: string, body: string, idempotencyKey?: string): APIGatewayProxyEventV2 {
  const now = Date.now();
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (idempotencyKey) headers['idempotency-key'] = idempotencyKey;
  const path = `/streams/${encodeURIComponent(stream)}/events`;
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString: '',
    headers,
    requestContext: {
      accountId: '000000000000',
      apiId: 'local',
      domainName: 'localhost',
      domainPrefix: 'localhost',
      http: { method: 'POST', path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'sluice-local-aws' },
      requestId: `local-${now}-${Math.random().toString(36).slice(2)}`,
      routeKey: '$default',
      stage: '$default',
      time: new Date(now).toUTCString(),
      timeEpoch: now,
    },
    body,
    isBase64Encoded: false,
  };
}

function retryAfterMs(res: APIGatewayProxyStructuredResultV2): number {
  const h = res.headers?.['Retry-After'] ?? res.headers?.['retry-after'];
  const s = Number(h);
  return Number.isFinite(s) && s > 0 ? Math.min(s * 1000, 5000) : 200;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
