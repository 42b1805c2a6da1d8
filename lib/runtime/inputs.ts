/** What a batch reads: which envelopes are new, and which entities it may touch (for remote state). */
import { type Key, keyToString, MAX_WATERMARK, MIN_WATERMARK, type StreamRecord } from '../api/types.ts';
import { InvariantError } from '../errors.ts';
import type { PhysicalPlan, StageEdge } from '../graph/compile.ts';
import { keyGroupOfString } from '../graph/keygroups.ts';
import { KEYED_KINDS, stateIdOf } from '../api/logical.ts';
import type { ChannelProgress } from '../state/backend.ts';
import { compareOffsets, type Envelope } from '../transport/envelope.ts';
import { entityId, type NodeRuntime } from './context.ts';
import { channelWatermark } from './idleness.ts';

/**
 * Drops envelopes at or below their channel's high-water mark (a redelivery). A gap in a
 * channel's sequence is an InvariantError: it would mean loss. Offset channels (a log
 * with non-contiguous positions) compare offsets and expect gaps.
 */
export function freshEnvelopes(envelopes: readonly Envelope[], inputs: Readonly<Record<string, ChannelProgress>>, where: string): { fresh: Envelope[]; dups: number } {
  const fresh: Envelope[] = [];
  // Positions seen earlier in this batch, per channel: only a batch of several envelopes needs them.
  const several = envelopes.length > 1;
  let seen: Map<string, number> | undefined;
  let seenOffsets: Map<string, string> | undefined;
  let dups = 0;
  for (const env of envelopes) {
    // Replayed input log records are checked against PartitionProgress.replay when taken.
    if (env.replayed) {
      fresh.push(env);
      continue;
    }
    if (env.offset !== undefined) {
      const lastOffset = seenOffsets?.get(env.channel) ?? inputs[env.channel]?.offset;
      if (lastOffset !== undefined && compareOffsets(env.offset, lastOffset) <= 0) {
        dups++;
        continue;
      }
      if (several) (seenOffsets ??= new Map()).set(env.channel, env.offset);
      fresh.push(env);
      continue;
    }
    const last = seen?.get(env.channel) ?? inputs[env.channel]?.seq ?? 0;
    if (env.seq <= last) {
      dups++;
      continue;
    }
    if (env.seq !== last + 1) throw new InvariantError(`channel ${env.channel} into ${where}: expected seq ${last + 1}, received ${env.seq} (a gap means lost messages)`);
    if (several) (seen ??= new Map()).set(env.channel, env.seq);
    fresh.push(env);
  }
  return { fresh, dups };
}

/** Entities a batch may touch: the keys of its keyed records, and the keys of timers that may fire (due processing timers, event timers up to the highest watermark offered). */
export function entitiesToPrefetch(plan: PhysicalPlan, envelopes: readonly Envelope[], order: readonly NodeRuntime[], inputWatermark: number, now: number): { kg: number; entity: string }[] {
  const want = new Map<string, { kg: number; entity: string }>();
  const maxP = plan.job.maxParallelism;
  for (const env of envelopes) {
    const node = plan.job.nodes[plan.edges[env.edge].toNode];
    if (!KEYED_KINDS.has(node.spec.kind)) continue;
    for (const r of env.records) {
      const ks = keyToString(r.key as Key);
      const entity = entityId(stateIdOf(node), ks);
      if (!want.has(entity)) want.set(entity, { kg: keyGroupOfString(ks, maxP), entity });
    }
  }
  const maxWm = envelopes.reduce((m, e) => Math.max(m, e.watermark), inputWatermark);
  for (const n of order) {
    for (const t of [...n.timers.event.liveUpTo(maxWm), ...n.timers.processing.liveUpTo(now)]) {
      const entity = entityId(stateIdOf(n.node), t.key);
      if (!want.has(entity)) want.set(entity, { kg: t.kg, entity });
    }
  }
  return [...want.values()];
}

/** Bounded out-of-orderness over the records of a source envelope. */
export function sourceWatermark(plan: PhysicalPlan, edge: StageEdge, records: readonly StreamRecord[]): number {
  if (records.length === 0) return MIN_WATERMARK;
  let max = MIN_WATERMARK;
  for (const r of records) if (r.timestamp > max) max = r.timestamp;
  return sourceWatermarkAt(plan, edge, max);
}

/** The same from the records' largest timestamp (columnar envelopes carry it). */
export function sourceWatermarkAt(plan: PhysicalPlan, edge: StageEdge, maxTimestamp: number): number {
  const spec = plan.job.nodes[edge.toNode].spec;
  const delay = spec.kind === 'source' ? spec.source.watermark.maxOutOfOrdernessMs : 0;
  return maxTimestamp - delay - 1;
}

/**
 * The minimum over the expected channels, idle ones excluded: an idle input never holds
 * back active ones. All idle: the minimum over the idle channels that had data (their
 * watermarks move on where their source advances while idle, see idleness.ts), never
 * below `current`.
 */
export function inputWatermark(expected: readonly string[], inputs: Readonly<Record<string, ChannelProgress>>, current: number): number {
  if (expected.length === 0) return MAX_WATERMARK;
  let wm = MAX_WATERMARK;
  let idleWm = MAX_WATERMARK;
  let active = 0;
  for (const c of expected) {
    const ch = inputs[c];
    if (ch?.idle) {
      // An idle channel that never had data has no time to move on from: it holds nothing back.
      const w = channelWatermark(ch);
      if (w < idleWm && w !== MIN_WATERMARK) idleWm = w;
      continue;
    }
    active++;
    const w = ch ? ch.watermark : MIN_WATERMARK;
    if (w < wm) wm = w;
  }
  if (active > 0) return wm;
  return idleWm === MAX_WATERMARK ? current : Math.max(current, idleWm);
}

export function allIdle(expected: readonly string[], inputs: Readonly<Record<string, ChannelProgress>>): boolean {
  return expected.length > 0 && expected.every((c) => inputs[c]?.idle);
}
