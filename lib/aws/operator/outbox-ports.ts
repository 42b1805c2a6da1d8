/**
 * Where a partition's committed outbox goes on AWS (the ports of
 * lib/runtime/batch-runner-outbox.ts): channel envelopes to the downstream stage queues,
 * dead letters to the stage's DLQ, sink deliveries to the job's sinks (bound to this
 * function's clients; the job's own are opened at their first delivery), barrier acks to
 * the coordinator (DynamoDbAckStore, or a caller's recorder).
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import type { Sink } from '../../api/sinks.ts';
import { InvariantError } from '../../errors.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import type { OutboxPorts } from '../../runtime/batch-runner.ts';
import type { PartitionScope } from '../../state/backend.ts';
import type { BarrierAck } from '../../transport/envelope.ts';
import { type HandlerMetrics, OPERATOR_METRICS } from '../handler-metrics.ts';
import { type AwsSinkBinding, bindAwsSinks } from '../sinks/sink-options.ts';
import type { SqsTransport } from '../sqs/sqs-transport.ts';

export interface AwsOutboxDeps {
  readonly plan: PhysicalPlan;
  readonly transport: SqsTransport;
  /** Sinks by name that replace the job's own; opened and closed by the caller. */
  readonly sinks?: Readonly<Record<string, Sink<any>>>;
  /** How AWS sinks (S3 files, DynamoDB upsert) write: this function's clients and accounting. */
  readonly binding: Omit<AwsSinkBinding, 'sink'>;
  /** Where barrier acks go; without one they are dropped with a warning (the epoch times out and is aborted). */
  readonly recordAcks?: (acks: readonly BarrierAck[]) => Promise<void>;
  readonly log?: Logger;
  readonly metrics?: HandlerMetrics;
}

export class AwsOutbox {
  private readonly sinks = new Map<string, Sink<any>>();
  private readonly own: Sink<any>[] = [];
  private opened: Promise<void> | undefined;

  constructor(private readonly deps: AwsOutboxDeps) {
    for (const node of deps.plan.job.sinks()) {
      if (node.spec.kind !== 'sink') continue;
      const injected = deps.sinks?.[node.name];
      this.sinks.set(node.name, injected ?? node.spec.sink);
      if (!injected) this.own.push(node.spec.sink);
    }
    bindAwsSinks(this.sinks, deps.binding);
  }

  portsFor(scope: PartitionScope): OutboxPorts {
    const { plan, transport, log, metrics, recordAcks } = this.deps;
    const job = scope.job;
    return {
      channels: (envelopes) => transport.sendEnvelopes(plan, envelopes),
      deadLetters: async (letters) => {
        await transport.sendDeadLetters(letters.map(({ letter, epoch }) => ({ ...letter, job, stage: scope.stage, partition: scope.partition, epoch })));
        metrics?.addMetric(OPERATOR_METRICS.deadLetters, MetricUnit.Count, letters.length);
        for (const { letter: d, epoch } of letters) {
          const at = { stage: scope.stage, partition: scope.partition, epoch, operator: d.operator };
          if (d.record) log?.warn('record parked as a dead letter', { ...at, channel: d.channel, seq: d.seq, index: d.index, offset: d.offset, attempts: d.attempts, error: d.error });
          else log?.warn('callback parked as a dead letter (a timer counts as consumed)', { ...at, timer: d.timer, watermark: d.watermark, attempts: d.attempts, error: d.error });
        }
      },
      sink: async (delivery) => {
        this.opened ??= Promise.all(this.own.map((s) => s.open?.())).then(() => undefined);
        await this.opened;
        const sink = this.sinks.get(delivery.sink);
        if (!sink) throw new InvariantError(`outbox names sink "${delivery.sink}", which job ${job} does not have`);
        await sink.write(delivery);
      },
      sinkRejected: (e) => log?.warn('sink refused records; parked as dead letters', { sink: e.sink, producer: e.producer, seq: e.seq, records: e.rejected.length, error: e.message }),
      acks: (acks) => {
        for (const a of acks) log?.info('barrier acknowledged', { stage: a.stage, partition: a.partition, epoch: a.epoch, snapshotBytes: a.snapshot?.bytes ?? 0, full: a.snapshot?.full ?? false });
        if (recordAcks) return recordAcks(acks);
        log?.warn('checkpoint acknowledgements without a coordinator were dropped', { epochs: acks.map((a) => a.epoch) });
      },
    };
  }
}
