/**
 * Idle probes (runtime/idleness.ts): messages without records, stamped with the sender's
 * clock, that let a silent source partition on AWS decide it is idle. The ingest function
 * sends them with its requests; the checkpoint coordinator sends one to every source
 * partition of every ingestion stream when event-time timers wait at zero traffic
 * (checkpoint-timers.ts), so extrapolated watermarks move on and the last windows fire.
 */
import type { PhysicalPlan } from '../../graph/compile.ts';
import { dedupId, probeBody } from '../sqs/sqs-codec.ts';
import type { QueueResolver } from '../sqs/sqs-queues.ts';
import type { OutgoingMessage, SqsTransport } from '../sqs/sqs-transport.ts';

/** The probe for `partition` of ingestion stream `stream` (source `source`) at `at`; `scope` makes its deduplication id (sender and occasion). */
export function probeMessage(job: string, stream: string, source: string, partition: number, at: number, scope: string): OutgoingMessage {
  const body = probeBody(source, at);
  return { groupId: String(partition), body, bytes: Buffer.byteLength(body), dedupId: dedupId(`${job}/probe/${stream}/${scope}`, [`partition ${partition}`, `at ${at}`]) };
}

/** Per source stage fed by an ingestion stream whose source has an idle timeout: its probes at `at`. */
export function allIdleProbes(plan: PhysicalPlan, at: number, scope: string): Map<number, OutgoingMessage[]> {
  const byStage = new Map<number, OutgoingMessage[]>();
  for (const edge of plan.edges) {
    if (edge.from.kind !== 'source') continue;
    const spec = plan.job.nodes[edge.toNode].spec;
    if (spec.kind !== 'source' || spec.source.binding.kind !== 'ingest' || spec.source.watermark.idleTimeoutMs === undefined) continue;
    const list = byStage.get(edge.toStage) ?? [];
    for (let p = 0; p < plan.stages[edge.toStage].parallelism; p++) list.push(probeMessage(plan.job.name, spec.source.name, spec.source.name, p, at, scope));
    byStage.set(edge.toStage, list);
  }
  return byStage;
}

/** Send every probe of allIdleProbes (throws SqsSendError when one did not go out: the step is retried). Returns how many went out. */
export async function sendIdleProbes(transport: SqsTransport, queues: QueueResolver, plan: PhysicalPlan, at: number, scope: string): Promise<number> {
  const byStage = allIdleProbes(plan, at, scope);
  await Promise.all([...byStage].map(async ([stage, messages]) => transport.sendAll(await queues.queueUrl(stage), messages, true)));
  return [...byStage.values()].reduce((n, m) => n + m.length, 0);
}
