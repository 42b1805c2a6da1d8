/**
 * Opt-in load shedding in the ingest function (SourceOptions.shed): the embedded endpoint's
 * policy (lib/transport/load-shedding.ts) under the pressure this function can see of the
 * stream's source stage:
 * - queued records: the messages waiting in its queue (IngestBackPressure's cached
 *   reading) times the events per message this container has packed for that stage (1
 *   before it packed any). SQS counts messages, and each message carries many events;
 * - lag: the age of its oldest message, with a QueueAgeSource (CloudWatch: a minute or two
 *   late, so `whenLagMs` acts on a stage that stays behind). A queue with nothing waiting
 *   has no lag, whatever age CloudWatch still reports.
 * The sampler's count of events seen while shedding is per container, as the embedded
 * endpoint's is per process. What a request sheds is kept with its Idempotency-Key's claim
 * before it sends (ingest-handler.ts), so that a resend sends exactly what it sent.
 */
import type { SourceDef } from '../../api/sources.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import { overShedBounds, type ShedDecision, shedEvents } from '../../transport/load-shedding.ts';
import type { IngestBackPressure } from './ingest-backpressure.ts';

export class IngestShedding {
  /** Per stream, events the sampler saw while shedding. */
  private readonly seen = new Map<string, number>();
  /** Per stage, the events and messages this container sent it. */
  private readonly packed = new Map<number, { events: number; messages: number }>();

  constructor(private readonly backPressure: IngestBackPressure) {}

  /** A request's messages to `stage` and the events they carried. */
  sent(stage: number, events: number, messages: number): void {
    const p = this.packed.get(stage) ?? { events: 0, messages: 0 };
    this.packed.set(stage, { events: p.events + events, messages: p.messages + messages });
  }

  /** Records the stage's queue holds, estimated from its waiting messages. */
  async queuedRecords(stage: number): Promise<number> {
    const waiting = (await this.backPressure.waitingMessages(stage)) ?? 0;
    const p = this.packed.get(stage);
    return waiting * (p && p.messages > 0 ? Math.max(1, p.events / p.messages) : 1);
  }

  /** What of `events` the stream sheds now: undefined without a policy, or under its bounds. */
  async decide(stream: string, def: SourceDef<any>, stage: number, events: readonly unknown[]): Promise<ShedDecision | undefined> {
    const policy = def.shed;
    if (!policy || events.length === 0) return undefined;
    const queuedRecords = await this.queuedRecords(stage);
    const age = policy.whenLagMs === undefined || queuedRecords === 0 ? undefined : await this.backPressure.oldestAgeMs(stage);
    if (!overShedBounds(policy, { queuedRecords, lagMs: age ?? 0 })) return undefined;
    const seen = this.seen.get(stream) ?? 0;
    this.seen.set(stream, seen + events.length);
    return shedEvents(policy, events, seen);
  }
}

/** Whether an ingestion stream of the plan sheds by lag: the ingest function then reads queue ages (CloudWatch). */
export function shedsByQueueAge(plan: PhysicalPlan): boolean {
  return plan.job.sources().some((n) => n.spec.kind === 'source' && n.spec.source.binding.kind === 'ingest' && n.spec.source.shed?.whenLagMs !== undefined);
}
