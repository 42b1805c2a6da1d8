/**
 * A seeded redelivery storm around the real operator handlers on DynamoDB Local and
 * fauxqs: Lambda's SQS event source as it behaves at its worst, which the local event
 * source mapping (it never runs one group twice at once) cannot express, so the handlers
 * get events built from real receives (lambda-event.ts):
 *
 * - overlapping invocations of one group (a visibility timeout shorter than the
 *   processing): an invocation is held before one of its SDK calls while another container
 *   gets the same messages (receive count + 1) and finishes; the held one is released some
 *   steps later, after other invocations moved the partition on, and its answer is lost
 *   (its receipt handles expired);
 * - duplicate deliveries: a share of the batches that succeeded is delivered again later
 *   (a lost delete), mixed with other groups' duplicates, in a shuffled group order;
 * - stale warm containers: `warm` containers per stage, each with the partitions it cached,
 *   picked at random per invocation.
 *
 * Failed messages come back at once; the handler's own backoff (ChangeMessageVisibility)
 * is shortened to 0 s, as the local event source scales it. Nothing is redriven by the
 * driver: only the queues' RedrivePolicy could (at maxReceiveCount, far above what a run
 * reaches).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { ChangeMessageVisibilityBatchCommand, DeleteMessageBatchCommand, type Message, type SQSClient } from '@aws-sdk/client-sqs';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { S3Client } from '@aws-sdk/client-s3';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import type { StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { Rng } from '../../lib/nexmark/random.ts';
import { queueDepth } from '../../lib/testing/local-aws/queues.ts';
import { receive, sqsEvent } from '../aws/helpers.ts';

/** What the middleware knows of the invocation a call belongs to. */
export interface InvocationControl {
  calls: number;
  /** Hold before this call (1-based) until `release` settles. */
  readonly holdAt?: number;
  /** Or before the first call of this SDK command (e.g. 'TransactWriteItemsCommand'). */
  readonly holdBefore?: string;
  held?: boolean;
  readonly onHeld?: () => void;
  readonly release?: Promise<void>;
  /** When given, each call's command and the error it ended with (after a hold, too). */
  readonly outcomes?: { command: string; error?: string }[];
}

export const invocations = new AsyncLocalStorage<InvocationControl>();

/**
 * Adds the storm's middleware to a container's client: its calls are counted per
 * invocation and one may be held; a backoff's visibility change is shortened to 0 s.
 */
export function stormClient<T extends DynamoDBClient | SQSClient | S3Client>(c: T): T {
  (c.middlewareStack as DynamoDBClient['middlewareStack']).add(
    (next, context) => async (args) => {
      const ctl = invocations.getStore();
      if (ctl) {
        ctl.calls++;
        if (!ctl.held && (ctl.holdAt === ctl.calls || ctl.holdBefore === context.commandName)) {
          ctl.held = true;
          ctl.onHeld?.();
          await ctl.release;
        }
      }
      if (context.commandName === 'ChangeMessageVisibilityBatchCommand') {
        const input = args.input as { Entries?: { VisibilityTimeout?: number }[] };
        for (const e of input.Entries ?? []) e.VisibilityTimeout = 0;
      }
      if (!ctl?.outcomes) return next(args);
      const outcome: { command: string; error?: string } = { command: context.commandName ?? '(unnamed)' };
      ctl.outcomes.push(outcome);
      try {
        return await next(args);
      } catch (e) {
        outcome.error = (e as Error).name;
        throw e;
      }
    },
    { step: 'initialize', name: 'sluiceStorm' },
  );
  return c;
}

export type StormHandler = (event: SQSEvent) => Promise<SQSBatchResponse>;

export interface StormOptions {
  readonly seed: number;
  /** A clean client (the event source's). */
  readonly sqs: SQSClient;
  readonly queues: readonly StageQueues[];
  /** A warm container of a stage: its own handler (cached partitions) on stormClient clients. */
  readonly container: (stage: number) => StormHandler;
  readonly warm: number;
  /** Share of succeeded batches delivered again later. */
  readonly duplicateRate: number;
  /** Share of batches whose first invocation is held while a second one runs. */
  readonly overlapRate: number;
  /** A held invocation is released within this many driver steps. */
  readonly holdSteps?: number;
  readonly maxSteps?: number;
}

export interface StormStats {
  steps: number;
  invocations: number;
  /** Invocations held while another one processed the same messages. */
  overlaps: number;
  /** Held invocations that answered without failures (their commit found nothing new, or the fence sent them to reopen). */
  staleSucceeded: number;
  duplicates: number;
  /** Duplicate events that mixed groups. */
  mixedDuplicates: number;
  failedMessages: number;
}

export const withReceives = (records: readonly SQSRecord[], more: number): SQSRecord[] =>
  records.map((r) => ({ ...r, attributes: { ...r.attributes, ApproximateReceiveCount: String(Number(r.attributes.ApproximateReceiveCount ?? '1') + more) } }));

function shuffle<T>(rng: Rng, xs: T[]): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [xs[i], xs[j]] = [xs[j], xs[i]];
  }
  return xs;
}

interface Held {
  readonly stage: number;
  readonly slot: number;
  readonly releaseAt: number;
  readonly release: () => void;
  readonly done: Promise<unknown>;
}

/**
 * As the event source applies an answer: deletes what succeeded and releases the failures
 * at once (in reverse: fauxqs puts each at its group's front). No answer fails the whole
 * batch. Returns how many failed.
 */
