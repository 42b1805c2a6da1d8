/**
 * Pure helpers behind the coordinator's commit: building a manifest from the previous
 * one and the acks, choosing which partitions must compact, and log retention.
 */
import { ManifestChainError } from './errors.ts';
import {
  participantKey,
  type ChainLink,
  type CoordinatorConfig,
  type CoordinatorState,
  type InFlightEpoch,
  type Manifest,
  type ManifestPartition,
  type ParticipantKey,
  type RetainedCheckpoint,
  type SourcePartitionKey,
} from './protocol.ts';

/**
 * Manifest of the in-flight epoch: each partition's chain is the previous manifest's
 * chain plus this epoch's delta; a full snapshot restarts the chain; no snapshot (nothing
 * changed since the base) keeps it. createdAt is the latest ack time, not the clock, so a
 * coordinator that rebuilds the manifest after a crash produces the same object.
 */
export function buildManifest(state: CoordinatorState, inFlight: InFlightEpoch): Manifest {
  const prev = state.lastCompleted?.manifest ?? null;
  if ((prev?.epoch ?? 0) !== inFlight.baseEpoch) {
    throw new ManifestChainError(inFlight.epoch, null, `base epoch ${inFlight.baseEpoch} to be the last completed checkpoint`, `last completed ${prev?.epoch ?? 0}`);
  }
  const partitions: Record<ParticipantKey, ManifestPartition> = {};
  const positions: Record<SourcePartitionKey, number> = { ...(prev?.positions ?? {}) };
  let createdAt = 0;
  for (const p of state.participants) {
    const key = participantKey(p);
    const ack = inFlight.acks[key];
    if (!ack) throw new ManifestChainError(inFlight.epoch, key, 'an ack from every participant', 'none');
    const chain: readonly ChainLink[] = prev?.partitions[key]?.chain ?? [];
    let next: readonly ChainLink[] = chain;
    if (ack.snapshot) {
      const link: ChainLink = { epoch: inFlight.epoch, ...ack.snapshot };
      next = ack.snapshot.full ? [link] : [...chain, link];
    }
    partitions[key] = { stage: p.stage, partition: p.partition, chain: next };
    Object.assign(positions, ack.positions);
    createdAt = Math.max(createdAt, ack.ackedAt);
  }
  return {
    format: 1,
    job: state.job,
    fingerprint: state.fingerprint,
    epoch: inFlight.epoch,
    baseEpoch: inFlight.baseEpoch,
    createdAt,
    partitions,
    positions,
    savepoint: inFlight.savepoint,
  };
}

/**
 * Compaction policy: a partition whose committed chain has reached maxChainLength is
 * asked for a full snapshot at the next epoch, so its chain restarts at length 1 and a
 * restore reads at most maxChainLength objects per partition. Derived from the last
 * manifest alone, so it survives a coordinator restart without extra state.
 */
export function partitionsNeedingFull(state: CoordinatorState): ParticipantKey[] {
  const prev = state.lastCompleted?.manifest;
  if (!prev) return state.participants.map(participantKey);
  return state.participants
    .map(participantKey)
    .filter((key) => (prev.partitions[key]?.chain.length ?? 0) >= state.config.maxChainLength);
}

/**
 * Adds a completed checkpoint to the retention history and returns the new truncation
 * point: the older of (the `epochs`-th newest checkpoint) and (the newest checkpoint
 * completed at least `ms` ago, or the oldest retained when none is that old). Logs
 * before the point are needed by no retained checkpoint. Savepoints do not pin logs:
 * restoring one resumes from its positions, like Flink restoring from Kafka offsets.
 */
export function retain(
  history: readonly RetainedCheckpoint[],
  entry: RetainedCheckpoint,
  config: CoordinatorConfig,
  now: number,
): { history: RetainedCheckpoint[]; point: RetainedCheckpoint } {
  const h = [...history.filter((c) => c.epoch < entry.epoch), entry];
  const byEpochs = h[Math.max(0, h.length - config.retention.epochs)];
  let byMs = h[h.length - 1];
  if (config.retention.ms > 0) {
    const cutoff = now - config.retention.ms;
    const old = h.filter((c) => c.completedAt <= cutoff);
    byMs = old.length > 0 ? old[old.length - 1] : h[0];
  }
  const point = byEpochs.epoch <= byMs.epoch ? byEpochs : byMs;
  return { history: thin(h.filter((c) => c.epoch >= point.epoch), config.historyLimit), point };
}

/**
 * Bounds the history by dropping every second entry between the first and the last.
 * Dropping entries can only move a later truncation point to an older checkpoint, so
 * it keeps more log than asked, never less.
 */
function thin(h: RetainedCheckpoint[], limit: number): RetainedCheckpoint[] {
  let out = h;
  while (out.length > limit) {
    const last = out.length - 1;
    out = out.filter((_, i) => i === 0 || i === last || i % 2 === 0);
  }
  return out;
}
