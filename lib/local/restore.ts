/**
 * Reading a checkpoint or savepoint back into a RestorePlan for the embedded runtime.
 *
 * - Same plan (resume, or a savepoint this runtime took of an unchanged job): every
 *   partition gets its chain's state and progress (channel positions, watermarks), so
 *   the run continues as if uninterrupted; sources continue at the barrier's cursor or
 *   replay their log.
 * - Otherwise (a savepoint of a changed job whose state descriptors still fit, or one
 *   taken on AWS): keyed state and timers move by state identity and key group to
 *   wherever the new plan runs them (lib/checkpoint/savepoint-remap.ts); channels start
 *   fresh and sources continue from the savepoint's cursors. A source without a cursor
 *   (read from an ingestion stream) takes input bound at the restore as new input.
 */
import { join } from 'node:path';
import type { Job } from '../api/stream.ts';
import { RestoreError } from '../checkpoint/driver-errors.ts';
import { DirectoryBlobStore } from '../checkpoint/local-storage.ts';
import type { Manifest } from '../checkpoint/protocol.ts';
import { type LoadedSavepoint, positionsBySource, readSavepoint, type SavepointMeta, savepointFit } from '../checkpoint/savepoint.ts';
import { remapState } from '../checkpoint/savepoint-remap.ts';
import { type RestoredPartition, restoreManifest } from '../checkpoint/snapshot.ts';
import type { BlobStore } from '../checkpoint/storage.ts';
import type { PhysicalPlan } from '../graph/compile.ts';
import { emptyProgress } from '../state/backend.ts';
import type { InstalledPartition } from '../state/memory.ts';
import type { RestorePlan } from './embedded-options.ts';

export type { SavepointMeta };

export interface LoadedCheckpoint {
  readonly what: string;
  readonly manifest: Manifest;
  readonly blobs: BlobStore;
  readonly sources: RestorePlan['sources'];
  readonly meta?: SavepointMeta;
}

/** A savepoint directory (`<dir>/savepoints/<label>`, or one copied anywhere). */
export async function loadSavepoint(dir: string): Promise<LoadedCheckpoint> {
  return fromSavepoint(await readSavepoint(new DirectoryBlobStore(dir), '', dir), dir);
}

/** A savepoint read from any store (an S3 prefix: the CLI resolves it), as the embedded runtime restores it. */
export function fromSavepoint(s: LoadedSavepoint, where: string): LoadedCheckpoint {
  const sources: Record<string, RestorePlan['sources'][string]> = {};
  for (const [source, positions] of Object.entries(positionsBySource(s.meta.positions))) {
    // No cursor: the savepoint read it from an ingestion stream (or on AWS); bound input is new input.
    const entry = s.meta.cursors?.[source] ?? { epoch: s.meta.epoch, cursor: null, next: 0, positions };
    sources[source] = { entry, positions };
  }
  return { what: `${s.what} (${where})`, manifest: s.manifest, blobs: s.blobs, sources, meta: s.meta };
}

/** The savepoints directory of a checkpoint directory. */
export function savepointDir(checkpointDir: string, label: string): string {
  return join(checkpointDir, 'savepoints', label);
}

function toInstalled(r: RestoredPartition): InstalledPartition {
  return {
    progress: r.progress,
    timers: [...r.timers.values()],
    entities: [...r.entities].map(([entity, { kg, fields }]) => ({ kg, entity, fields })),
  };
}

export async function buildRestorePlan(job: Job, plan: PhysicalPlan, loaded: LoadedCheckpoint): Promise<RestorePlan> {
  const m = loaded.manifest;
  const fit = savepointFit(loaded, plan);
  if (m.job !== job.name) throw new RestoreError(loaded.what, `a checkpoint of job "${job.name}"`, `one of job "${m.job}"`);
  const restored = await restoreManifest(m, loaded.blobs);
  // Progress (channel sequence numbers, SQS offsets) continues only on the runtime that wrote it.
  if (fit === 'same' && loaded.meta?.takenOn !== 'aws') {
    const partitions = new Map<string, InstalledPartition>();
    for (const [key, r] of restored) partitions.set(key, toInstalled(r));
    return { epoch: m.epoch, partitions, sources: loaded.sources, sameTopology: true };
  }
  const meta = loaded.meta!;
  const partitions = new Map<string, InstalledPartition>();
  for (const [key, p] of remapState(plan, meta, restored.values(), loaded.what)) {
    partitions.set(key, {
      progress: { ...emptyProgress(), lastBarrier: meta.epoch },
      timers: [...p.timers.values()].flat(),
      entities: [...p.entities].map(([entity, { kg, fields }]) => ({ kg, entity, fields })),
    });
  }
  return { epoch: m.epoch, partitions, sources: loaded.sources, sameTopology: false };
}
