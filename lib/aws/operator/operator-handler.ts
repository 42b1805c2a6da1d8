/**
 * The operator function: one SQS FIFO batch of one stage -> the runtime core -> outputs.
 *
 * Per message group (= partition), in the order SQS gave the messages:
 *   1. decode every message into envelopes (channel envelopes, or an ingest message as a
 *      source envelope whose offset is the SQS SequenceNumber);
 *   2. take the partition's batch runner (lib/runtime/batch-runner.ts), whose runtime is
 *      cached across warm invocations; a new one first delivers, then clears, the outbox a
 *      crashed predecessor committed but did not deliver;
 *   3. run all envelopes of the group as one batch: one commit (DynamoDB transaction:
 *      state, progress, outbox), then the outbox delivered (envelopes to the downstream
 *      stage queues, sink batches to the sinks, dead letters to the stage's DLQ, then the
 *      barrier acks) and cleared.
 * Checkpoints (checkpointStore set): a barrier message in a source queue decodes into a
 * barrier envelope; once aligned, the partition writes its snapshot object to the store
 * (S3) in the commit, and its `ack` outbox entry is recorded (DynamoDbAckStore, create-only)
 * after everything before it in the outbox was delivered.
 * The group's messages succeed only after step 4, so a crash anywhere redelivers them;
 * the runtime drops what it already applied (per-channel high-water marks and offsets).
 *
 * Failures follow the FIFO rule: the first failed message and every later message of
 * its group are reported in batchItemFailures; other groups are independent. The batch
 * runner counts attempts and keeps the skip list; this handler maps them onto messages.
 * - User code throws on a record (RecordFailedError with its location): the messages
 *   before it are committed in a second pass and succeed; its message and the rest fail
 *   and come back. Attempts are counted per record (record-attempts.ts); at the
 *   maxAttempts-th failure, or when the message reaches the queue's maxReceiveCount
 *   (SQS would move the whole message to the DLQ next), the record is passed as `skip`:
 *   it is committed as a dead letter with its error and the rest of the group proceeds,
 *   in order. A record that reached maxAttempts but whose message a later failure held
 *   back is parked at the next receive without running again (its count is kept until
 *   its dead letter is committed).
 * - A timer or watermark callback throws (its location names the operator, the timer or
 *   watermark, and the envelope whose watermark fired it): the same, counted per callback,
 *   from that envelope's message; a processing-time timer (no envelope), and a record of
 *   an envelope held behind a barrier (from the committed progress, not a message), fail
 *   the whole group until parked. A parked timer counts as consumed.
 * - A stale cached runtime (another container moved the partition on) fails with
 *   CommitConflictError or a sequence InvariantError: reopen and retry once.
 * - Anything else (throttling, timeouts, a stale runtime that fails again, a spilled
 *   envelope S3 does not serve) fails the whole group, which backs off (group-backoff.ts):
 *   its messages' visibility is set from their receive count, so an outage does not
 *   burn receives toward the DLQ, and a group near the receive limit stalls in the queue
 *   with an error and the `stalledPartitions` metric instead of being moved. Only a
 *   message that cannot be decoded is left to SQS's redrive.
 *
 * Not Powertools' batch utility: its FIFO processor runs a handler per message, while we
 * commit once per group (the cost of a batch is one transaction, not ten) and must re-run
 * a group with a record skipped. Logger and metrics are Powertools'.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { S3Client } from '@aws-sdk/client-s3';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { Logger } from '@aws-lambda-powertools/logger';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import type { Sink } from '../../api/sinks.ts';
import type { Job } from '../../api/stream.ts';
import { type Clock, systemClock } from '../../api/types.ts';
import type { BlobStore } from '../../checkpoint/storage.ts';
import { CommitConflictError, ConfigError, InvariantError } from '../../errors.ts';
import { compile, type PhysicalPlan } from '../../graph/compile.ts';
import { type BatchOutcome, BatchRunner } from '../../runtime/batch-runner.ts';
import { failedEnvelope, type FailureLocation, type ParkedFailure, PartitionRuntime } from '../../runtime/partition.ts';
import type { PartitionScope, StateBackend } from '../../state/backend.ts';
import { type BarrierAck, channelRecords, type Envelope } from '../../transport/envelope.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import { DynamoDbAckStore } from '../checkpoint/checkpoint-acks.ts';
import { planFingerprint } from '../../checkpoint/fingerprint.ts';
import { DynamoDbPointerStore } from '../dynamodb/dynamodb-pointers.ts';
import { PlanGuard } from './plan-guard.ts';
import { DynamoDbStateBackend } from '../dynamodb/dynamodb-state.ts';
import { DynamoDbTable } from '../dynamodb/dynamodb-table.ts';
import { AwsInputLog } from './input-log.ts';
import { replayChunks, replayEnvelopes } from '../restore/restore-replay.ts';
import { stageOfQueue, stateTableName } from '../naming.ts';
import { countIncident, groupLag, type HandlerMetrics, OPERATOR_METRICS, stageDimension } from '../handler-metrics.ts';
import { backoffFor, changeVisibility, DEFAULT_MAX_RECEIVE_COUNT, type GroupBackoffOptions, receivesOf, resolveGroupBackoff } from './group-backoff.ts';
import { RecordAttempts } from './record-attempts.ts';
import { AwsOutbox } from './outbox-ports.ts';
import { WAKE_BODY } from '../sqs/sqs-codec.ts';
import { NamedQueues, type QueueResolver } from '../sqs/sqs-queues.ts';
import { SqsTransport } from '../sqs/sqs-transport.ts';
import { MessageDecodeError } from '../transport-errors.ts';

export interface OperatorHandlerConfig {
  readonly job: Job;
  /** The stage this function runs; default: from each record's eventSourceARN (naming.ts). */
  readonly stage?: number;
  readonly sqs: SQSClient;
  readonly dynamodb: DynamoDBClient;
  /** Default `sluice-${job}`. */
  readonly tableName?: string;
  /** Default: the job's queues by name. */
  readonly queues?: QueueResolver;
  readonly queuePrefix?: string;
  /** For envelopes too large for one message (claim check), and outboxes too large to keep in the state table. */
  readonly blobs?: BlobStore;
  /** For AWS sinks (S3 files): the client and the job's bucket (SLUICE_BUCKET). @default - a client from the SDK's configuration, no bucket */
  readonly s3?: S3Client;
  readonly bucket?: string;
  /** Sinks by name; default the job's own. Injected sinks are opened and closed by the caller. */
  readonly sinks?: Readonly<Record<string, Sink<any>>>;
  readonly clock?: Clock;
  readonly accounting?: AwsAccounting;
  /** Failures of one record before it is parked as a dead letter (default 3). */
  readonly maxAttempts?: number;
  /**
   * The stage queues' redrive maxReceiveCount (default DEFAULT_MAX_RECEIVE_COUNT, 100, as
   * infra/stages.ts sets it); must exceed maxAttempts. A failing record is parked at this
   * receive, and a group failing on the infrastructure stalls before it.
   */
  readonly maxReceiveCount?: number;
  /** How a group that failed on the infrastructure backs off and when it stalls (group-backoff.ts). */
  readonly backoff?: GroupBackoffOptions;
  readonly maxMessageBytes?: number;
  readonly compress?: boolean;
  /**
   * Checkpoints: where partitions write snapshot objects (keys `${job}/snapshots/...`, so a
   * store without prefix on the snapshot bucket). Without it a barrier fails the batch.
   */
  readonly checkpointStore?: BlobStore;
  /**
   * Where checkpoint barrier acknowledgements go (the coordinator), after what precedes
   * them; default with checkpointStore: DynamoDbAckStore on the table, else dropped with a warning.
   * @internal
   */
  readonly onBarrierAcks?: (acks: readonly BarrierAck[]) => Promise<void>;
  /**
   * Logged input (input-log.ts): source partitions write the records each commit consumed
   * to checkpointStore, named in the commit, so a restore can replay what SQS deleted.
   * Default: on with checkpointStore and the default backend (an injected backend needs
   * its own inputLogStore).
   */
  readonly logInput?: boolean;
  /** Default: DynamoDbStateBackend on tableName. @internal */
  readonly backend?: StateBackend;
  readonly logger?: Logger;
  readonly metrics?: HandlerMetrics;
}

