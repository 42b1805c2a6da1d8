/**
 * Savepoints on the AWS path: requested through a control item, taken by the checkpoint
 * steps at their next epoch (a full snapshot of every partition, the manifest labelled),
 * and kept outside the checkpoint chain once committed.
 *
 *   state table  pk `${job}#c`  sk `ptr#savepoint-request`   SavepointRequest (compare-and-set)
 *   bucket       `${job}/savepoints/<label>/`                 a savepoint in the one format of both
 *                                                            runtimes (lib/checkpoint/savepoint.ts):
 *                                                            blobs/<key> and meta.json, written last
 *
 * The request is one item changed only by compare-and-set (DynamoDbPointerStore), so two
 * `sluice savepoint` calls cannot both think theirs is pending: a second label while one
 * is pending is a SavepointPendingError, the same label again is idempotent. The steps'
 * open action turns a pending request into the coordinator's pendingSavepoint (the epoch
 * opens at once, whatever the activity); after the savepoint epoch committed, the steps
 * copy its objects under the savepoint's prefix (self-contained: the chain's garbage
 * collection and a restore that starts a new chain never delete them), write the meta
 * object and mark the request written. A coordinator that dies in between finishes the
 * copy at its next commit or open (finishSavepoint is idempotent: objects are immutable).
 *
 * The embedded runtime writes the same format into a directory, so a savepoint of either
 * runtime restores on the other: `s3://<bucket>/${job}/savepoints/<label>/` names this one.
 */
import { fromBytes, toBytes } from '../../checkpoint/codec.ts';
import { type CheckpointStats, POINTER_NAME } from '../../checkpoint/driver.ts';
import { RestoreError } from '../../checkpoint/driver-errors.ts';
import { SavepointPendingError } from '../../checkpoint/errors.ts';
import { describePlan, type PlanDescription, readSavepoint, readSavepointMeta, type SavepointMeta, savepointFit, savepointObjects, writeSavepoint } from '../../checkpoint/savepoint.ts';
import { type CommitPointer, type Manifest, manifestObjectKey } from '../../checkpoint/protocol.ts';
import type { BlobStore, PointerStore } from '../../checkpoint/storage.ts';
import { SluiceError } from '../../errors.ts';

export const SAVEPOINT_REQUEST = 'savepoint-request';
export const SAVEPOINT_LABEL = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

export interface SavepointRequest {
  readonly label: string;
  readonly requestedAt: number;
  /** pending: asked for, not yet written; written: meta.json exists. */
  readonly status: 'pending' | 'written';
  readonly epoch?: number;
  readonly writtenAt?: number;
}

export type { PlanDescription };
/** A savepoint's meta in the bucket: the one savepoint format (lib/checkpoint/savepoint.ts). */
export type AwsSavepointMeta = SavepointMeta;
export { describePlan, savepointFit };

export function savepointPrefix(job: string, label: string): string {
  return `${job}/savepoints/${label}/`;
}

export function savepointMetaKey(job: string, label: string): string {
  return `${savepointPrefix(job, label)}meta.json`;
}

/** A label used before (its meta exists) cannot be taken again: savepoints are immutable. */
export class SavepointExistsError extends SluiceError {
  readonly code = 'SAVEPOINT_EXISTS';
  readonly retryable = false;
  constructor(
    readonly job: string,
    readonly label: string,
  ) {
    super(`savepoint "${label}" of job "${job}" already exists; choose another --label`);
  }
}

/** The savepoint request item changed under us more often than a user could cause: something else keeps writing it. */
export class SavepointRequestContendedError extends SluiceError {
  readonly code = 'SAVEPOINT_REQUEST_CONTENDED';
  readonly retryable = true;
  constructor(readonly job: string) {
    super(`job "${job}": the savepoint request item kept changing while it was being written; try again`);
  }
}

export function checkLabel(label: string): string {
  if (!SAVEPOINT_LABEL.test(label)) throw new RestoreError('--label', '1 to 100 letters, digits, ".", "_" or "-", starting with a letter or digit', JSON.stringify(label));
  return label;
}

/**
 * Record a savepoint request durably (compare-and-set). Returns whether it was new (false:
 * the same label was already pending). SavepointPendingError when another label is pending,
 * SavepointExistsError when this label was written before.
 */