export async function applyAnswer(sqs: SQSClient, q: StageQueues, batch: readonly Message[], answer: SQSBatchResponse | undefined): Promise<number> {
  const failed = new Set(answer ? answer.batchItemFailures.map((f) => f.itemIdentifier) : batch.map((m) => m.MessageId!));
  const done = batch.filter((m) => !failed.has(m.MessageId!));
  const back = batch.filter((m) => failed.has(m.MessageId!)).reverse();
  if (done.length) await sqs.send(new DeleteMessageBatchCommand({ QueueUrl: q.url, Entries: done.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle! })) }));
  if (back.length) await sqs.send(new ChangeMessageVisibilityBatchCommand({ QueueUrl: q.url, Entries: back.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle!, VisibilityTimeout: 0 })) }));
  return failed.size;
}

/** Runs until every queue is empty, nothing is held and no duplicate is waiting. */
export async function runStorm(o: StormOptions): Promise<StormStats> {
  const rng = new Rng(o.seed);
  const holdSteps = o.holdSteps ?? 4;
  const pools = o.queues.map((_, s) => Array.from({ length: o.warm }, () => o.container(s)));
  const stats: StormStats = { steps: 0, invocations: 0, overlaps: 0, staleSucceeded: 0, duplicates: 0, mixedDuplicates: 0, failedMessages: 0 };
  const held: Held[] = [];
  const duplicates: { stage: number; records: SQSRecord[] }[] = [];
  const busy = (stage: number) => new Set(held.filter((h) => h.stage === stage).map((h) => h.slot));
  const freeSlot = (stage: number, except?: number): number | undefined => {
    const taken = busy(stage);
    const free = pools[stage].map((_, i) => i).filter((i) => !taken.has(i) && i !== except);
    return free.length ? free[rng.int(free.length)] : undefined;
  };
  const invoke = (stage: number, slot: number, records: SQSRecord[], ctl: InvocationControl = { calls: 0 }) => {
    stats.invocations++;
    return invocations.run(ctl, () => pools[stage][slot]({ Records: records }));
  };
  const apply = async (q: StageQueues, batch: readonly Message[], answer: SQSBatchResponse | undefined): Promise<boolean> => {
    const failed = await applyAnswer(o.sqs, q, batch, answer);
    stats.failedMessages += failed;
    return failed === 0;
  };
  const settle = (p: Promise<SQSBatchResponse>) => p.then((a) => a, () => undefined);

  let quietChecks = 0;
  for (;;) {
    if (++stats.steps > (o.maxSteps ?? 5_000)) throw new Error(`storm seed ${o.seed}: not drained after ${o.maxSteps ?? 5_000} steps (${JSON.stringify(stats)})`);
    for (const h of held.filter((x) => x.releaseAt <= stats.steps)) {
      h.release();
      const answer = await h.done;
      if (answer && (answer as SQSBatchResponse).batchItemFailures.length === 0) stats.staleSucceeded++;
      held.splice(held.indexOf(h), 1);
    }
    let progressed = false;
    const order = shuffle(rng, o.queues.map((_, s) => s));
    for (const s of order) {
      const q = o.queues[s];
      const batch = await receive(o.sqs, q.url);
      if (!batch.length) continue;
      progressed = true;
      const records = sqsEvent(batch, q.arn).Records;
      const first = freeSlot(s)!;
      let answer: SQSBatchResponse | undefined;
      if (rng.double() < o.overlapRate && busy(s).size < o.warm - 1) {
        let heldNow!: () => void;
        const isHeld = new Promise<'held'>((r) => (heldNow = () => r('held')));
        let release!: () => void;
        const released = new Promise<void>((r) => (release = r));
        const done = settle(invoke(s, first, records, { calls: 0, holdAt: 1 + rng.int(12), onHeld: heldNow, release: released }));
        const got = await Promise.race([isHeld, done]);
        if (got === 'held') {
          stats.overlaps++;
          held.push({ stage: s, slot: first, releaseAt: stats.steps + 1 + rng.int(holdSteps), release, done });
          answer = await settle(invoke(s, freeSlot(s, first)!, withReceives(records, 1)));
        } else {
          answer = got;
        }
      } else {
        answer = await settle(invoke(s, first, records));
      }
      const ok = await apply(q, batch, answer);
      if (ok && rng.double() < o.duplicateRate) {
        stats.duplicates++;
        duplicates.push({ stage: s, records: withReceives(records, 1) });
      }
    }
    // Duplicates, late and across groups: one or two of a stage in one event, groups shuffled.
    while (duplicates.length && (rng.double() < 0.5 || !progressed)) {
      const [d] = duplicates.splice(rng.int(duplicates.length), 1);
      const records = [...d.records];
      const mate = duplicates.findIndex((x) => x.stage === d.stage);
      if (mate >= 0 && rng.double() < 0.5) {
        records.push(...duplicates.splice(mate, 1)[0].records);
        stats.mixedDuplicates++;
      }
      const groups = shuffle(rng, [...new Set(records.map((r) => r.attributes.MessageGroupId))]);
      const mixed = groups.flatMap((g) => records.filter((r) => r.attributes.MessageGroupId === g));
      const slot = freeSlot(d.stage);
      if (slot === undefined) {
        duplicates.push(d);
        break;
      }
      await settle(invoke(d.stage, slot, mixed.slice(0, 10)));
      progressed = true;
    }
    if (progressed || held.length || duplicates.length) {
      quietChecks = 0;
      continue;
    }
    // Nothing received: drained once no message is in flight or delayed either, twice in a row.
    let quiet = true;
    for (const q of o.queues) {
      const depth = await queueDepth(o.sqs, q.url);
      quiet &&= !depth.visible && !depth.inFlight && !depth.delayed;
    }
    if (quiet && ++quietChecks >= 2) return stats;
    if (!quiet) quietChecks = 0;
    await new Promise((r) => setTimeout(r, 50));
  }
}
