/**
 * Idleness of a source channel, decided from what arrives on it (pure).
 *
 * A source partition that receives no data for the source's idle timeout stops holding
 * event time back; data makes it active again. The embedded runtime's partitioner knows
 * when it last sent data and says so itself (`Envelope.idle`). On AWS a silent source
 * partition (a message group that gets no messages) is never invoked, so the ingest
 * function sends it idle probes: messages without records stamped with the ingest
 * function's clock (`arrivedAt`). Data messages carry their arrival time too, and the
 * partition commits the last one with its progress; a probe finds the partition idle
 * when at least the timeout separates the two. Both times come from the messages and
 * the committed progress, never from the consumer's clock, so a redelivered batch decides
 * the same, and a partition that is slow (a backlog, a retry) is never taken for idle:
 * its probes queue behind its data in the same FIFO group.
 */
import type { ChannelProgress } from '../state/backend.ts';
import type { Envelope } from '../transport/envelope.ts';

export interface SourceIdleness {
  readonly idle: boolean;
  /** Arrival time of the channel's last data (or of the first probe, which starts the count on a channel that never had data). */
  readonly lastDataAt: number | undefined;
}

/**
 * The channel's idleness after `env`. `timeoutMs` undefined: the source never goes idle
 * by probe (a strategy without an idle timeout).
 */
export function sourceIdlenessAfter(ch: Readonly<Pick<ChannelProgress, 'idle' | 'lastDataAt'>>, env: Pick<Envelope, 'records' | 'idle' | 'probe' | 'arrivedAt'>, timeoutMs: number | undefined): SourceIdleness {
  if (env.probe) {
    if (env.arrivedAt === undefined || timeoutMs === undefined) return { idle: ch.idle, lastDataAt: ch.lastDataAt };
    if (ch.lastDataAt === undefined) return { idle: ch.idle, lastDataAt: env.arrivedAt };
    return { idle: ch.idle || env.arrivedAt - ch.lastDataAt >= timeoutMs, lastDataAt: ch.lastDataAt };
  }
  const lastDataAt = env.arrivedAt !== undefined && env.records.length > 0 ? Math.max(env.arrivedAt, ch.lastDataAt ?? env.arrivedAt) : ch.lastDataAt;
  // The producer's own word (embedded partitioner); data or an end marker re-activates.
  return { idle: env.idle === true, lastDataAt };
}