export async function requestSavepoint(o: { pointers: PointerStore; blobs: BlobStore; job: string }, label: string, now: number): Promise<{ created: boolean; request: SavepointRequest }> {
  checkLabel(label);
  if (await o.blobs.get(savepointMetaKey(o.job, label))) throw new SavepointExistsError(o.job, label);
  for (let attempt = 0; attempt < 5; attempt++) {
    const cur = await o.pointers.read<SavepointRequest>(SAVEPOINT_REQUEST);
    const r = cur?.value;
    if (r?.status === 'pending') {
      if (r.label === label) return { created: false, request: r };
      throw new SavepointPendingError(r.label, label);
    }
    if (r?.status === 'written' && r.label === label) throw new SavepointExistsError(o.job, label);
    const request: SavepointRequest = { label, requestedAt: now, status: 'pending' };
    if (await o.pointers.compareAndSet(SAVEPOINT_REQUEST, cur?.version ?? 0, request)) return { created: true, request };
  }
  throw new SavepointRequestContendedError(o.job);
}

export async function readSavepointRequest(pointers: PointerStore): Promise<SavepointRequest | undefined> {
  return (await pointers.read<SavepointRequest>(SAVEPOINT_REQUEST))?.value;
}

/**
 * Copy a committed savepoint epoch under its prefix, then its meta, then mark the request
 * written. Idempotent (every object is immutable and the same bytes each time).
 */
export async function finishSavepoint(o: { pointers: PointerStore; blobs: BlobStore; job: string; plan: PlanDescription }, manifest: Manifest, manifestKey: string, stats: Pick<CheckpointStats, 'completedAt'>): Promise<SavepointMeta> {
  const label = manifest.savepoint?.label;
  if (!label) throw new RestoreError(`checkpoint ${manifest.epoch}`, 'a savepoint manifest (labelled)', 'an unlabelled manifest');
  const meta = await writeSavepoint({ source: o.blobs, target: o.blobs, prefix: savepointPrefix(o.job, label) }, manifest, manifestKey, { job: o.job, createdAt: stats.completedAt, takenOn: 'aws', ...o.plan });
  for (let attempt = 0; attempt < 5; attempt++) {
    const cur = await o.pointers.read<SavepointRequest>(SAVEPOINT_REQUEST);
    if (!cur || cur.value.label !== label || cur.value.status !== 'pending') break;
    if (await o.pointers.compareAndSet(SAVEPOINT_REQUEST, cur.version, { ...cur.value, status: 'written', epoch: manifest.epoch, writtenAt: stats.completedAt })) break;
  }
  return meta;
}

/**
 * A committed checkpoint kept as the savepoint `label` (with its plan's description), for
 * a restore into a changed plan where no coordinator runs to take a savepoint (`sluice
 * rescale --target local-aws`). Idempotent, as finishSavepoint.
 */
export async function savepointFromCheckpoint(o: { blobs: BlobStore; job: string; plan: PlanDescription }, manifest: Manifest, manifestKey: string, label: string, createdAt: number): Promise<SavepointMeta> {
  checkLabel(label);
  if (manifest.fingerprint !== o.plan.planFingerprint) {
    throw new RestoreError(`checkpoint ${manifest.epoch}`, `a checkpoint of the plan the run has (fingerprint ${o.plan.planFingerprint})`, `one of plan ${manifest.fingerprint}`);
  }
  return writeSavepoint({ source: o.blobs, target: o.blobs, prefix: savepointPrefix(o.job, label) }, { ...manifest, savepoint: { label } }, manifestKey, { job: o.job, createdAt, takenOn: 'aws', ...o.plan });
}

/** A BlobStore that reads one savepoint's copies by their original keys. */
export function savepointBlobs(blobs: BlobStore, job: string, label: string): BlobStore {
  return savepointObjects(blobs, savepointPrefix(job, label));
}

export async function listSavepoints(blobs: BlobStore, job: string): Promise<AwsSavepointMeta[]> {
  const prefix = `${job}/savepoints/`;
  // Only each savepoint's own meta.json (copied objects live under blobs/).
  const metas = (await blobs.list(prefix)).filter((k) => /^[^/]+\/meta\.json$/.test(k.slice(prefix.length)));
  const out: AwsSavepointMeta[] = [];
  for (const k of metas) {
    const b = await blobs.get(k);
    if (b) out.push(fromBytes<AwsSavepointMeta>(b));
  }
  return out.sort((a, b) => a.epoch - b.epoch);
}

