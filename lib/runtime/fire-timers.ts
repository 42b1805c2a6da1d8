/**
 * Firing a partition's timers (partition.ts): event-time timers when its input watermark
 * moves, processing-time timers by its clock, each callback run through the batch's
 * position (position.ts) so that a failure names it.
 */
import { type Clock, MAX_WATERMARK } from '../api/types.ts';
import type { TimerEntry } from '../state/backend.ts';
import type { NodeRuntime } from './context.ts';
import type { BatchPosition } from './position.ts';
import type { TimerQueue } from './timers.ts';

/** The earliest pending processing-time timer of the nodes (MAX_WATERMARK: none). */
export function earliestProcessingTime(order: readonly NodeRuntime[]): number {
  let t = MAX_WATERMARK;
  for (const n of order) t = Math.min(t, n.timers.processing.peekTime());
  return t;
}

/** The earliest pending event-time timer (MAX_WATERMARK: none), which the checkpoint ack reports. */
export function earliestEventTime(order: readonly NodeRuntime[]): number {
  let t = MAX_WATERMARK;
  for (const n of order) t = Math.min(t, n.timers.event.peekTime());
  return t;
}

/** Fire the event-time timers due at watermark `wm`, node by node, each node's onWatermark after its timers. */
export function fireEventTimers(order: readonly NodeRuntime[], wm: number, at: BatchPosition): void {
  for (const n of order) {
    const q = n.timers.event;
    for (let t = q.pollUpTo(wm); t; t = q.pollUpTo(wm)) fireTimer(n, t, q, at);
    if (n.op.onWatermark) at.watermark(n, wm);
  }
}

/** Fire the processing-time timers due by the clock. */
export function fireProcessingTimers(order: readonly NodeRuntime[], clock: Clock, at: BatchPosition): void {
  // No pending processing-time timer: nothing can fire, the clock need not be read.
  if (earliestProcessingTime(order) === MAX_WATERMARK) return;
  const now = clock.now();
  for (const n of order) {
    const q = n.timers.processing;
    for (let t = q.pollUpTo(now); t; t = q.pollUpTo(now)) fireTimer(n, t, q, at);
  }
}

/** `q`: the queue that polled `t` (its registration's hint spares the callback's state look-up). */
function fireTimer(n: NodeRuntime, t: TimerEntry, q: TimerQueue, at: BatchPosition): void {
  if (!n.op.onTimer) return;
  n.ctx.setCurrentKeyString(t.key, t.kg, q.firedHint);
  at.timer(n, t);
}
