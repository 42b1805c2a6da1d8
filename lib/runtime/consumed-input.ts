/**
 * Logged input (PartitionDeps.logInput): the source records a partition consumed on
 * log channels since its last commit, merged into runs per channel, committed with
 * the batch (CommitBatch.inputLog) so that a restore can replay what the queue no
 * longer holds.
 */
import type { StreamRecord } from '../api/types.ts';
import { sourcePartitionKey } from '../checkpoint/protocol.ts';
import type { PhysicalPlan } from '../graph/compile.ts';
import type { InputLogAppend } from '../state/backend.ts';
import type { Envelope } from '../transport/envelope.ts';

export class ConsumedInput {
  private pending: InputLogAppend[] = [];

  /** The records of `env`, the first at channel position `from`, after barrier `after`. */
  append(plan: PhysicalPlan, partition: number, env: Envelope, from: number, after: number): void {
    const last = this.pending[this.pending.length - 1];
    if (last && last.channel === env.channel && last.after === after && last.from + last.records.length === from) {
      (last.records as StreamRecord[]).push(...env.records);
      return;
    }
    const edge = plan.edges[env.edge];
    const source = edge.from.kind === 'source' ? sourcePartitionKey(edge.from.source, partition) : env.channel;
    this.pending.push({ channel: env.channel, source, from, after, records: [...env.records] });
  }

  /** What to commit, and start over. */
  take(): InputLogAppend[] {
    const out = this.pending;
    this.pending = [];
    return out;
  }
}
