/**
 * Reading a checkpoint or savepoint back into a RestorePlan for the embedded runtime.
 *
 * - Same plan (resume, or a savepoint of an unchanged job): every partition gets its
 *   chain's state and progress (channel positions, watermarks), so the run continues as
 *   if uninterrupted; sources continue at the barrier's cursor or replay their log.
 * - Changed plan (a savepoint whose state descriptors still fit): keyed state and timers
 *   are moved by operator name and key group to wherever the new plan runs them (state is
 *   never tied to a stage or partition); channels start fresh and sources continue from
 *   the savepoint's cursors.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Job } from '../api/stream.ts';
import { fromBytes } from '../checkpoint/codec.ts';
import { RestoreError, StateCompatibilityError } from '../checkpoint/driver-errors.ts';
import { planFingerprint, type StateDescriptorInfo, stateCompatibility } from '../checkpoint/fingerprint.ts';
import { DirectoryBlobStore } from '../checkpoint/local-storage.ts';
import type { Manifest } from '../checkpoint/protocol.ts';
import { type RestoredPartition, restoreManifest } from '../checkpoint/snapshot.ts';
import type { BlobStore } from '../checkpoint/storage.ts';
import type { PhysicalPlan } from '../graph/compile.ts';
import { partitionOfKeyGroup } from '../graph/keygroups.ts';
import { emptyProgress, type TimerEntry } from '../state/backend.ts';
import type { InstalledPartition } from '../state/memory.ts';
import type { RestorePlan } from './embedded-options.ts';
import type { BarrierEntry } from './input-log.ts';

/** Everything a savepoint directory needs to start a job without the chain it came from. */
export interface SavepointMeta {
  readonly format: 1;
  readonly job: string;
  readonly label: string;
  readonly epoch: number;
  readonly createdAt: number;
  readonly planFingerprint: string;
  readonly maxParallelism: number;
  readonly states: readonly StateDescriptorInfo[];
  /** Logical node names by id in the saved plan (timers name their node by id). */
  readonly nodes: readonly string[];
  readonly sources: Readonly<Record<string, { readonly entry?: BarrierEntry; readonly positions: readonly number[] }>>;
  readonly manifestKey: string;
  readonly bytes: number;
}

export interface LoadedCheckpoint {
  readonly what: string;
  readonly manifest: Manifest;
  readonly blobs: BlobStore;
  readonly sources: SavepointMeta['sources'];
  readonly meta?: SavepointMeta;
}

/** Source positions of a manifest, as arrays per source (`${source}#${p}` keys). */
export function positionsBySource(manifest: Manifest): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const [sp, n] of Object.entries(manifest.positions)) {
    const i = sp.lastIndexOf('#');
    (out[sp.slice(0, i)] ??= [])[Number(sp.slice(i + 1))] = n;
  }
  return out;
}

export function loadSavepoint(dir: string): LoadedCheckpoint {
  let meta: SavepointMeta;
  try {
    meta = JSON.parse(readFileSync(join(dir, 'meta.json'), 'utf8')) as SavepointMeta;
  } catch (e) {
    throw new RestoreError('--from', 'a savepoint directory with a meta.json', `"${dir}" (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  const blobs = new DirectoryBlobStore(join(dir, 'blobs'));
  const bytes = readFileSync(join(dir, 'blobs', ...meta.manifestKey.split('/')));
  return { what: `savepoint "${meta.label}" (${dir})`, manifest: fromBytes<Manifest>(bytes), blobs, sources: meta.sources, meta };
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
  if (m.job !== job.name) throw new RestoreError(loaded.what, `a checkpoint of job "${job.name}"`, `one of job "${m.job}"`);
  const restored = await restoreManifest(m, loaded.blobs);
  if (m.fingerprint === planFingerprint(plan)) {
    const partitions = new Map<string, InstalledPartition>();
    for (const [key, r] of restored) partitions.set(key, toInstalled(r));
    return { epoch: m.epoch, partitions, sources: loaded.sources, sameTopology: true };
  }
  const meta = loaded.meta;
  if (!meta) {
    throw new RestoreError(loaded.what, 'a checkpoint of this job as it is now (same operators, stages and parallelism)', 'one of a changed job; take a savepoint before changing the job and restore from it');
  }
  const problems = stateCompatibility(meta.states, meta.maxParallelism, plan);
  if (problems.length) throw new StateCompatibilityError(loaded.what, problems);
  return { epoch: m.epoch, partitions: remap(plan, meta, restored), sources: loaded.sources, sameTopology: false };
}

/** Keyed state and timers of a savepoint, moved to the partitions of a changed plan. */
function remap(plan: PhysicalPlan, meta: SavepointMeta, restored: ReadonlyMap<string, RestoredPartition>): Map<string, InstalledPartition> {
  const maxP = plan.job.maxParallelism;
  const nodeByName = new Map(plan.job.nodes.map((n) => [n.name, n]));
  const parts = new Map<string, { entities: InstalledPartition['entities'] & unknown[]; timers: TimerEntry[] }>();
  const target = (operator: string, kg: number) => {
    const node = nodeByName.get(operator);
    if (!node) throw new RestoreError(`savepoint "${meta.label}"`, `state of operators of this job`, `state of "${operator}"`);
    const stage = plan.stageOfNode[node.id];
    const key = `${stage}/${partitionOfKeyGroup(kg, plan.stages[stage].parallelism, maxP)}`;
    let p = parts.get(key);
    if (!p) parts.set(key, (p = { entities: [], timers: [] }));
    return { p, node };
  };
  for (const r of restored.values()) {
    for (const [entity, { kg, fields }] of r.entities) target(entity.slice(0, entity.indexOf('\u0001')), kg).p.entities.push({ kg, entity, fields });
    for (const t of r.timers.values()) {
      const { p, node } = target(meta.nodes[t.node], t.kg);
      p.timers.push({ ...t, node: node.id });
    }
  }
  const out = new Map<string, InstalledPartition>();
  for (const [key, p] of parts) out.set(key, { progress: { ...emptyProgress(), lastBarrier: meta.epoch }, timers: p.timers, entities: p.entities });
  return out;
}
