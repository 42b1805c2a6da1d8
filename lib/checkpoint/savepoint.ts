/**
 * The savepoint format, one for both runtimes. A savepoint is self-contained under one
 * prefix of a blob store (a directory on the embedded runtime, a bucket prefix on AWS):
 *
 *   <prefix>meta.json       SavepointMeta, written last (its presence means complete)
 *   <prefix>blobs/<key>     the manifest and every snapshot object it names, under their
 *                           original keys (a manifest's links resolve inside blobs/)
 *
 * The meta describes the plan that took it (fingerprint, maxParallelism, state
 * descriptors, the state identity of every node by id), so that any runtime checks a
 * changed job against it (savepointFit) and moves its state by identity and key group
 * (savepoint-remap.ts), and the source positions the input continues after. Sources the
 * embedded runtime read from a replayable input also carry the reader's cursor at the
 * barrier (`cursors`); without one, input bound at a restore is new input.
 */
import type { PhysicalPlan } from '../graph/compile.ts';
import { stateIdOf } from '../api/logical.ts';
import { fromBytes, toBytes } from './codec.ts';
import { RestoreError, StateCompatibilityError } from './driver-errors.ts';
import { planFingerprint, type StateDescriptorInfo, stateCompatibility, stateDescriptors } from './fingerprint.ts';
import type { Manifest, SourcePartitionKey } from './protocol.ts';
import type { BlobStore } from './storage.ts';

export const SAVEPOINT_META = 'meta.json';

/** What a restore needs to know about the plan that took a savepoint. */
export interface PlanDescription {
  readonly planFingerprint: string;
  readonly maxParallelism: number;
  readonly states: readonly StateDescriptorInfo[];
  /** The state identity (uid, or name) of every logical node, by node id: timers name their node by id. */
  readonly nodes: readonly string[];
}

/** A replayable source's reader at the savepoint's barrier (the embedded runtime's barrier record). */
export interface SourceCursor {
  readonly epoch: number;
  /** Events read (null: the source was read from the ingestion endpoint). */
  readonly cursor: number | null;
  /** The partition the next chunk goes to. */
  readonly next: number;
  /** Records sent per source partition before the barrier. */
  readonly positions: readonly number[];
}

export interface SavepointMeta extends PlanDescription {
  readonly format: 1;
  readonly job: string;
  readonly label: string;
  readonly epoch: number;
  readonly createdAt: number;
  /** The runtime that took it: a savepoint restores on either. */
  readonly takenOn: 'embedded' | 'aws';
  /** Records each source partition (`${source}#${p}`) had consumed at the barrier. */
  readonly positions: Readonly<Record<SourcePartitionKey, number>>;
  /** Per source read from a replayable input on the embedded runtime: where its reader stood. */
  readonly cursors?: Readonly<Record<string, SourceCursor>>;
  /** The manifest's key inside blobs/ (its original key). */
  readonly manifestKey: string;
  /** Bytes of the snapshot objects (what a restore reads). */
  readonly bytes: number;
  /** Snapshot objects copied. */
  readonly objects: number;
}

export function describePlan(plan: PhysicalPlan): PlanDescription {
  return { planFingerprint: planFingerprint(plan), maxParallelism: plan.job.maxParallelism, states: stateDescriptors(plan), nodes: plan.job.nodes.map(stateIdOf) };
}

/** The objects of a savepoint under `prefix`blobs/, as a store of their original keys. */
export function savepointObjects(store: BlobStore, prefix: string): BlobStore {
  const base = `${prefix}blobs/`;
  return {
    put: (k, b) => store.put(base + k, b),
    get: (k) => store.get(base + k),
    list: async (p) => (await store.list(base + p)).map((k) => k.slice(base.length)),
    delete: (ks) => store.delete(ks.map((k) => base + k)),
  };
}

/**
 * Write a committed savepoint epoch under `prefix` of `target`: its manifest and snapshot
 * objects copied from `source`, then the meta. Idempotent (objects are immutable and the
 * same bytes each time), so a writer that died part way writes it again.
 */
