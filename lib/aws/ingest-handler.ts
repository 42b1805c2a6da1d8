/**
 * The ingest function: HTTP API v2 / Function URL request -> validation -> SQS.
 * Answers follow the embedded endpoint (lib/transport/ingest-validation.ts), plus:
 *
 * - an event with a character SQS cannot carry (controls other than tab/LF/CR, lone
 *   surrogates, U+FFFE/U+FFFF) is rejected with its path; so is an event larger than
 *   one message even compressed;
 * - 429 + Retry-After when the source stage's queue holds more than maxBacklogMessages
 *   (ApproximateNumberOfMessages, read at most once per backlogCacheMs), or when SQS
 *   throttled every message; nothing is enqueued then;
 * - 202 only for what SQS acknowledged. Entries SQS refused (after retries) are listed
 *   as rejected, `retryable: true` when a later attempt may succeed;
 * - 503 `outcome_unknown` when SQS's answer was lost: some events may be enqueued. The
 *   answer names an Idempotency-Key; resending the same body with that header within
 *   SQS's 5-minute deduplication window enqueues nothing twice (deduplication ids derive
 *   from the key, and the partition from its hash; needs queue-scoped deduplication,
 *   the default).
 *
 * With checkpoints, accepted input wakes the coordinator (checkpoint-wakeup.ts) before the
 * answer, at most one call per container and time slot.
 *
 * Events are stamped with their event time here (the source's timestamp extractor, or
 * the arrival time), packed per source partition, in order, into ingest messages.
 * Partition: by `partitionKey` when configured, else by the Idempotency-Key's hash,
 * else round-robin per request. Messages carry the arrival time; partitions this
 * container has sent nothing for the source's idle timeout get an idle probe (idleProbes):
 * the request's stream in the same send, the job's other ingestion streams in their own,
 * so a silent partition can be marked idle.
 */
