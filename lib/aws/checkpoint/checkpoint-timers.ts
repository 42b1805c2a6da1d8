/**
 * Waking a quiet job for its event-time timers (pure). At zero traffic nothing invokes a
 * stage on AWS, so a window that waits for the watermark would never fire. Each
 * checkpoint ack of a partition with event-time timers pending reports the earliest one
 * and the partition's watermark (BarrierAck.timers). When the coordinator would end its
 * execution because no input arrived since the last checkpoint, and the last committed
 * epoch's acks report timers, it waits instead: until the extrapolated watermark
 * (runtime/idleness.ts: an idle partition's watermark moves on with processing time)
 * reaches the earliest timer, at least the idle timeout (so every source partition is
 * idle by then), at most `maxWaitMs`. Then it probes every source partition of every
 * ingestion stream and runs an epoch, whose acks decide the next wait. No timers: it ends.
 */
import type { Ack } from '../../checkpoint/protocol.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import { processingTimeUntil } from '../../runtime/idleness.ts';

export interface TimerWakeUpConfig {
  /** The longest idle timeout of the advancing ingestion sources: the shortest wait. */
  readonly idleTimeoutMs: number;
  /** The longest wait (a timer far ahead is approached in steps of this). */
  readonly maxWaitMs: number;
}

/** Default longest wait: one hour. */
export const DEFAULT_MAX_WAKE_UP_WAIT_MS = 3_600_000;

/**
 * The wake-up settings of a plan, or undefined when no ingestion source advances while
 * idle (idleAdvance 'processing-time' with an idle timeout): probes would move nothing.
 */
export function timerWakeUpConfig(plan: PhysicalPlan, maxWaitMs = DEFAULT_MAX_WAKE_UP_WAIT_MS): TimerWakeUpConfig | undefined {
  let idleTimeoutMs: number | undefined;
  for (const n of plan.job.nodes) {
    if (n.spec.kind !== 'source') continue;
    const s = n.spec.source;
    if (s.binding.kind !== 'ingest' || s.idleAdvance !== 'processing-time' || s.watermark.idleTimeoutMs === undefined) continue;
    idleTimeoutMs = Math.max(idleTimeoutMs ?? 0, s.watermark.idleTimeoutMs);
  }
  return idleTimeoutMs === undefined ? undefined : { idleTimeoutMs, maxWaitMs: Math.max(maxWaitMs, idleTimeoutMs) };
}

/**
 * Whole seconds to wait before probing, or undefined: no partition reported pending
 * event-time timers (the coordinator ends; nothing runs at zero traffic). A partition
 * whose watermark is not finite yet (an input that never went idle) needs the idle
 * timeout: the probes then idle it, and the next epoch's acks say more.
 */
export function wakeUpWaitSeconds(acks: readonly Pick<Ack, 'timers'>[], config: TimerWakeUpConfig): number | undefined {
  let need = Number.POSITIVE_INFINITY;
  let pending = false;
  for (const a of acks) {
    if (!a.timers) continue;
    pending = true;
    need = Math.min(need, processingTimeUntil(a.timers.watermark, a.timers.earliest));
  }
  if (!pending) return undefined;
  const ms = Number.isFinite(need) ? Math.min(config.maxWaitMs, Math.max(config.idleTimeoutMs, need)) : config.idleTimeoutMs;
  return Math.max(1, Math.ceil(ms / 1000));
}
