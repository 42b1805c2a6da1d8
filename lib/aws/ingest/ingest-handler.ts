/**
 * The ingest function: HTTP API v2 / Function URL request -> validation -> SQS.
 * Answers follow the embedded endpoint (lib/transport/ingest-validation.ts), plus:
 *
 * - an event with a character SQS cannot carry (controls other than tab/LF/CR, lone
 *   surrogates, U+FFFE/U+FFFF) is rejected with its path; so is an event larger than
 *   one message even compressed;
 * - opt-in load shedding (SourceOptions.shed, ingest-shedding.ts): the events it drops are
 *   named in the 202 (`shed`), never enqueued; a resend drops the same ones;
 * - 429 + Retry-After when the source stage's queue, or the queue of any stage it feeds,
 *   holds more than maxBacklogMessages or (with maxQueueAgeMs) has had a message waiting
 *   longer (ingest-backpressure.ts); or when SQS throttled every message. Nothing is
 *   enqueued then;
 * - 202 only for what SQS acknowledged. Entries SQS refused (after retries) are listed
 *   as rejected, `retryable: true` when a later attempt may succeed;
 * - 503 `outcome_unknown` when SQS's answer was lost: some events may be enqueued. The
 *   answer names an Idempotency-Key (a keyless request's is minted for the partition it
 *   used); resending the same body with it within 4 minutes enqueues nothing twice.
 *
 * Idempotency-Key (with a store, idempotency-store.ts; decisions in
 * lib/transport/idempotency.ts): the request claims its key with the body's fingerprint;
 * another body or stream under the key is a 409, a replay of an answered request gets
 * that answer again (`replay: true`, `Idempotent-Replayed: true`), a claim without an
 * answer is resent with its first arrival time. Dedup ids are key + fingerprint + the
 * events a message holds; the partition is the key's hash. Queues deduplicate per message
 * group, which is enough: every resend of one body lands in the same groups.
 *
 * With checkpoints, accepted input wakes the coordinator (checkpoint-wakeup.ts) before the
 * answer, at most one call per container and time slot.
 *
 * Events are stamped with their event time here (the source's timestamp extractor, or
 * the arrival time), packed per source partition, in order, into ingest messages.
 * Partition: by `partitionKey` when configured, else by the Idempotency-Key's hash,
 * else round-robin per request from a random start per container. Messages carry the arrival time; partitions this
 * container has sent nothing for the source's idle timeout get an idle probe (idleProbes):
 * the request's stream in the same send, the job's other ingestion streams in their own,
 * so a silent partition can be marked idle.
 */
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { Logger } from '@aws-lambda-powertools/logger';
import { type Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import type { SourceDef } from '../../api/sources.ts';
import type { Job } from '../../api/stream.ts';
import { type Clock, type Key, systemClock } from '../../api/types.ts';
import { compile, type PhysicalPlan } from '../../graph/compile.ts';
import { toIngestRecord } from '../../transport/sources.ts';
import * as I from '../../transport/idempotency.ts';
import * as V from '../../transport/ingest-validation.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import { countShed, INGEST_METRICS, stageDimension } from '../handler-metrics.ts';
import * as C from '../sqs/sqs-codec.ts';
import { NamedQueues, type QueueResolver } from '../sqs/sqs-queues.ts';
import { type OutgoingMessage, SqsTransport } from '../sqs/sqs-transport.ts';
import { probeMessage } from '../checkpoint/idle-probes.ts';
import type { IdempotencyStore } from './idempotency-store.ts';
import { type BackPressureOptions, IngestBackPressure } from './ingest-backpressure.ts';
import { IngestShedding } from './ingest-shedding.ts';
import { keyOfPartition, outcomeUnknown, partitionOf, RESEND_WITHIN_MS } from './ingest-keys.ts';

export { RESEND_WITHIN_MS } from './ingest-keys.ts';
import { header, requestPath, toResult } from './ingest-http.ts';
import { sqsUnsafe } from '../sqs/sqs-safe.ts';

export { sqsUnsafe } from '../sqs/sqs-safe.ts';

export interface IngestHandlerConfig extends BackPressureOptions {
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
  readonly retryAfterMs?: number;
  /**
   * Checkpoints: wake the coordinator after events were enqueued (CoordinatorWakeUp,
   * checkpoint-wakeup.ts); a failure is logged, never answered.
   */
  readonly wakeUp?: { onInput(): Promise<unknown> };
  /** A key per event to choose its source partition (same key, same partition); undefined: per request. */
  readonly partitionKey?: (stream: string, event: unknown) => Key | undefined;
  /**
   * Where Idempotency-Keys are claimed and their answers kept (DynamoDbIdempotencyStore).
   * Without one, a key still names the dedup ids and the partition, but a reused key is not
   * checked (no 409), a replay is not told apart, and a resend under load shedding may
   * shed other events than its first attempt did (so duplicate some).
   */
  readonly idempotency?: IdempotencyStore;
  /** The round-robin's start per stream, from [0, 1) (default Math.random). */
  readonly random?: () => number;
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
  const backPressure = new IngestBackPressure(plan, config.sqs, queues, clock, { ...config, accounting });
  const shedding = new IngestShedding(backPressure);
  /** Per stream and partition: when this container last sent it data or a probe. */
  const lastSent = new Map<string, number[]>();
  const maxP = plan.job.maxParallelism;
  const random = config.random ?? Math.random;
  const store = config.idempotency;

  function lastSentTo(name: string, stream: Stream): number[] {
    let last = lastSent.get(name);
    if (!last) lastSent.set(name, (last = new Array<number>(stream.partitions).fill(Number.NEGATIVE_INFINITY)));
    return last;
  }

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

  /**
   * Probes for the partitions of a stream this container has sent nothing for the source's
   * idle timeout (runtime/idleness.ts): a silent message group is never invoked otherwise,
   * and would hold event time back downstream forever. At most one per partition per
   * timeout per container, and only while requests arrive: nothing at zero traffic.
   */
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
  /** The next partition per stream for keyless requests, from a random start: containers spread their first requests. */
  const roundRobin = new Map<string, number>();

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
    const key = header(event, 'idempotency-key');
    const badKey = key === undefined ? undefined : I.checkKey(key);
    if (badKey) return badKey;
    const body = event.body === undefined ? Buffer.alloc(0) : Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8');
    if (body.byteLength > maxBody) return V.tooLargeAnswer(V.bodyLimitMessage(maxBody, body.byteLength));
    const parsed = V.parseBody(body, format, maxEvents);
    if (V.isAnswer(parsed)) return parsed;
    const fingerprint = I.bodyFingerprint(route.stream, body);

    let arrival = clock.now();
    const request: Request = { stream: route.stream, def: stream, events: parsed.events, fingerprint, arrival, key: key ?? '', partition: 0, sending: false };
    if (key === undefined) {
      // Minted for the partition it goes to: named in a 503, a resend with it lands there.
      const turn = roundRobin.get(route.stream) ?? Math.floor(random() * stream.partitions);
      roundRobin.set(route.stream, (turn + 1) % stream.partitions);
      return enqueueKeyless({ ...request, partition: turn, key: keyOfPartition(turn, stream.partitions, maxP) });
    }
    request.partition = partitionOf(key, stream.partitions, maxP);
    if (!store) return (await enqueue(request)).answer;
    const decision = I.decide(key, await store.claim(key, fingerprint, route.stream, arrival), fingerprint, arrival, { resendWithinMs: RESEND_WITHIN_MS, dedupName: "SQS's 5-minute deduplication window", stream: route.stream });
    if (decision.kind === 'replay' || decision.kind === 'conflict' || decision.kind === 'unresolved') {
      if (decision.kind !== 'replay') config.metrics?.addMetric(INGEST_METRICS.eventsRejected, MetricUnit.Count, parsed.events.length);
      return decision.answer;
    }
    // A resend: the first attempt's arrival time, so its messages (timestamps, packing, dedup ids) come out the same.
    if (decision.kind === 'resend') {
      arrival = request.arrival = decision.startedAt;
      request.shed = decision.shed ?? [];
    } else request.recordShed = (shed) => store.recordShed(key, fingerprint, arrival, shed);
    let result: Enqueued;
    try {
      result = await enqueue(request);
    } catch (e) {
      if (decision.kind === 'new' && !request.sending) await releaseQuietly(key, fingerprint, arrival);
      throw e;
    }
    if (result.enqueued && I.isFinal(result.answer)) {
      try {
        await store.complete(key, fingerprint, I.remembered(result.answer));
      } catch (e) {
        // The events are in SQS: still a 202. The claim stays pending: a resend within the window is deduplicated.
        config.logger?.error('cannot record the answer of an Idempotency-Key', { error: (e as Error).message });
      }
    } else if (!result.enqueued && decision.kind === 'new') await releaseQuietly(key, fingerprint, arrival);
    return result.answer;
  }

  /** A keyless request whose outcome is unknown leaves a claim for its minted key: a resend with it reuses the arrival time. */
  async function enqueueKeyless(request: Request): Promise<V.IngestAnswer> {
    const result = await enqueue(request);
    if (store && result.answer.body.error === 'outcome_unknown') {
      try {
        await store.claim(request.key, request.fingerprint, request.stream, request.arrival, result.shed);
      } catch (e) {
        config.logger?.warn('cannot record the minted Idempotency-Key; a resend is still deduplicated by SQS', { error: (e as Error).message });
      }
    }
    return result.answer;
  }

  async function releaseQuietly(key: string, fingerprint: string, startedAt: number): Promise<void> {
    try {
      await store!.release(key, fingerprint, startedAt);
    } catch (e) {
      // Left pending: a resend of the same body within the window is sent again, which is right since nothing went.
      config.logger?.warn('cannot release an Idempotency-Key that enqueued nothing', { error: (e as Error).message });
    }
  }

  async function enqueue(request: Request): Promise<Enqueued> {
    const { def: stream, arrival } = request;
    const parts: string[] = [];
    const checked = V.validateEvents(request.events, (ev, index) => {
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
    if (V.isAnswer(checked)) return { answer: checked, enqueued: false };

    // Opt-in load shedding (below the 429 bounds), or what the first attempt of a resend shed.
    const shed = request.shed ?? (await shedOf(request, checked.valid));
    const dropped = new Set(shed.map((e) => e.index));
    const kept = dropped.size ? checked.valid.filter((v) => !dropped.has(v.index)) : checked.valid;
    // Counted once per request that is answered with them (a resend's were counted by its first attempt; a 429 sheds nothing).
    const count = () => !request.shed && countShed(config.metrics, stream.stage, request.stream, shed);
    if (kept.length === 0 && shed.length) {
      count();
      return { answer: V.acceptedAnswer(0, request.events.length, checked.rejected, shed), enqueued: false, shed };
    }

    const url = await queues.queueUrl(stream.stage);
    const held = await backPressure.heldBack(stream.stage);
    if (held !== undefined) {
      const st = plan.stages[held.stage];
      return { answer: V.saturatedAnswer(request.stream, retryAfterMs, `is held back: stage ${st.id} "${st.name}" ${held.reason}`), enqueued: false };
    }
    // Kept with the key's claim before anything is sent: a resend drops the same events.
    if (shed.length && !request.shed) await request.recordShed?.(shed);
    count();

    const byPartition = new Map<number, number[]>();
    for (const { index, event: ev } of kept) {
      const k = config.partitionKey?.(request.stream, ev);
      const p = k === undefined ? request.partition : partitionOf(k, stream.partitions, maxP);
      const list = byPartition.get(p);
      if (list) list.push(index);
      else byPartition.set(p, [index]);
    }
    const messages: OutgoingMessage[] = [];
    const eventsOf: number[][] = [];
    // The body's fingerprint is in every id: another body under the same key is never deduplicated away.
    const scope = `${plan.job.name}/ingest/${request.stream}/${request.key}/${request.fingerprint}`;
    for (const [p, indices] of byPartition) {
      C.pack(indices.map((i) => parts[i]), C.FRAMES.ingest(stream.def.name, arrival), transport.maxMessageBytes, compress).forEach((m) => {
        // Named by the events it holds: a resend packed otherwise would duplicate, never drop.
        const dedupId = C.dedupId(scope, [`events ${indices[m.start]}-${indices[m.end - 1]}`]);
        messages.push({ groupId: String(p), body: m.body!, bytes: m.bytes, dedupId });
        eventsOf.push(indices.slice(m.start, m.end));
      });
    }
    // Idle probes ride in the same SendMessageBatch calls (other groups): no request of their own.
    const probes = idleProbes(request.stream, stream, byPartition.keys(), arrival, request.key);
    request.sending = true;
    const sent = await transport.send(url, [...messages, ...probes.map((p) => p.message)], true);
    shedding.sent(stream.stage, kept.length, messages.length);
    const outcomes = sent.slice(0, messages.length);
    probes.forEach((p, i) => {
      if (sent[messages.length + i].ok) p.sent();
      else config.logger?.warn('idle probe not sent; the next request tries again', { stream: request.stream, partition: p.message.groupId });
    });
    for (const p of byPartition.keys()) lastSentTo(request.stream, stream)[p] = arrival;
    await probeOtherStreams(request.stream, arrival, request.key);

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
    const enqueued = accepted > 0 || unsure.length > 0;
    if (unsure.length) return { answer: outcomeUnknown(request.key, unsure, accepted, rejected, retryAfterMs), enqueued, shed };
    if (accepted === 0) {
      if (throttled === messages.length) return { answer: V.saturatedAnswer(request.stream, retryAfterMs, 'is throttled by SQS'), enqueued };
      if (rejected.some((r) => r.retryable)) {
        return { answer: { status: 503, body: { error: 'unavailable', message: 'SQS refused every event; nothing was enqueued; retry later', accepted: 0, rejected }, headers: { 'Retry-After': String(Math.ceil(retryAfterMs / 1000)) } }, enqueued };
      }
      return { answer: V.allRejectedAnswer(request.events.length, rejected), enqueued };
    }
    return { answer: V.acceptedAnswer(accepted, request.events.length, rejected, shed), enqueued, shed };
  }

  /** The stream's shedding decision for these valid events, as indexes into the request. */
  async function shedOf(request: Request, valid: readonly { index: number; event: unknown }[]): Promise<V.ShedEvent[]> {
    const d = await shedding.decide(request.stream, request.def.def, request.def.stage, valid.map((v) => v.event));
    return d ? d.shed.map((i) => ({ index: valid[i].index, reason: d.reason })) : [];
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

interface Request {
  readonly stream: string;
  readonly def: Stream;
  readonly events: readonly unknown[];
  readonly fingerprint: string;
  arrival: number;
  /** The Idempotency-Key, or the one minted for a keyless request's partition: its messages' dedup ids derive from it. */
  readonly key: string;
  /** Where events without a partition key go. */
  partition: number;
  /** Set once the send began: from then on, its outcome may be anything. */
  sending: boolean;
  /** A resend: what its first attempt shed (load shedding decides nothing anew). */
  shed?: readonly V.ShedEvent[];
  /** A keyed request's own claim: keep what it sheds with it before sending. */
  recordShed?: (shed: readonly V.ShedEvent[]) => Promise<void>;
}

interface Enqueued {
  readonly answer: V.IngestAnswer;
  /** Whether any event went to SQS, or may have. */
  readonly enqueued: boolean;
  /** What load shedding dropped from the request. */
  readonly shed?: readonly V.ShedEvent[];
}