import { randomUUID } from 'node:crypto';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { Logger } from '@aws-lambda-powertools/logger';
import { type Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import type { SourceDef } from '../api/sources.ts';
import type { Job } from '../api/stream.ts';
import { type Clock, type Key, keyToString, systemClock } from '../api/types.ts';
import { compile, type PhysicalPlan } from '../graph/compile.ts';
import { keyGroupOfString, partitionOfKeyGroup } from '../graph/keygroups.ts';
import { toIngestRecord } from '../transport/sources.ts';
import * as V from '../transport/ingest-validation.ts';
import { AwsAccounting } from './accounting.ts';
import { INGEST_METRICS, stageDimension } from './handler-metrics.ts';
import * as C from './sqs-codec.ts';
import { NamedQueues, type QueueResolver, queueBacklog } from './sqs-queues.ts';
import { type OutgoingMessage, SqsTransport } from './sqs-transport.ts';
import { probeMessage } from './idle-probes.ts';

export interface IngestHandlerConfig {
  readonly job: Job;
  readonly sqs: SQSClient;
  /** Default: the job's queues by name (naming.ts). */
  readonly queues?: QueueResolver;
  readonly clock?: Clock;
  readonly accounting?: AwsAccounting;
  readonly maxBodyBytes?: number;
  readonly maxEventsPerRequest?: number;
  /** Largest SQS message; default 256 KiB, at most 1 MiB. */
  readonly maxMessageBytes?: number;
  readonly compress?: boolean;
  /** Attempts for messages SQS refuses transiently (default 5). */
  readonly maxSendAttempts?: number;
  /** 429 above this many messages waiting in the source stage's queue (default 10,000). */
  readonly maxBacklogMessages?: number;
  readonly backlogCacheMs?: number;
  readonly retryAfterMs?: number;
  /**
   * Checkpoints: wake the coordinator after events were enqueued (CoordinatorWakeUp,
   * checkpoint-wakeup.ts); a failure is logged, never answered.
   */
  readonly wakeUp?: { onInput(): Promise<unknown> };
  /** A key per event to choose its source partition (same key, same partition); undefined: per request. */
  readonly partitionKey?: (stream: string, event: unknown) => Key | undefined;
  readonly logger?: Logger;
  readonly metrics?: Metrics;
}

export type IngestHandler = (event: APIGatewayProxyEventV2, context?: Context) => Promise<APIGatewayProxyStructuredResultV2>;

interface Stream {
  readonly def: SourceDef<any>;
  readonly stage: number;
  readonly partitions: number;
}

export function createIngestHandler(config: IngestHandlerConfig): IngestHandler {
  const plan = compile(config.job.graph);
  const accounting = config.accounting ?? new AwsAccounting();
  const queues = config.queues ?? new NamedQueues(config.sqs, plan.job.name, '', accounting);
  const transport = new SqsTransport({ sqs: config.sqs, job: plan.job.name, queues, accounting, maxMessageBytes: config.maxMessageBytes, compress: config.compress, maxSendAttempts: config.maxSendAttempts });
  const clock = config.clock ?? systemClock;
  const streams = ingestStreams(plan);
  const names = [...streams.keys()];
  const maxBody = config.maxBodyBytes ?? V.DEFAULT_MAX_BODY_BYTES;
  const maxEvents = config.maxEventsPerRequest ?? V.DEFAULT_MAX_EVENTS;
  const retryAfterMs = config.retryAfterMs ?? 1000;
  const compress = config.compress ?? true;
  const backlog = new Map<number, { at: number; messages: number }>();
  /** Per stream and partition: when this container last sent it data or a probe. */
  const lastSent = new Map<string, number[]>();

  function lastSentTo(name: string, stream: Stream): number[] {
    let last = lastSent.get(name);
    if (!last) lastSent.set(name, (last = new Array<number>(stream.partitions).fill(Number.NEGATIVE_INFINITY)));
    return last;
  }

  /**
   * Probes for the partitions of a stream this container has sent nothing for the source's
   * idle timeout (runtime/idleness.ts): a silent message group is never invoked otherwise,
   * and would hold event time back downstream forever. At most one per partition per
   * timeout per container, and only while requests arrive: nothing at zero traffic.
   */
  /**
   * A silent stream holds back the stages it feeds with other streams (a join, a union):
   * its partitions are probed too, on their own queue, at most once per timeout. Never
   * fails the request: a probe that is not sent is tried again by a later request.
   */
  async function probeOtherStreams(current: string, now: number, requestKey: string): Promise<void> {
    for (const [name, other] of streams) {
      if (name === current) continue;
      const probes = idleProbes(name, other, [], now, requestKey);
      if (!probes.length) continue;
      try {
        const sent = await transport.send(await queues.queueUrl(other.stage), probes.map((p) => p.message), false);
        sent.forEach((o, i) => o.ok && probes[i].sent());
      } catch (e) {
        config.logger?.warn('idle probes not sent; a later request tries again', { stream: name, error: (e as Error).message });
      }
    }
  }

  function idleProbes(name: string, stream: Stream, sentTo: Iterable<number>, now: number, requestKey: string): { message: OutgoingMessage; sent: () => void }[] {
    const timeout = stream.def.watermark.idleTimeoutMs;
    if (timeout === undefined) return [];
    const last = lastSentTo(name, stream);
    const skip = new Set(sentTo);
    const out: { message: OutgoingMessage; sent: () => void }[] = [];
    for (let p = 0; p < stream.partitions; p++) {
      if (skip.has(p) || now - last[p] < timeout) continue;
      out.push({ message: probeMessage(plan.job.name, name, stream.def.name, p, now, requestKey), sent: () => (last[p] = now) });
    }
    return out;
  }
  const roundRobin = new Map<string, number>();

  async function backlogged(stage: number, url: string): Promise<number | undefined> {
    const limit = config.maxBacklogMessages ?? 10_000;
    let hit = backlog.get(stage);
    if (!hit || clock.now() - hit.at >= (config.backlogCacheMs ?? 1000)) {
      try {
        hit = { at: clock.now(), messages: await queueBacklog(config.sqs, url, accounting) };
        backlog.set(stage, hit);
      } catch (e) {
        // Back-pressure is advisory: an unreadable metric must not stop ingestion.
        config.logger?.warn('cannot read the queue backlog', { error: (e as Error).message });
        return undefined;
      }
    }
    return hit.messages > limit ? hit.messages : undefined;
  }

  async function handle(event: APIGatewayProxyEventV2): Promise<V.IngestAnswer> {
    const method = event.requestContext?.http?.method ?? 'GET';
    const route = V.matchRoute(method, requestPath(event));
    if (route.kind === 'answer') return route.answer;
    if (route.kind === 'health') return V.healthAnswer(names);
    const unknown = V.checkStream(route.stream, names);
    if (unknown) return unknown;
    const stream = streams.get(route.stream)!;
    stageDimension(config.metrics, stream.stage);
    const format = V.checkContentType(header(event, 'content-type'));
    if (V.isAnswer(format)) return format;
    const encoded = V.checkContentEncoding(header(event, 'content-encoding'));
    if (encoded) return encoded;
    const body = event.body === undefined ? Buffer.alloc(0) : Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8');
    if (body.byteLength > maxBody) return V.tooLargeAnswer(V.bodyLimitMessage(maxBody, body.byteLength));
    const parsed = V.parseBody(body, format, maxEvents);
    if (V.isAnswer(parsed)) return parsed;

    const arrival = clock.now();
    const parts: string[] = [];
    const checked = V.validateEvents(parsed.events, (ev, index) => {
      const rec = toIngestRecord(stream.def, ev, clock, arrival);
      if (typeof rec === 'string') return rec;
      const unsafe = sqsUnsafe(ev);
      if (unsafe) return unsafe;
      // Events without an extractor get the arrival time, fixed here so redeliveries agree.
      const part = C.encodePart([stream.def.timestamp ? rec.timestamp : arrival, ev]);
      const bytes = C.finishBody(C.FRAMES.ingest(stream.def.name, arrival)(part), compress).bytes;
      if (bytes > transport.maxMessageBytes) return `(event): encodes to ${bytes} bytes, above the SQS message limit of ${transport.maxMessageBytes} bytes`;
      parts[index] = part;
      return undefined;
    });
    if (V.isAnswer(checked)) return checked;

    const url = await queues.queueUrl(stream.stage);
    const waiting = await backlogged(stream.stage, url);
    if (waiting !== undefined) return V.saturatedAnswer(route.stream, retryAfterMs);

    const key = header(event, 'idempotency-key');
    const requestKey = key ?? event.requestContext?.requestId ?? randomUUID();
    const byPartition = new Map<number, number[]>();
    const turn = roundRobin.get(route.stream) ?? 0;
    if (key === undefined) roundRobin.set(route.stream, turn + 1);
    const requestPartition = key !== undefined ? partitionOf(key, stream.partitions, plan) : turn % stream.partitions;
    for (const { index, event: ev } of checked.valid) {
      const k = config.partitionKey?.(route.stream, ev);
      const p = k === undefined ? requestPartition : partitionOf(k, stream.partitions, plan);
      const list = byPartition.get(p);
      if (list) list.push(index);
      else byPartition.set(p, [index]);
    }
    const messages: OutgoingMessage[] = [];
    const eventsOf: number[][] = [];
    for (const [p, indices] of byPartition) {
      C.pack(indices.map((i) => parts[i]), C.FRAMES.ingest(stream.def.name, arrival), transport.maxMessageBytes, compress).forEach((m) => {
        // Named by the request and its first event, not the partition: a retry that lands on another group still deduplicates.
        const dedupId = C.dedupId(`${plan.job.name}/ingest/${route.stream}/${requestKey}`, [`event ${indices[m.start]}`]);
        messages.push({ groupId: String(p), body: m.body!, bytes: m.bytes, dedupId });
        eventsOf.push(indices.slice(m.start, m.end));
      });
    }
    // Idle probes ride in the same SendMessageBatch calls (other groups): no request of their own.
    const probes = idleProbes(route.stream, stream, byPartition.keys(), arrival, requestKey);
    const sent = await transport.send(url, [...messages, ...probes.map((p) => p.message)], true);
    const outcomes = sent.slice(0, messages.length);
    probes.forEach((p, i) => {
      if (sent[messages.length + i].ok) p.sent();
      else config.logger?.warn('idle probe not sent; the next request tries again', { stream: route.stream, partition: p.message.groupId });
    });
    for (const p of byPartition.keys()) lastSentTo(route.stream, stream)[p] = arrival;
    await probeOtherStreams(route.stream, arrival, requestKey);

    let accepted = 0;
    const rejected: V.RejectedEvent[] = [...checked.rejected];
    const unsure: number[] = [];
    let throttled = 0;
    outcomes.forEach((o, m) => {
      if (o.ok) accepted += eventsOf[m].length;
      else if (!o.definite) unsure.push(...eventsOf[m]);
      else {
        if (/thrott/i.test(o.code)) throttled++;
        for (const index of eventsOf[m]) rejected.push({ index, error: `SQS did not accept the event: ${o.code}: ${o.message}`, retryable: !o.senderFault });
      }
    });
    config.metrics?.addMetric(INGEST_METRICS.eventsAccepted, MetricUnit.Count, accepted);
    if ((accepted > 0 || unsure.length > 0) && config.wakeUp) {
      try {
        await config.wakeUp.onInput();
      } catch (e) {
        config.logger?.error('cannot wake the checkpoint coordinator; the next request tries again', { error: (e as Error).message });
        config.metrics?.addMetric(INGEST_METRICS.wakeUpFailures, MetricUnit.Count, 1);
      }
    }
    config.metrics?.addMetric(INGEST_METRICS.eventsRejected, MetricUnit.Count, rejected.length);
    if (unsure.length) {
      return {
        status: 503,
        body: {
          error: 'outcome_unknown',
          message: `SQS did not confirm ${V.plural(unsure.length, 'event')}; they may be enqueued. Send the same body again with header "Idempotency-Key: ${requestKey}" within 5 minutes: nothing will be enqueued twice`,
          idempotencyKey: requestKey,
          accepted,
          unconfirmed: unsure.sort((a, b) => a - b),
          rejected,
        },
        headers: { 'Retry-After': String(Math.ceil(retryAfterMs / 1000)) },
      };
    }
    if (accepted === 0) {
      if (throttled === messages.length) return V.saturatedAnswer(route.stream, retryAfterMs, 'is throttled by SQS');
      if (rejected.some((r) => r.retryable)) {
        return { status: 503, body: { error: 'unavailable', message: 'SQS refused every event; nothing was enqueued; retry later', accepted: 0, rejected }, headers: { 'Retry-After': String(Math.ceil(retryAfterMs / 1000)) } };
      }
      return V.allRejectedAnswer(parsed.events.length, rejected);
    }
    return V.acceptedAnswer(accepted, parsed.events.length, rejected);
  }

  return async (event, context) => {
    if (context) config.logger?.addContext(context);
    config.metrics?.addMetric(INGEST_METRICS.requests, MetricUnit.Count, 1);
    let answer: V.IngestAnswer;
    try {
      answer = await handle(event);
    } catch (e) {
      const err = e as Error & { retryable?: boolean };
      config.logger?.error('ingestion failed', { error: err.message });
      // We cannot know the batch was enqueued: never 2xx.
      answer = err.retryable
        ? { status: 503, body: { error: 'unavailable', message: `ingestion failed: ${err.message}` }, headers: { 'Retry-After': String(Math.ceil(retryAfterMs / 1000)) } }
        : { status: 500, body: { error: 'internal', message: `ingestion failed: ${err.message}` } };
    } finally {
      config.metrics?.publishStoredMetrics();
    }
    return toResult(event, answer);
  };
}

/** The job's ingestion streams: sources bound to `ingest`, each starting a stage. */
export function ingestStreams(plan: PhysicalPlan): Map<string, Stream> {
  const out = new Map<string, Stream>();
  for (const edge of plan.edges) {
    if (edge.from.kind !== 'source') continue;
    const spec = plan.job.nodes[edge.toNode].spec;
    if (spec.kind !== 'source' || spec.source.binding.kind !== 'ingest') continue;
    out.set(spec.source.name, { def: spec.source, stage: edge.toStage, partitions: plan.stages[edge.toStage].parallelism });
  }
  return out;
}

function partitionOf(key: Key, partitions: number, plan: PhysicalPlan): number {
  const maxP = plan.job.maxParallelism;
  return partitionOfKeyGroup(keyGroupOfString(keyToString(key), maxP), partitions, maxP);
}

/** The path without an API Gateway stage prefix (`/prod/streams/...` on a named stage). */
function requestPath(event: APIGatewayProxyEventV2): string {
  const path = event.rawPath ?? '/';
  const stage = event.requestContext?.stage;
  if (stage && stage !== '$default' && path.startsWith(`/${stage}/`)) return path.slice(stage.length + 1);
  return path;
}

/** HTTP API v2 lowercases header names; Function URLs too. Be lenient anyway. */
function header(event: APIGatewayProxyEventV2, name: string): string | undefined {
  const h = event.headers ?? {};
  if (h[name] !== undefined) return h[name];
  for (const k of Object.keys(h)) if (k.toLowerCase() === name) return h[k];
  return undefined;
}

function toResult(event: APIGatewayProxyEventV2, a: V.IngestAnswer): APIGatewayProxyStructuredResultV2 {
  const head = event.requestContext?.http?.method === 'HEAD';
  return { statusCode: a.status, headers: { 'Content-Type': 'application/json; charset=utf-8', ...a.headers }, body: head ? '' : JSON.stringify(a.body) };
}

/** The first string (key or value) with a character SQS refuses, as "path: ...", or undefined. */
export function sqsUnsafe(value: unknown, path = '(event)'): string | undefined {
  if (typeof value === 'string') {
    const bad = badChar(value);
    return bad && `${path}: contains ${bad}, a character SQS messages cannot carry; expected only tab, LF, CR, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF, received ${shown(value)}`;
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const r = sqsUnsafe(value[i], path === '(event)' ? String(i) : `${path}.${i}`);
      if (r) return r;
    }
    return undefined;
  }
  if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      const p = path === '(event)' ? k : `${path}.${k}`;
      const badKey = badChar(k);
      if (badKey) return `${p}: the field name contains ${badKey}, a character SQS messages cannot carry; received field name ${shown(k)}`;
      const r = sqsUnsafe(v, p);
      if (r) return r;
    }
  }
  return undefined;
}

/** A string as JSON (NUL and lone surrogates escaped), cut to 80 characters. */
const shown = (s: string): string => (JSON.stringify(s).length > 80 ? `${JSON.stringify(s).slice(0, 80)}...` : JSON.stringify(s));

function badChar(s: string): string | undefined {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x20 && c < 0xd800) continue;
    const at = ` at position ${i}`;
    const hex = `U+${c.toString(16).toUpperCase().padStart(4, '0')}`;
    if (c < 0x20) {
      if (c === 0x09 || c === 0x0a || c === 0x0d) continue;
      return hex + at;
    }
    if (c <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++;
        continue;
      }
      return `a lone surrogate ${hex}${at}`;
    }
    if (c <= 0xdfff) return `a lone surrogate ${hex}${at}`;
    if (c === 0xfffe || c === 0xffff) return hex + at;
  }
  return undefined;
}
