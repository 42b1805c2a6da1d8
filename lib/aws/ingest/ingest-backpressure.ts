/**
 * When the ingest function holds a stream back (429 + Retry-After): while the queue of its
 * source stage, or of any stage it feeds, holds more than `maxBacklogMessages`
 * (ApproximateNumberOfMessages, read at most once per `backlogCacheMs` per stage), or, with
 * an age bound and a QueueAgeSource, while the oldest message of one of those queues is
 * older than `maxQueueAgeMs` (read at most once per `queueAgeCacheMs`). A slow stage
 * downstream then stops ingestion instead of growing its queue towards SQS's retention.
 * Back-pressure is advisory: a depth or age that cannot be read holds nothing back.
 */
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { Logger } from '@aws-lambda-powertools/logger';
import type { Clock } from '../../api/types.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import type { AwsAccounting } from '../cost/accounting.ts';
import { type QueueResolver, queueBacklog } from '../sqs/sqs-queues.ts';
import { queueNameOf } from '../naming.ts';
import type { QueueAgeSource } from './queue-age.ts';

export const DEFAULT_MAX_BACKLOG_MESSAGES = 10_000;

export interface BackPressureOptions {
  /** 429 above this many messages waiting in the queue of the source stage or of a stage it feeds. @default 10,000 */
  readonly maxBacklogMessages?: number;
  /** @default 1000 */
  readonly backlogCacheMs?: number;
  /** 429 while the oldest message of one of those queues is older than this (needs `queueAge`). @default - no age bound */
  readonly maxQueueAgeMs?: number;
  /** Where the ages come from (CloudWatchQueueAge). */
  readonly queueAge?: QueueAgeSource;
  /** @default 60,000 (CloudWatch has one point a minute) */
  readonly queueAgeCacheMs?: number;
}

/** Why a stream is held back: the first stage over a bound, and the bound. */
export interface HeldBack {
  readonly stage: number;
  readonly reason: string;
}

export class IngestBackPressure {
  private readonly depth = new Map<number, { at: number; messages: number }>();
  /** Seconds by stage, as last read. */
  private ages?: { at: number; seconds: ReadonlyMap<number, number> };
  private readonly fedBy = new Map<number, number[]>();
  private readonly maxMessages: number;

  constructor(
    private readonly plan: PhysicalPlan,
    private readonly sqs: SQSClient,
    private readonly queues: QueueResolver,
    private readonly clock: Clock,
    private readonly o: BackPressureOptions & { readonly accounting?: AwsAccounting; readonly logger?: Logger },
  ) {
    this.maxMessages = o.maxBacklogMessages ?? DEFAULT_MAX_BACKLOG_MESSAGES;
    if (o.maxQueueAgeMs !== undefined && !(o.maxQueueAgeMs > 0)) throw new RangeError(`maxQueueAgeMs: expected a positive number of milliseconds, received ${o.maxQueueAgeMs}`);
  }

  /** The stages a source stage feeds, itself first: their queues hold its input back. */
  downstreamOf(stage: number): number[] {
    let out = this.fedBy.get(stage);
    if (!out) {
      const seen = new Set<number>([stage]);
      const todo = [stage];
      while (todo.length) {
        for (const e of this.plan.stages[todo.pop()!].outputs) {
          const to = this.plan.edges[e].toStage;
          if (!seen.has(to)) todo.push(to), seen.add(to);
        }
      }
      this.fedBy.set(stage, (out = [...seen]));
    }
    return out;
  }

  /** The first stage fed by `stage` (or itself) over a bound; undefined when none is. */
  async heldBack(stage: number): Promise<HeldBack | undefined> {
    const stages = this.downstreamOf(stage);
    for (const s of stages) {
      const messages = await this.waitingMessages(s);
      if (messages !== undefined && messages > this.maxMessages) return { stage: s, reason: `has ${messages} messages waiting (bound ${this.maxMessages})` };
    }
    if (this.o.maxQueueAgeMs === undefined || !this.o.queueAge) return undefined;
    const ages = await this.agesOf();
    for (const s of stages) {
      const seconds = ages.get(s);
      if (seconds !== undefined && seconds * 1000 > this.o.maxQueueAgeMs) {
        // CloudWatch lags: an emptied queue may still show its old age, so a queue with nothing waiting holds nothing back.
        if (((await this.waitingMessages(s)) ?? 0) > 0) return { stage: s, reason: `has had a message waiting ${Math.round(seconds)} s (bound ${Math.round(this.o.maxQueueAgeMs / 1000)} s)` };
      }
    }
    return undefined;
  }

  /** Messages waiting in the stage's queue (cached for backlogCacheMs); undefined when unreadable. */
  async waitingMessages(stage: number): Promise<number | undefined> {
    let hit = this.depth.get(stage);
    if (!hit || this.clock.now() - hit.at >= (this.o.backlogCacheMs ?? 1000)) {
      try {
        hit = { at: this.clock.now(), messages: await queueBacklog(this.sqs, await this.queues.queueUrl(stage), this.o.accounting) };
        this.depth.set(stage, hit);
      } catch (e) {
        this.o.logger?.warn('cannot read the queue backlog', { stage, error: (e as Error).message });
        return undefined;
      }
    }
    return hit.messages;
  }

  /** How long the oldest message of the stage's queue has waited, ms (cached for queueAgeCacheMs); undefined without an age source or a reading. */
  async oldestAgeMs(stage: number): Promise<number | undefined> {
    if (!this.o.queueAge) return undefined;
    const seconds = (await this.agesOf()).get(stage);
    return seconds === undefined ? undefined : seconds * 1000;
  }

  /** Every queue of the job in one call, cached (streams share stages); a failed read counts as no ages until the next. */
  private async agesOf(): Promise<ReadonlyMap<number, number>> {
    const now = this.clock.now();
    if (this.ages && now - this.ages.at < (this.o.queueAgeCacheMs ?? 60_000)) return this.ages.seconds;
    const seconds = new Map<number, number>();
    try {
      const names = await Promise.all(this.plan.stages.map(async (st) => queueNameOf(await this.queues.queueUrl(st.id))));
      const byName = await this.o.queueAge!.oldestAgeSeconds(names);
      this.plan.stages.forEach((st, i) => byName.has(names[i]) && seconds.set(st.id, byName.get(names[i])!));
    } catch (e) {
      this.o.logger?.warn('cannot read the queue ages', { error: (e as Error).message });
    }
    this.ages = { at: now, seconds };
    return seconds;
  }
}