export interface AwsCheckpointListing {
  readonly checkpoints: (CheckpointStats & { latest: boolean })[];
  readonly savepoints: AwsSavepointMeta[];
  /** A savepoint asked for and not written yet. */
  readonly pending: SavepointRequest | null;
}

/** Retained checkpoints (those whose manifest still exists), savepoints, and a pending request. */
export async function listAwsCheckpoints(o: { pointers: PointerStore; blobs: BlobStore; job: string }): Promise<AwsCheckpointListing> {
  const pointer = (await o.pointers.read<CommitPointer>(POINTER_NAME))?.value;
  const checkpoints: AwsCheckpointListing['checkpoints'] = [];
  for (const key of await o.blobs.list(`${o.job}/checkpoints/`)) {
    const body = await o.blobs.get(key);
    if (!body) continue;
    const s = fromBytes<CheckpointStats>(body);
    if (await o.blobs.get(s.manifestKey)) checkpoints.push({ ...s, latest: s.epoch === pointer?.epoch });
  }
  const request = await readSavepointRequest(o.pointers);
  return { checkpoints, savepoints: await listSavepoints(o.blobs, o.job), pending: request?.status === 'pending' ? request : null };
}

/** A checkpoint or savepoint to restore: its manifest, where its objects are, and (savepoints) what plan took it. */
export interface AwsRestorePoint {
  readonly what: string;
  readonly manifest: Manifest;
  readonly manifestKey: string;
  readonly blobs: BlobStore;
  readonly meta?: AwsSavepointMeta;
}

/** `from`: a retained checkpoint's epoch (digits) or a savepoint label. */
export async function loadRestorePoint(o: { blobs: BlobStore; job: string }, from: string): Promise<AwsRestorePoint> {
  if (/^\d+$/.test(from)) {
    const epoch = Number(from);
    const manifestKey = manifestObjectKey(o.job, epoch);
    const body = await o.blobs.get(manifestKey);
    if (!body) throw new RestoreError('--from', `a retained checkpoint of job "${o.job}" (see sluice checkpoints)`, `epoch ${epoch}, which is not retained`);
    return { what: `checkpoint ${epoch}`, manifest: fromBytes<Manifest>(body), manifestKey, blobs: o.blobs };
  }
  checkLabel(from);
  const prefix = savepointPrefix(o.job, from);
  if (!(await readSavepointMeta(o.blobs, prefix))) throw new RestoreError('--from', `a retained checkpoint's epoch or a savepoint label of job "${o.job}" (see sluice checkpoints)`, `"${from}", which is neither`);
  const s = await readSavepoint(o.blobs, prefix, `${prefix} in the bucket`);
  return { what: s.what, manifest: s.manifest, manifestKey: s.manifestKey, blobs: s.blobs, meta: s.meta };
}

/**
 * The manifest an in-place restore installs for a restore point of the same plan: a
 * checkpoint's own, or a savepoint's with every link naming its copy (the chain's
 * originals may be gone), stored beside the copy so the coordinator's pointer can name
 * it. The coordinator's garbage collection only deletes under `${job}/snapshots/` and
 * `${job}/manifests/`, so later chains built on it never lose these objects.
 */
export async function installableManifest(blobs: BlobStore, point: AwsRestorePoint): Promise<{ manifest: Manifest; manifestKey: string }> {
  if (!point.meta) return { manifest: point.manifest, manifestKey: point.manifestKey };
  const prefix = savepointPrefix(point.meta.job, point.meta.label);
  const m = point.manifest;
  const partitions = Object.fromEntries(Object.entries(m.partitions).map(([k, p]) => [k, { ...p, chain: p.chain.map((l) => ({ ...l, key: `${prefix}blobs/${l.key}` })) }]));
  const manifest: Manifest = { ...m, partitions };
  const manifestKey = `${prefix}manifest.json`;
  await blobs.put(manifestKey, toBytes(manifest));
  return { manifest, manifestKey };
}
