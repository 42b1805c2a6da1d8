/**
 * The input log replay after an in-place restore (restore.ts), in the operator function.
 *
 * The restore rolls a source partition back to the checkpoint, but SQS already deleted
 * what the partition consumed after it: those records are in the input log
 * (input-log.ts), and the partition's installed progress says which ones
 * (PartitionProgress.replay: per channel, the record count to reach). The first batch the
 * partition processes after the restore commits them first, as replayed envelopes, in
 * commits of REPLAY_CHUNK_RECORDS (each moves the marker), then its messages. A replay
 * uses at most half the invocation's time: then the group's messages are reported failed
 * and come back (locally at once; on AWS after the visibility timeout, one receive more
 * each), and the next invocation replays on from the marker. The runtime counts
 * replayed records without moving the channel's offset, so the queue then continues
 * exactly after the last message consumed before the restore.
 *
 * Replayed records carry no arrival time (the log keeps records, not messages): a
 * channel's last data time for idle probes stays the checkpoint's until the queue's next
 * data message, so a probe right after a restore may find the partition idle a little
 * early (idleness is decided in processing time anyway, as the probes are sent).
 *
 * Why here and not in the restore itself: replaying runs user code and delivers outputs,
 * and only the operator function has what that needs (retries, dead letters, the sinks,
 * the outbox delivery); and the log cannot be sent back to the queue, which would put it
 * behind input accepted later (FIFO).
 */
import { MIN_WATERMARK } from '../../api/types.ts';
import { sourcePartitionKey } from '../../checkpoint/protocol.ts';
import { InvariantError } from '../../errors.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import type { PartitionScope } from '../../state/backend.ts';
import type { Envelope } from '../../transport/envelope.ts';
import type { AwsInputLog } from '../operator/input-log.ts';

export interface PendingReplay {
  readonly channel: string;
  /** Records the channel counts (the first one to replay). */
  readonly from: number;
  /** The count to reach. */
  readonly upTo: number;
}

/** Source partition key (`source#p`) of a source channel of the partition. */
function sourceKeyOf(plan: PhysicalPlan, scope: PartitionScope, channel: string): string {
  const edge = plan.edges[Number(channel.slice(0, channel.indexOf(':')))];
  if (edge?.from.kind !== 'source') throw new InvariantError(`replay of ${channel} into ${scope.job}/${scope.stage}#${scope.partition}: not a source channel`);
  return sourcePartitionKey(edge.from.source, scope.partition);
}

/**
 * The logged records `from` .. `upTo - 1` of each pending channel, in the order the
 * partition consumed them, as replayed envelopes (seq -1, -2, ...: they name the
 * envelope for failure locations only). A record missing from the log is an
 * InvariantError: replaying around it would lose it.
 */
export async function replayEnvelopes(plan: PhysicalPlan, scope: PartitionScope, pending: readonly PendingReplay[], log: AwsInputLog): Promise<Envelope[]> {
  if (!pending.length) return [];
  const next = new Map(pending.map((p) => [p.channel, p.from]));
  const upTo = new Map(pending.map((p) => [p.channel, p.upTo]));
  const positions: Record<string, number> = {};
  for (const p of pending) positions[sourceKeyOf(plan, scope, p.channel)] = p.from;
  const out: Envelope[] = [];
  for (const run of await log.replay(scope, positions)) {
    const at = next.get(run.channel);
    if (at === undefined) continue;
    if (run.from > at) throw new InvariantError(`input log of ${scope.job}/${scope.stage}#${scope.partition}, channel ${run.channel}: record ${at} is missing (the next logged run starts at ${run.from}); it cannot be replayed`);
    const records = run.records.slice(at - run.from, upTo.get(run.channel)! - run.from);
    if (!records.length) continue;
    const edge = Number(run.channel.slice(0, run.channel.indexOf(':')));
    out.push({ channel: run.channel, edge, toPartition: scope.partition, seq: -(out.length + 1), records, watermark: MIN_WATERMARK, replayed: true });
    next.set(run.channel, at + records.length);
  }
  for (const p of pending) {
    if (next.get(p.channel) !== p.upTo) throw new InvariantError(`input log of ${scope.job}/${scope.stage}#${scope.partition}, channel ${p.channel}: records ${next.get(p.channel)}..${p.upTo - 1} are missing; they cannot be replayed`);
  }
  return out;
}

/** Records per commit of a replay: a bounded transaction, and progress that survives an invocation's timeout. */
export const REPLAY_CHUNK_RECORDS = 1024;

/** The replayed envelopes in commits of about REPLAY_CHUNK_RECORDS records (an envelope is never split). */
export function replayChunks(envelopes: readonly Envelope[], records = REPLAY_CHUNK_RECORDS): Envelope[][] {
  const out: Envelope[][] = [];
  let cur: Envelope[] = [];
  let n = 0;
  for (const e of envelopes) {
    if (cur.length && n + e.records.length > records) {
      out.push(cur);
      cur = [];
      n = 0;
    }
    cur.push(e);
    n += e.records.length;
  }
  if (cur.length) out.push(cur);
  return out;
}