export interface OperatorHandler {
  (event: SQSEvent, context?: Context): Promise<SQSBatchResponse>;
  readonly plan: PhysicalPlan;
  readonly accounting: AwsAccounting;
  /** The SQS transport the handler sends envelopes with. @internal */
  readonly transport: SqsTransport;
}

/** Passes over one group before giving up on parking (each pass re-runs the group). */
const MAX_PASSES = 50;

export function createOperatorHandler(config: OperatorHandlerConfig): OperatorHandler {
  const plan = compile(config.job.graph);
  const job = plan.job.name;
  const accounting = config.accounting ?? new AwsAccounting();
  const tableName = config.tableName ?? stateTableName(job);
  const checkpointStore = config.checkpointStore;
  const logInput = config.logInput ?? (checkpointStore !== undefined && config.backend === undefined);
  if (logInput && !checkpointStore) throw new ConfigError('logInput', 'a checkpointStore to write the input log to', 'no checkpointStore');
  const backend = config.backend ?? new DynamoDbStateBackend({ client: config.dynamodb, tableName, accounting, blobs: config.blobs, inputLogStore: logInput ? checkpointStore : undefined });
  const queues = config.queues ?? new NamedQueues(config.sqs, job, config.queuePrefix, accounting);
  const transport = new SqsTransport({ sqs: config.sqs, job, queues, accounting, blobs: config.blobs, maxMessageBytes: config.maxMessageBytes, compress: config.compress });
  const attemptsLog = new RecordAttempts(config.dynamodb, tableName, accounting);
  const clock = config.clock ?? systemClock;
  const maxAttempts = config.maxAttempts ?? 3;
  const maxReceiveCount = config.maxReceiveCount ?? DEFAULT_MAX_RECEIVE_COUNT;
  if (!(maxAttempts >= 1 && maxAttempts < maxReceiveCount)) {
    throw new ConfigError('maxAttempts', `an integer from 1 to maxReceiveCount - 1 (${maxReceiveCount - 1}), so records are parked before SQS moves whole messages to the DLQ`, String(maxAttempts));
  }
  // A small test queue (maxReceiveCount 10) keeps one receive in reserve; the default queue ten.
  const backoff = resolveGroupBackoff({ stallReserve: Math.max(1, Math.min(10, Math.floor(maxReceiveCount / 10))), ...config.backoff }, maxReceiveCount);
  const log = config.logger;
  const metrics = config.metrics;
  const recordAcks = config.onBarrierAcks ?? (checkpointStore ? ackRecorder(new DynamoDbAckStore({ client: config.dynamodb, tableName, job, accounting })) : undefined);

  // With checkpoints: nothing is opened under another plan than the state's (plan-guard.ts).
  const planGuard = checkpointStore ? new PlanGuard(new DynamoDbPointerStore({ client: config.dynamodb, tableName, job, accounting }), planFingerprint(plan)) : undefined;

  const outbox = new AwsOutbox({ plan, transport, sinks: config.sinks, binding: { job, s3: config.s3, dynamodb: config.dynamodb, bucket: config.bucket, tableName, accounting }, recordAcks, log, metrics });

  /** Warm partitions: their runtimes are reused while no other container commits to them (the version fence checks). */
  const runners = new Map<string, BatchRunner>();

  function runnerFor(stage: number, partition: number): BatchRunner {
    const id = `${stage}/${partition}`;
    let runner = runners.get(id);
    if (!runner) {
      const scope: PartitionScope = { job, stage, partition };
      const logged = logInput && plan.stages[stage].inputs.some((e) => plan.edges[e].from.kind === 'source');
      runner = new BatchRunner({
        open: async () => {
          await planGuard?.check();
          const rt = await PartitionRuntime.open({ plan, stage, partition, backend, clock, checkpointStore, logInput: logged });
          if (rt.recoveredOutbox.length) log?.info('delivering a recovered outbox', { stage, partition, entries: rt.recoveredOutbox.length });
          return rt;
        },
        outbox: outbox.portsFor(scope),
        attempts: attemptsLog.of(scope),
        maxAttempts,
      });
      runners.set(id, runner);
    }
    return runner;
  }

  let inputLog: AwsInputLog | undefined;
  async function replayFor(rt: PartitionRuntime): Promise<Envelope[][]> {
    const pending = rt.pendingReplay;
    if (!pending.length) return [];
    if (!checkpointStore) throw new ConfigError('checkpointStore', `the bucket of the input log, to replay what an in-place restore left on ${rt.scope.stage}#${rt.scope.partition}`, 'none');
    inputLog ??= new AwsInputLog(new DynamoDbTable(config.dynamodb, tableName, accounting), checkpointStore);
    const envelopes = await replayEnvelopes(plan, rt.scope, pending, inputLog);
    log?.info('replaying the input log after an in-place restore', { stage: rt.scope.stage, partition: rt.scope.partition, records: envelopes.reduce((n, e) => n + e.records.length, 0) });
    return replayChunks(envelopes);
  }

  /**
   * Process one group's messages; returns the ids of the messages that failed (a suffix),
   * and for a failure that was not the messages' own (not user code, not an undecodable
   * message), its error: the group then backs off.
   * `replayUntil`: a replay after an in-place restore stops there (ms since epoch) and goes on in the next invocation.
   */
  async function processGroup(stage: number, records: readonly SQSRecord[], replayUntil: number): Promise<{ failed: string[]; infra?: string }> {
    const ids = () => records.map((r) => r.messageId);
    const all = () => ({ failed: ids() });
    const infra = (e: unknown) => ({ failed: ids(), infra: (e as Error).message });
    const groupId = records[0].attributes.MessageGroupId ?? '';
    const partition = Number(groupId);
    // Empty messages (sqs-codec.ts WAKE_BODY) need no partition: a local poll flush uses a group that is none.
    if (records.every((r) => r.body === WAKE_BODY) && !/^(0|[1-9]\d*)$/.test(groupId)) return { failed: [] };
    if (!/^(0|[1-9]\d*)$/.test(groupId) || partition >= plan.stages[stage].parallelism) {
      log?.error('message group is not a partition of the stage', { stage, groupId, parallelism: plan.stages[stage].parallelism });
      return all();
    }
    const scope: PartitionScope = { job, stage, partition };
    const decoded: Envelope[][] = [];
    /** A message that could not be read for a reason of the infrastructure (a spilled envelope S3 did not serve). */
    let unread: string | undefined;
    for (const r of records) {
      try {
        decoded.push(await transport.decode(plan, stage, r));
      } catch (e) {
        if (e instanceof MessageDecodeError) log?.error('cannot decode message; it stays in the queue until SQS moves it to the DLQ', { messageId: r.messageId, error: e.message });
        else unread = (e as Error).message;
        break;
      }
    }
    if (unread !== undefined && decoded.length === 0) return { failed: ids(), infra: unread };
    const messageOf = new Map<string, number>();
    decoded.forEach((envs, i) => {
      for (const e of envs) messageOf.set(`${e.channel}#${e.seq}`, i);
    });
    const skip = new Map<string, ParkedFailure>();
    // Counted per committed batch; published only when some were dropped (a metric costs by the hours it is published).
    const countLate = (byOperator: Readonly<Record<string, number>>) => {
      let n = 0;
      for (const k in byOperator) n += byOperator[k];
      if (n > 0) metrics?.addMetric(OPERATOR_METRICS.lateDropped, MetricUnit.Count, n);
    };
    // A redelivered group may hold records tried maxAttempts times whose parking a later
    // failure held back: park them without running their user code again.
    if (records.some((r) => Number(r.attributes.ApproximateReceiveCount ?? '1') > 1)) {
      try {
        for (const [id, f] of await attemptsLog.parkable(scope, maxAttempts)) skip.set(id, f);
      } catch (err) {
        return infra(err); // backOff logs it
      }
    }
    // A record, or a callback fired by an envelope's watermark, fails from its message on. A
    // processing-time timer fires at the end of any batch, and an envelope held behind a
    // barrier comes from the partition's committed progress (applied when the barrier
    // aligns, in whichever message completes it): they fail the group as a whole.
    const messageAt = (l: FailureLocation) => {
      const at = failedEnvelope(l);
      return (at && messageOf.get(`${at.channel}#${at.seq}`)) ?? 0;
    };
    const receivesAt = (l: FailureLocation) => Number(records[messageAt(l)].attributes.ApproximateReceiveCount ?? '1');
    // At the queue's receive limit SQS would move the whole message to the DLQ next: park now.
    const atReceiveLimit = (l: FailureLocation) => receivesAt(l) >= maxReceiveCount;
    const runner = runnerFor(stage, partition);
    let end = decoded.length;
    let staleRetry = true;
    for (let pass = 0; end > 0 && pass < MAX_PASSES; pass++) {
      const cached = runner.isOpen;
      let out: BatchOutcome | undefined;
      let replay: Envelope[][] = [];
      try {
        replay = await replayFor(await runner.ready());
      } catch (e) {
        runner.discard();
        out = { ok: false, error: e, retryable: false };
      }
      // After an in-place restore: the input log's records first (restore-replay.ts), committed in chunks, so a
      // replay longer than one invocation still progresses; they count as the first message's.
      for (const [i, chunk] of replay.entries()) {
        if (i > 0 && Date.now() > replayUntil) {
          // Half the invocation's time is spent: the group comes back (its messages after the replay, in order).
          log?.info('the input log replay goes on in the next invocation', { stage, partition });
          return all();
        }
        for (const e of chunk) messageOf.set(`${e.channel}#${e.seq}`, 0);
        out = await runner.run(chunk, skip, atReceiveLimit);
        if (!out.ok) break;
        countLate(out.result.lateDropped);
      }
      if (out === undefined || out.ok) {
        out = await runner.run(decoded.slice(0, end).flat(), skip, atReceiveLimit);
        if (out.ok) {
          const result = out.result;
          metrics?.addMetric(OPERATOR_METRICS.recordsIn, MetricUnit.Count, result.recordsIn);
          metrics?.addMetric(OPERATOR_METRICS.recordsOut, MetricUnit.Count, channelRecords(result.outbox));
          metrics?.addMetric(OPERATOR_METRICS.duplicatesDropped, MetricUnit.Count, result.duplicatesDropped);
          countLate(result.lateDropped);
          const failed = records.slice(end).map((r) => r.messageId);
          // The messages behind one S3 did not serve back off; an undecodable one goes its way to the DLQ.
          return unread !== undefined && end === decoded.length && failed.length ? { failed, infra: unread } : { failed };
        }
      }
      const at = out.failed;
      if (at) {
        if (at.attempts === undefined) {
          log?.error('cannot count the attempts of a failing record; the group backs off', { stage, partition, location: at.id, error: (out.error as Error).message });
          return infra(out.error);
        }
        log?.warn('user code failed', { stage, partition, location: at.id, attempts: at.attempts, receives: receivesAt(at.location), error: at.failure.error });
        if (!at.parked) end = messageAt(at.location); // commit what precedes it; it and the rest come back
        continue;
      }
      if (cached && staleRetry && (out.error instanceof CommitConflictError || out.error instanceof InvariantError)) {
        staleRetry = false;
        log?.info('cached partition was stale; reopening', { stage, partition, error: (out.error as Error).message });
        continue;
      }
      metrics?.addMetric(OPERATOR_METRICS.groupFailures, MetricUnit.Count, 1);
      return infra(out.error);
    }
    return all();
  }

  /**
   * A group failed on the infrastructure: its failed messages come back after a backoff of
   * their receive count instead of the visibility timeout; near the receive limit the group
   * stalls (group-backoff.ts). Never throws: without the change they come back as before.
   */
  async function backOff(stage: number, failed: readonly SQSRecord[], error: string): Promise<void> {
    if (!failed.length) return;
    const partition = failed[0].attributes.MessageGroupId ?? '';
    const d = backoffFor(receivesOf(failed), maxReceiveCount, backoff, `${stage}/${partition}`);
    let outcome;
    try {
      outcome = await changeVisibility(config.sqs, await queues.queueUrl(stage), failed, d.seconds, accounting);
    } catch (e) {
      outcome = { changed: 0, failures: [(e as Error).message] };
    }
    const fields = { stage, partition, messages: failed.length, receives: d.receives, maxReceiveCount, visibilitySeconds: d.seconds, error, ...(outcome.failures.length ? { visibilityNotChanged: failed.length - outcome.changed, visibilityError: outcome.failures[0] } : {}) };
    if (d.stalled) {
      log?.error('partition stalled: its group keeps failing on the infrastructure and is near the queue\'s receive limit; it stays in the queue and is tried again after visibilitySeconds. Resolve the cause: SQS moves it to the DLQ after maxReceiveCount receives', fields);
      countIncident(metrics, OPERATOR_METRICS.stalledPartitions, stage, partition);
    } else {
      log?.warn('batch failed on the infrastructure; the group backs off', fields);
    }
    countIncident(metrics, OPERATOR_METRICS.groupRetries, stage, partition);
  }

  const handler = async (event: SQSEvent, context?: Context): Promise<SQSBatchResponse> => {
    const replayUntil = context ? Date.now() + context.getRemainingTimeInMillis() / 2 : Number.POSITIVE_INFINITY;
    if (context) log?.addContext(context);
    const first = event.Records[0];
    const invocationStage = first && (config.stage ?? stageOfQueue(job, first.eventSourceARN, config.queuePrefix));
    if (invocationStage !== undefined) stageDimension(metrics, invocationStage);
    metrics?.addMetric(OPERATOR_METRICS.messages, MetricUnit.Count, event.Records.length);
    const groups = new Map<string, SQSRecord[]>();
    for (const r of event.Records) {
      const key = `${r.eventSourceARN}\u0000${r.attributes.MessageGroupId ?? ''}`;
      const g = groups.get(key);
      if (g) g.push(r);
      else groups.set(key, [r]);
    }
    try {
      const failed = await Promise.all(
        [...groups.values()].map((records) => {
          const stage = config.stage ?? stageOfQueue(job, records[0].eventSourceARN, config.queuePrefix);
          if (stage === undefined || !plan.stages[stage]) {
            throw new ConfigError('event source queue', `a stage queue of job ${job} (naming.ts), or the handler's stage option`, records[0].eventSourceARN);
          }
          const lag = groupLag(records, clock.now());
          if (lag !== undefined) metrics?.addMetric(OPERATOR_METRICS.lag, MetricUnit.Milliseconds, lag);
          return processGroup(stage, records, replayUntil).then(async (r) => {
            if (r.infra !== undefined) await backOff(stage, records.filter((x) => r.failed.includes(x.messageId)), r.infra);
            return r.failed;
          });
        }),
      );
      return { batchItemFailures: failed.flat().map((itemIdentifier) => ({ itemIdentifier })) };
    } finally {
      metrics?.publishStoredMetrics();
    }
  };
  return Object.assign(handler, { plan, accounting, transport });
}

function ackRecorder(store: DynamoDbAckStore): (acks: readonly BarrierAck[]) => Promise<void> {
  return (acks) => store.put(acks);
}
