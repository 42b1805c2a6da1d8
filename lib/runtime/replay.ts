/**
 * The runtime side of an input log replay after an in-place restore on AWS
 * (lib/aws/restore/restore-replay.ts): the installed progress names, per source channel, the
 * record count the replay must reach (PartitionProgress.replay); replayed envelopes move
 * the channel's record count, never its offset, and clear the marker once it is reached.
 */
import { InvariantError } from '../errors.ts';
import type { ChannelProgress, PartitionProgress } from '../state/backend.ts';
import type { Envelope } from '../transport/envelope.ts';
import type { MutableProgress } from './checkpoints.ts';

/** The replay the progress still owes (per source channel: records `from` .. `upTo - 1`); empty: none. */
export function pendingReplayOf(progress: PartitionProgress): { readonly channel: string; readonly from: number; readonly upTo: number }[] {
  return Object.entries(progress.replay ?? {}).map(([channel, upTo]) => ({ channel, from: progress.inputs[channel]?.records ?? 0, upTo }));
}

/**
 * A replayed envelope: its records follow the channel's count exactly and stay within the
 * replay; the offset stays. `stage`, `partition`: the partition, for the error.
 */
export function consumeReplayed(progress: MutableProgress, env: Envelope, ch: ChannelProgress, stage: string, partition: number): void {
  const upTo = progress.replay?.[env.channel];
  const from = ch.records ?? 0;
  const to = from + env.records.length;
  if (upTo === undefined || to > upTo) {
    throw new InvariantError(`partition ${stage}#${partition}: replayed records ${from}..${to - 1} of channel ${env.channel}, but the restore left ${upTo === undefined ? 'no replay' : `a replay up to record ${upTo - 1}`} on it`);
  }
  ch.records = to;
  if (to === upTo) {
    const { [env.channel]: _done, ...rest } = progress.replay!;
    if (Object.keys(rest).length) progress.replay = rest;
    else delete progress.replay;
  }
}