export async function writeSavepoint(
  o: { source: BlobStore; target: BlobStore; prefix: string },
  manifest: Manifest,
  manifestKey: string,
  meta: Pick<SavepointMeta, 'job' | 'createdAt' | 'takenOn' | 'cursors'> & PlanDescription,
): Promise<SavepointMeta> {
  const label = manifest.savepoint?.label;
  if (!label) throw new RestoreError(`checkpoint ${manifest.epoch}`, 'a savepoint manifest (labelled)', 'an unlabelled manifest');
  const objects = savepointObjects(o.target, o.prefix);
  const keys = [...new Set(Object.values(manifest.partitions).flatMap((p) => p.chain.map((l) => l.key)))];
  let bytes = 0;
  for (const k of keys) {
    const body = await o.source.get(k);
    if (!body) throw new RestoreError(`savepoint "${label}"`, `snapshot object ${k} named by manifest ${manifestKey}`, 'no such object (deleted before the savepoint was copied)');
    bytes += body.byteLength;
    await objects.put(k, body);
  }
  await objects.put(manifestKey, toBytes(manifest));
  const { cursors, ...rest } = meta;
  const written: SavepointMeta = {
    format: 1,
    ...rest,
    label,
    epoch: manifest.epoch,
    positions: manifest.positions,
    ...(cursors && Object.keys(cursors).length ? { cursors } : {}),
    manifestKey,
    bytes,
    objects: keys.length,
  };
  await o.target.put(`${o.prefix}${SAVEPOINT_META}`, toBytes(written, 2));
  return written;
}

/** A savepoint read back: its meta, its manifest, and the store its manifest's keys resolve in. */
export interface LoadedSavepoint {
  /** For messages: `savepoint "<label>"` and where. */
  readonly what: string;
  readonly meta: SavepointMeta;
  readonly manifest: Manifest;
  readonly manifestKey: string;
  readonly blobs: BlobStore;
}

/** The meta under `prefix`, or undefined when there is none (no savepoint, or one not completely written). */
export async function readSavepointMeta(store: BlobStore, prefix: string): Promise<SavepointMeta | undefined> {
  const body = await store.get(`${prefix}${SAVEPOINT_META}`);
  return body ? fromBytes<SavepointMeta>(body) : undefined;
}

/** The savepoint under `prefix` of `store`; `where` names it in errors (a directory, an S3 URL). */
export async function readSavepoint(store: BlobStore, prefix: string, where: string): Promise<LoadedSavepoint> {
  const meta = await readSavepointMeta(store, prefix);
  if (!meta) throw new RestoreError('--from', `a savepoint (a ${SAVEPOINT_META} with blobs/ beside it)`, `${where}, which has no ${SAVEPOINT_META}`);
  if (meta.format !== 1 || typeof meta.positions !== 'object' || !Array.isArray(meta.nodes)) {
    throw new RestoreError(`savepoint at ${where}`, 'a savepoint meta of format 1 with positions and nodes', `format ${String(meta.format)}${meta.positions ? '' : ', no positions'}`);
  }
  const blobs = savepointObjects(store, prefix);
  const body = await blobs.get(meta.manifestKey);
  const what = `savepoint "${meta.label}"`;
  if (!body) throw new RestoreError(`${what} (${where})`, `its manifest ${meta.manifestKey}`, 'no such object');
  return { what, meta, manifest: fromBytes<Manifest>(body), manifestKey: meta.manifestKey, blobs };
}

/** What restores: a checkpoint (no meta: the plan that took it must be this one) or a savepoint. */
export interface RestorePoint {
  readonly what: string;
  readonly manifest: Manifest;
  readonly meta?: SavepointMeta;
}

/**
 * Whether `plan` (the job as it is now) can start from the restore point: 'same' (the
 * plan it was taken under: state and channel positions continue), 'changed' (a savepoint
 * whose state descriptors fit: keyed state and timers move by state identity and key
 * group). Throws RestoreError for a checkpoint of a changed job, StateCompatibilityError
 * naming each problem for a savepoint that does not fit.
 */
export function savepointFit(point: RestorePoint, plan: PhysicalPlan): 'same' | 'changed' {
  const m = point.manifest;
  if (m.job !== plan.job.name) throw new RestoreError(point.what, `a checkpoint of job "${plan.job.name}"`, `one of job "${m.job}"`);
  if (m.fingerprint === planFingerprint(plan)) return 'same';
  if (!point.meta) throw new RestoreError(point.what, 'a checkpoint of this job as it is now (same operators, stages and parallelism)', 'one of a changed job; take a savepoint before changing the job and restore from it');
  const problems = stateCompatibility(point.meta.states, point.meta.maxParallelism, plan);
  if (problems.length) throw new StateCompatibilityError(point.what, problems);
  return 'changed';
}

/** Source positions as arrays per source (`${source}#${p}` keys). */
export function positionsBySource(positions: Readonly<Record<SourcePartitionKey, number>>): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const [sp, n] of Object.entries(positions)) {
    const i = sp.lastIndexOf('#');
    (out[sp.slice(0, i)] ??= [])[Number(sp.slice(i + 1))] = n;
  }
  return out;
}
