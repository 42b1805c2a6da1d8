/**
 * A local stand-in for Lambda's SQS event source mapping on a FIFO queue, so the real
 * handlers run against a local SQS (fauxqs, LocalStack) exactly as Lambda would call them:
 *
 * - one poller: ReceiveMessage (long poll, up to `batchSize` <= 10 messages, all system
 *   and message attributes) only while a concurrency slot is free, so nothing is held
 *   invisible that cannot run; one receive = one batch = one invocation, which may mix
 *   message groups (in order within each), as Lambda's FIFO batches do;
 * - at most `maximumConcurrency` (2..1000, Lambda's range) invocations at once; SQS
 *   itself never hands out a group with messages in flight, and we check it anyway;
 * - the event and context are built as Lambda builds them (lambda-event.ts);
 * - the SQSBatchResponse is applied as with ReportBatchItemFailures: the listed
 *   messages stay, the rest are deleted (DeleteMessageBatch); an empty or absent
 *   response deletes all; an identifier that is empty or not in the batch, a thrown
 *   error or a timeout fails the whole batch. Like Lambda we do not enforce the FIFO
 *   rule (first failure and every later message of its group) but count violations,
 *   because Lambda would delete the later messages and break per-group order;
 * - failed messages reappear after the queue's visibility timeout, and after
 *   maxReceiveCount receives SQS moves them to the DLQ (RedrivePolicy, which fauxqs
 *   honours on FIFO queues). To keep local runs fast, `retryDelayMs` instead makes
 *   them visible again after that delay (ChangeMessageVisibility 0, in reverse batch
 *   order because fauxqs puts each released message at the front of its group). A
 *   timed-out invocation always waits for the visibility timeout: its work may still
 *   be running, as a timed-out Lambda's may still be finishing a call. With
 *   `retryDelayMs`, processed messages whose delete failed are released too (the
 *   handler drops what it applied), and a failed release is tried again
 *   (message-batches.ts): a message left invisible holds its group back for the whole
 *   visibility timeout (3 minutes locally), so what still fails is reported (onError);
 * - a failed message whose visibility the handler itself changed during the invocation
 *   (ChangeMessageVisibility, as the operator handler does to back off) comes back when
 *   that visibility ends, as on SQS, which knows nothing of retryDelayMs: on its own that
 *   is what fauxqs does; with `retryDelayMs`, time is scaled so that the queue's own
 *   visibility timeout lasts `retryDelayMs` (`visibilityScaleMs` per second). The event
 *   source sees the changes on its own client and on those passed to observe().
 *
 * Its own SQS requests (receives, deletes, visibility changes) are counted in the
 * accounting: Lambda's pollers are billed to the queue owner.
 */
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { GetQueueAttributesCommand, type Message, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { ChangeMessageVisibilityBatchRequest, ChangeMessageVisibilityBatchResult, ChangeMessageVisibilityRequest } from '@aws-sdk/client-sqs';
import { AwsAccounting } from '../../aws/cost/accounting.ts';
import { ConfigError } from '../../errors.ts';
import { lambdaContext, sqsRecord } from './lambda-event.ts';
import { type BatchTarget, deleteMessages, RELEASE_ATTEMPTS, releaseMessages } from './message-batches.ts';

/** The standard Lambda handler type for an SQS event source with ReportBatchItemFailures. */
export type SqsHandler = (event: SQSEvent, context: Context) => Promise<SQSBatchResponse | void | null | undefined>;

export interface EventSourceOptions {
  readonly sqs: SQSClient;
  readonly queueUrl: string;
  readonly handler: SqsHandler;
  /** Lambda function name in the context and logs (default: the queue name). */
  readonly functionName?: string;
  /** Messages per batch, 1..10 (FIFO limit; default 10). */
  readonly batchSize?: number;
  /** Concurrent invocations, 2..1000 as Lambda's ScalingConfig (default 1000, the account default). */
  readonly maximumConcurrency?: number;
  /** The function timeout (default 30 s); the remaining time is in the context. */
  readonly timeoutMs?: number;
  /** Long-poll wait, 0..20 s (default 20, as Lambda). stop() aborts a pending poll. */
  readonly waitTimeSeconds?: number;
  /** Make failed messages visible again after this delay instead of the visibility timeout. */
  readonly retryDelayMs?: number;
  /**
   * With retryDelayMs: how long here one second of a visibility the handler set lasts
   * (default retryDelayMs / the queue's VisibilityTimeout in seconds).
   */
  readonly visibilityScaleMs?: number;
  readonly memoryLimitInMB?: number;
  readonly accounting?: AwsAccounting;
  /** Called with each invocation error (thrown, timed out, invalid response, violation); default: ignored. */
  readonly onError?: (error: Error, event: SQSEvent) => void;
}

export interface EventSourceMetrics {
  invocations: number;
  /** Messages handed to the handler (a redelivered message counts again). */
  messages: number;
  /** Messages that failed (reported, or in a batch that failed as a whole). */
  failures: number;
  deleted: number;
  /** Invocations that threw, timed out or answered an invalid batch response. */
  errors: number;
  timeouts: number;
  invalidResponses: number;
  /** Batches whose failures broke the FIFO rule (a later message of a failed group not reported). */
  fifoRuleViolations: number;
  /** Messages of a group that was already in flight (SQS should never do this): released, not invoked. */
  groupConflicts: number;
  /** Processed messages SQS did not delete (released again with retryDelayMs; the runtime drops what it applied). */
  undeleted: number;
  /** Messages still invisible after every attempt to release them: they wait for the visibility timeout. */
  releaseFailures: number;
  /** Failed messages whose visibility the handler changed (a backoff): they come back when it ends. */
  handlerVisibility: number;
  receives: number;
  emptyReceives: number;
  maxConcurrentSeen: number;
  /** Billed duration as Lambda rounds it (1 ms steps), summed; timed-out invocations count the timeout. */
  billedMs: number;
}

const SQS = 'sqs';
let sources = 0;
/** SQS bills a request per started 64 KB of payload. */
const CHUNK = 64 * 1024;

export class SqsEventSource {
  readonly metrics: EventSourceMetrics = {
    invocations: 0,
    messages: 0,
    failures: 0,
    deleted: 0,
    errors: 0,
    timeouts: 0,
    invalidResponses: 0,
    fifoRuleViolations: 0,
    groupConflicts: 0,
    undeleted: 0,
    releaseFailures: 0,
    handlerVisibility: 0,
    receives: 0,
    emptyReceives: 0,
    maxConcurrentSeen: 0,
    billedMs: 0,
  };
  readonly accounting: AwsAccounting;
  private readonly batchSize: number;
  private readonly maxConcurrency: number;
  private readonly timeoutMs: number;
  private readonly waitTimeSeconds: number;
  private arn?: string;
  private visibilityTimeoutSeconds = 30;
  /** Receipt handles of the messages of running invocations -> the visibility (s) the handler set, if it did. */
  private readonly invoking = new Map<string, number | undefined>();
  private readonly observed = new Set<SQSClient>();
  private readonly middlewareName = `sluiceEventSourceVisibility${++sources}`;
  private running?: Promise<void>;
  private stopping = false;
  private poll?: AbortController;
  private slotFreed?: () => void;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly groupsInFlight = new Map<string, number>();
  /** Failed messages waiting for their fast retry: timer and the release to run. */
  private readonly pendingRetries = new Map<NodeJS.Timeout, () => Promise<void>>();

  constructor(private readonly options: EventSourceOptions) {
    this.batchSize = intIn('batchSize', options.batchSize ?? 10, 1, 10);
    this.maxConcurrency = intIn('maximumConcurrency', options.maximumConcurrency ?? 1000, 2, 1000);
    this.waitTimeSeconds = intIn('waitTimeSeconds', options.waitTimeSeconds ?? 20, 0, 20);
    this.timeoutMs = intIn('timeoutMs', options.timeoutMs ?? 30_000, 1, 900_000);
    if (options.retryDelayMs !== undefined) intIn('retryDelayMs', options.retryDelayMs, 0, 43_200_000);
    this.accounting = options.accounting ?? new AwsAccounting();
    if (options.visibilityScaleMs !== undefined && !(options.visibilityScaleMs >= 0 && Number.isFinite(options.visibilityScaleMs))) {
      throw new ConfigError('visibilityScaleMs', 'a finite number of milliseconds, at least 0', String(options.visibilityScaleMs));
    }
    this.observe(options.sqs);
  }

  /**
   * Watch a client the handler uses (its own by default) for visibility changes of the
   * messages it is handling; removed at stop(), added again at start().
   */
  observe(client: SQSClient): void {
    if (this.observed.has(client)) return;
    this.observed.add(client);
    if (this.running) this.attach(client);
  }

  private attach(client: SQSClient): void {
    client.middlewareStack.remove(this.middlewareName);
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const out = await next(args);
        // Only what SQS answered as done: a change whose answer is lost later is still a change.
        if (context.commandName === 'ChangeMessageVisibilityBatchCommand') {
          const input = args.input as ChangeMessageVisibilityBatchRequest;
          const ok = new Set(((out.output as ChangeMessageVisibilityBatchResult).Successful ?? []).map((e) => e.Id));
          for (const e of input.Entries ?? []) if (ok.has(e.Id) && e.ReceiptHandle) this.handlerChanged(e.ReceiptHandle, e.VisibilityTimeout ?? 0);
        } else if (context.commandName === 'ChangeMessageVisibilityCommand') {
          const input = args.input as ChangeMessageVisibilityRequest;
          if (input.ReceiptHandle) this.handlerChanged(input.ReceiptHandle, input.VisibilityTimeout ?? 0);
        }
        return out;
      },
      { step: 'build', priority: 'low', name: this.middlewareName },
    );
  }

  private handlerChanged(receiptHandle: string, seconds: number): void {
    if (this.invoking.has(receiptHandle)) this.invoking.set(receiptHandle, seconds);
  }

  get functionName(): string {
    return this.options.functionName ?? this.options.queueUrl.split('/').pop()!.replace(/\.fifo$/, '');
  }

  /** Invocations running now plus failed messages waiting for a fast retry. */
  get busy(): boolean {
    return this.inFlight.size > 0 || this.pendingRetries.size > 0;
  }

  /** Lambda GB-seconds of the invocations so far. */
  get gbSeconds(): number {
    return (this.metrics.billedMs / 1000) * ((this.options.memoryLimitInMB ?? 1024) / 1024);
  }

  get concurrency(): number {
    return this.inFlight.size;
  }

  /** What it holds now (the runner's stall report). */
  describe(): string {
    return `${this.running ? 'polling' : 'stopped'}, ${this.inFlight.size} invocations running, ${this.pendingRetries.size} releases waiting, groups in flight [${[...this.groupsInFlight.keys()].join(', ')}]`;
  }

  private get batchTarget(): BatchTarget {
    return { sqs: this.options.sqs, queueUrl: this.options.queueUrl, accounting: this.accounting };
  }

  /** Start polling (idempotent). */
  async start(): Promise<void> {
    if (this.running) return;
    this.arn ??= await this.queueArn();
    for (const c of this.observed) this.attach(c);
    this.stopping = false;
    this.running = this.loop();
  }

  /**
   * Stop polling, wait for running invocations, and release failed messages now rather
   * than after their delay. A pending long poll is aborted; whatever the server still
   * hands to it stays invisible until the visibility timeout, as with a Lambda poller
   * that goes away (on fauxqs too: the abandoned poll keeps waiting server-side).
   */
  async stop(): Promise<void> {
    this.stopping = true;
    this.poll?.abort();
    this.slotFreed?.();
    await this.running;
    this.running = undefined;
    await Promise.allSettled([...this.inFlight]);
    const releases = [...this.pendingRetries.entries()];
    this.pendingRetries.clear();
    for (const [timer] of releases) clearTimeout(timer);
    await Promise.allSettled(releases.map(([, release]) => release()));
    for (const c of this.observed) c.middlewareStack.remove(this.middlewareName);
  }

  private async loop(): Promise<void> {
    while (!this.stopping) {
      if (this.inFlight.size >= this.maxConcurrency) {
        await new Promise<void>((r) => (this.slotFreed = r));
        this.slotFreed = undefined;
        continue;
      }
      let messages: Message[];
      const t0 = performance.now();
      try {
        messages = await this.receive();
      } catch (e) {
        if (this.stopping) return;
        this.options.onError?.(e as Error, { Records: [] });
        await sleep(200); // a transient server error: do not spin
        continue;
      }
      if (messages.length === 0) {
        // A server that answers empty at once (short polling, a wake-up for a locked group) must not spin the loop.
        await sleep(performance.now() - t0 < 10 ? 10 : 0);
        continue;
      }
      const batch = this.admit(messages);
      if (batch.length === 0) continue;
      const p = this.invoke(batch).finally(() => {
        this.inFlight.delete(p);
        this.slotFreed?.();
      });
      this.inFlight.add(p);
      this.metrics.maxConcurrentSeen = Math.max(this.metrics.maxConcurrentSeen, this.inFlight.size);
    }
  }

  private async receive(): Promise<Message[]> {
    this.poll = new AbortController();
    try {
      const out = await this.options.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: this.options.queueUrl,
          MaxNumberOfMessages: this.batchSize,
          WaitTimeSeconds: this.waitTimeSeconds,
          MessageSystemAttributeNames: ['All'],
          MessageAttributeNames: ['All'],
        }),
        { abortSignal: this.poll.signal },
      );
      const messages = out.Messages ?? [];
      const bytes = messages.reduce((n, m) => n + Buffer.byteLength(m.Body ?? ''), 0);
      this.accounting.record(SQS, 'ReceiveMessage', { requests: 1, items: messages.length, bytes, estimatedReadUnits: chunks(bytes) });
      this.metrics.receives++;
      if (messages.length === 0) this.metrics.emptyReceives++;
      return messages;
    } catch (e) {
      if (!this.stopping) this.accounting.record(SQS, 'ReceiveMessage', { requests: 1, errors: 1, estimatedReadUnits: 1 });
      throw e;
    } finally {
      this.poll = undefined;
    }
  }

  /** Lock the batch's groups; a message whose group is already in flight is released unprocessed. */
  private admit(messages: Message[]): Message[] {
    const conflicts = messages.filter((m) => this.groupsInFlight.has(groupOf(m)));
    if (conflicts.length) {
      this.metrics.groupConflicts += conflicts.length;
      this.scheduleRelease(conflicts, this.options.retryDelayMs ?? 0);
    }
    const batch = messages.filter((m) => !conflicts.includes(m));
    for (const g of new Set(batch.map(groupOf))) this.groupsInFlight.set(g, (this.groupsInFlight.get(g) ?? 0) + 1);
    return batch;
  }

  private leaveGroup(group: string): void {
    const n = this.groupsInFlight.get(group);
    if (n === undefined) return;
    if (n <= 1) this.groupsInFlight.delete(group);
    else this.groupsInFlight.set(group, n - 1);
  }

  /** One invocation and the application of its result. Never throws. */
  private async invoke(batch: Message[]): Promise<void> {
    const region = this.arn!.split(':')[3] ?? 'us-east-1';
    const event: SQSEvent = { Records: batch.map((m) => sqsRecord(m, this.arn!, region)) };
    const deadline = Date.now() + this.timeoutMs;
    const context = lambdaContext(this.functionName, this.arn!, deadline, this.options.memoryLimitInMB ?? 1024);
    this.metrics.invocations++;
    this.metrics.messages += batch.length;

    let failedIds: Set<string>;
    let timedOut = false;
    for (const m of batch) this.invoking.set(m.ReceiptHandle!, undefined);
    const started = performance.now();
    try {
      const response = await withTimeout(Promise.resolve().then(() => this.options.handler(event, context)), this.timeoutMs);
      if (response === TIMEOUT) {
        timedOut = true;
        this.metrics.timeouts++;
        throw new Error(`Task timed out after ${(this.timeoutMs / 1000).toFixed(2)} seconds`);
      }
      failedIds = this.failuresOf(response, event);
    } catch (e) {
      this.metrics.errors++;
      this.options.onError?.(e as Error, event);
      failedIds = new Set(batch.map((m) => m.MessageId!));
    }
    this.metrics.billedMs += Math.ceil(Math.min(performance.now() - started, this.timeoutMs));
    // Visibility the handler set (timed out: whatever it set later is no longer seen, as its work may still run).
    const handlerSet = new Map<Message, number>();
    for (const m of batch) {
      const v = this.invoking.get(m.ReceiptHandle!);
      this.invoking.delete(m.ReceiptHandle!);
      if (v !== undefined) handlerSet.set(m, v);
    }
    // The handler is done (or abandoned after its timeout): from here SQS decides when the group's next
    // batch comes, and it may come as soon as the deletes below unlock the group.
    for (const g of new Set(batch.map(groupOf))) this.leaveGroup(g);
    this.checkFifoRule(batch, failedIds, event);
    this.metrics.failures += failedIds.size;
    const ok = batch.filter((m) => !failedIds.has(m.MessageId!));
    const failed = batch.filter((m) => failedIds.has(m.MessageId!));
    const deferred = timedOut ? [] : failed.filter((m) => handlerSet.has(m));
    this.metrics.handlerVisibility += deferred.length;
    const { undeleted, errors } = await deleteMessages(this.batchTarget, ok);
    for (const e of errors) this.options.onError?.(e, event);
    this.metrics.deleted += ok.length - undeleted.length;
    this.metrics.undeleted += undeleted.length;
    if (this.options.retryDelayMs === undefined) return;
    // Undeleted messages would come back after the whole visibility timeout (the handler is idempotent:
    // the runtime drops what it applied); with fast retries they come back as failed ones do.
    const back = [...(timedOut ? [] : failed.filter((m) => !handlerSet.has(m))), ...undeleted];
    if (back.length) this.scheduleRelease(sortedAsReceived(batch, back), this.options.retryDelayMs);
    // What the handler deferred comes back when its visibility ends, in scaled time.
    const scale = this.options.visibilityScaleMs ?? this.options.retryDelayMs / Math.max(1, this.visibilityTimeoutSeconds);
    const byDelay = new Map<number, Message[]>();
    for (const m of deferred) {
      const ms = Math.round(handlerSet.get(m)! * scale);
      byDelay.set(ms, [...(byDelay.get(ms) ?? []), m]);
    }
    for (const [ms, messages] of byDelay) this.scheduleRelease(sortedAsReceived(batch, messages), ms);
  }

  /** Lambda's reading of a batch response: the set of failed message ids. Throws when the response is invalid. */
  private failuresOf(response: unknown, event: SQSEvent): Set<string> {
    if (response === undefined || response === null) return new Set();
    const items = (response as { batchItemFailures?: unknown }).batchItemFailures;
    if (items === undefined || items === null) return new Set();
    const ids = new Set(event.Records.map((r) => r.messageId));
    const invalid = (why: string) => {
      this.metrics.invalidResponses++;
      return new Error(`invalid SQSBatchResponse, whole batch failed: ${why}`);
    };
    if (!Array.isArray(items)) throw invalid(`batchItemFailures is ${typeof items}, not an array`);
    const out = new Set<string>();
    for (const it of items) {
      const id = (it as { itemIdentifier?: unknown } | null)?.itemIdentifier;
      if (typeof id !== 'string' || id === '' || !ids.has(id)) throw invalid(`itemIdentifier ${JSON.stringify(id)} is not a messageId of the batch`);
      out.add(id);
    }
    return out;
  }

  private checkFifoRule(batch: Message[], failed: Set<string>, event: SQSEvent): void {
    const failedGroups = new Set<string>();
    for (const m of batch) {
      const g = groupOf(m);
      if (failed.has(m.MessageId!)) failedGroups.add(g);
      else if (failedGroups.has(g)) {
        this.metrics.fifoRuleViolations++;
        const batchShape = batch.map((x) => `${x.MessageId}@${groupOf(x)}${failed.has(x.MessageId!) ? '!' : ''}`).join(' ');
        this.options.onError?.(new Error(`FIFO rule broken: message ${m.MessageId} of group ${g} follows a failed one but was not reported; Lambda deletes it (batch: ${batchShape})`), event);
        return;
      }
    }
  }

  /**
   * Make messages visible again after `delayMs` (reverse order: each lands at the front of its
   * group). A release that fails is tried again, since a message left invisible holds its
   * group back for the whole visibility timeout; what still fails is reported.
   */
  private scheduleRelease(messages: Message[], delayMs: number): void {
    const release = async () => {
      const { left, why } = await releaseMessages(this.batchTarget, messages);
      if (!left) return;
      this.metrics.releaseFailures += left;
      this.options.onError?.(new Error(`ChangeMessageVisibilityBatch failed for ${left} message(s) after ${RELEASE_ATTEMPTS} attempts (${why}): they stay invisible until the visibility timeout`), { Records: [] });
    };
    const timer = setTimeout(() => {
      this.pendingRetries.delete(timer);
      void release().finally(() => this.slotFreed?.());
    }, delayMs);
    this.pendingRetries.set(timer, release);
  }

  private async queueArn(): Promise<string> {
    const out = await this.options.sqs.send(new GetQueueAttributesCommand({ QueueUrl: this.options.queueUrl, AttributeNames: ['QueueArn', 'VisibilityTimeout'] }));
    const visibility = Number(out.Attributes?.VisibilityTimeout);
    if (Number.isFinite(visibility) && visibility > 0) this.visibilityTimeoutSeconds = visibility;
    this.accounting.record(SQS, 'GetQueueAttributes', { requests: 1, estimatedReadUnits: 1 });
    const arn = out.Attributes?.QueueArn;
    if (!arn) throw new ConfigError('queueUrl', 'a queue whose attributes include QueueArn', this.options.queueUrl);
    if (!arn.endsWith('.fifo')) throw new ConfigError('queueUrl', 'a FIFO queue (name ending in .fifo)', arn);
    return arn;
  }
}

function groupOf(m: Message): string {
  return m.Attributes?.MessageGroupId ?? '';
}

function chunks(bytes: number): number {
  return Math.max(1, Math.ceil(bytes / CHUNK));
}

function intIn(field: string, v: number, min: number, max: number): number {
  if (!Number.isInteger(v) || v < min || v > max) throw new ConfigError(field, `an integer from ${min} to ${max}`, String(v));
  return v;
}

const TIMEOUT = Symbol('timeout');

/** `subset` in the order of `batch` (the order SQS gave them, per group). */
function sortedAsReceived(batch: readonly Message[], subset: readonly Message[]): Message[] {
  const want = new Set(subset);
  return batch.filter((m) => want.has(m));
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | typeof TIMEOUT> {
  let timer: NodeJS.Timeout;
  const t = new Promise<typeof TIMEOUT>((r) => (timer = setTimeout(() => r(TIMEOUT), ms)));
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
