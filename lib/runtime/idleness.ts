/**
 * Idleness of a source channel, decided from what arrives on it (pure).
 *
 * A source partition that receives no data for the source's idle timeout stops holding
 * event time back; data makes it active again. The embedded runtime's partitioner knows
 * when it last sent data and says so itself (`Envelope.idle`). On AWS a silent source
 * partition (a message group that gets no messages) is never invoked, so the ingest
 * function (and the checkpoint coordinator, when timers wait) sends it idle probes:
 * messages without records stamped with the sender's clock (`arrivedAt`). Data messages
 * carry their arrival time too, and the partition commits the last one with its progress;
 * a probe finds the partition idle when at least the timeout separates the two. Both
 * times come from the messages and the committed progress, never from the consumer's
 * clock, so a redelivered batch decides the same, and a partition that is slow (a
 * backlog, a retry) is never taken for idle: its probes queue behind its data in the
 * same FIFO group.
 *
 * While idle, a source with `idleAdvance: 'processing-time'` lets its watermark move on
 * with processing time from where its data left it (extrapolatedWatermark), so windows
 * still fire when every partition is silent; with `'hold'` it stays.
 */
import type { ChannelProgress } from '../state/backend.ts';
import type { Envelope } from '../transport/envelope.ts';

export interface SourceIdleness {
  readonly idle: boolean;
  /** Arrival time of the channel's last data (or of the first probe, which starts the count on a channel that never had data). */
  readonly lastDataAt: number | undefined;
  /** Idle and advancing: arrival time of the latest probe (the time its watermark is extrapolated to). */
  readonly idleAt: number | undefined;
}

/**
 * The channel's idleness after `env`. `timeoutMs` undefined: the source never goes idle
 * by probe (a strategy without an idle timeout). `advance`: the source's watermark moves
 * on while idle (idleAt is kept; `ch.watermark` -infinity, no data yet: nothing to keep).
 */
export function sourceIdlenessAfter(
  ch: Readonly<Pick<ChannelProgress, 'idle' | 'lastDataAt' | 'idleAt'> & { watermark?: number }>,
  env: Pick<Envelope, 'records' | 'idle' | 'probe' | 'arrivedAt'>,
  timeoutMs: number | undefined,
  advance = false,
): SourceIdleness {
  if (env.probe) {
    if (env.arrivedAt === undefined || timeoutMs === undefined) return { idle: ch.idle, lastDataAt: ch.lastDataAt, idleAt: ch.idleAt };
    if (ch.lastDataAt === undefined) return { idle: ch.idle, lastDataAt: env.arrivedAt, idleAt: ch.idleAt };
    const idle = ch.idle || env.arrivedAt - ch.lastDataAt >= timeoutMs;
    // Probes from different senders may interleave slightly out of order: keep the latest.
    // A channel without data (watermark -infinity) has nothing to move on from.
    const idleAt = idle && advance && ch.watermark !== Number.NEGATIVE_INFINITY ? Math.max(env.arrivedAt, ch.idleAt ?? env.arrivedAt) : undefined;
    return { idle, lastDataAt: ch.lastDataAt, idleAt };
  }
  const lastDataAt = env.arrivedAt !== undefined && env.records.length > 0 ? Math.max(env.arrivedAt, ch.lastDataAt ?? env.arrivedAt) : ch.lastDataAt;
  // The producer's own word (embedded partitioner); data or an end marker re-activates.
  return { idle: env.idle === true, lastDataAt, idleAt: undefined };
}

/**
 * The watermark an idle partition has reached at processing time `at`: where its data
 * left it, moved on by the processing time since that data arrived. Never below
 * `watermark` (an arrival time behind the last data moves nothing).
 */
export function extrapolatedWatermark(watermark: number, lastDataAt: number, at: number): number {
  return at > lastDataAt ? watermark + (at - lastDataAt) : watermark;
}

/** A channel's watermark as the partition counts it: extrapolated while idle and advancing, else its own. */
export function channelWatermark(ch: Readonly<Pick<ChannelProgress, 'watermark' | 'idle' | 'lastDataAt' | 'idleAt'>>): number {
  if (!ch.idle || ch.idleAt === undefined || ch.lastDataAt === undefined) return ch.watermark;
  return extrapolatedWatermark(ch.watermark, ch.lastDataAt, ch.idleAt);
}

/**
 * Processing time, in ms, after which a partition at `watermark` whose inputs all advance
 * while idle reaches `timer` (its earliest pending event-time timer): what the checkpoint
 * coordinator waits before it probes. 0: already due; Infinity: never (no finite watermark).
 */
export function processingTimeUntil(watermark: number, timer: number): number {
  if (timer <= watermark) return 0;
  if (!Number.isFinite(watermark) || !Number.isFinite(timer)) return Number.POSITIVE_INFINITY;
  return timer - watermark;
}
