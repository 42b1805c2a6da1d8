/**
 * Snapshot objects: one per (partition, epoch), immutable in the blob store. A full
 * snapshot holds the partition's whole keyed state and timers; a delta holds only the
 * entities and timers changed since the barrier's base epoch (an entity with its fields
 * at the barrier, or null when it is gone). Progress (channel positions, watermarks,
 * output sequence numbers) is small and always complete. Restoring applies a manifest
 * chain oldest first: the full snapshot, then each delta.
 */
import { createHash } from 'node:crypto';
import { type PartitionProgress, type TimerEntry, timerId } from '../state/backend.ts';
import { encodeJson, encodeJsonFast, fromBytes } from './codec.ts';
import { ManifestChainError } from './errors.ts';
import type { BlobStore } from './storage.ts';
import type { ChainLink, Manifest } from './protocol.ts';

export interface SnapshotObject {
  readonly format: 1;
  readonly job: string;
  readonly stage: number;
  readonly partition: number;
  readonly epoch: number;
  readonly baseEpoch: number;
  readonly full: boolean;
  readonly progress: PartitionProgress;
  /** One row per entity (changed ones in a delta, all in a full snapshot), sorted by entity. */
  readonly entities: readonly SnapshotRow[];
}

/** [key group, entity, its fields or null (none left), all its live timers]: an entity is replaced whole. */
export type SnapshotRow = readonly [number, string, readonly (readonly [string, unknown])[] | null, readonly SnapshotTimer[]];

/** A timer of the row's entity: [node, 0 event | 1 processing, time, namespace] (key group and key are the row's). */
export type SnapshotTimer = readonly [number, 0 | 1, number, string];

export function toSnapshotTimer(t: TimerEntry): SnapshotTimer {
  return [t.node, t.domain === 'event' ? 0 : 1, t.time, t.ns];
}

function fromSnapshotTimer(t: SnapshotTimer, kg: number, entity: string): TimerEntry {
  return { node: t[0], domain: t[1] === 0 ? 'event' : 'processing', time: t[2], kg, key: entity.slice(entity.indexOf('\u0001') + 1), ns: t[3] };
}

export function snapshotKey(job: string, stage: number, partition: number, epoch: number, bytes: Uint8Array): string {
  // Content-addressed: a retried barrier that computes the same snapshot rewrites the same
  // object (a no-op); one that differs (processing time moved) gets its own key.
  const hash = createHash('sha256').update(bytes).digest('hex').slice(0, 16);
  return `${job}/snapshots/${stage}-${partition}/${String(epoch).padStart(12, '0')}-${hash}.json`;
}

/**
 * Same bytes as toBytes(s). Rows rarely need tags, so all of them are written with one
 * JSON.stringify; that text is right unless it shows a `"$` key or more `null`s than the rows
 * of removed entities account for (a non-finite number or an undefined array slot also
 * becomes `null`, as may a string's text): then each row takes the fast path on its own.
 */
export function encodeSnapshot(s: SnapshotObject): Uint8Array {
  const head = encodeJson({ ...s, entities: [] });
  let removed = 0;
  for (const row of s.entities) if (row[2] === null) removed++;
  const plain = JSON.stringify(s.entities);
  const rows = !plain.includes('"$') && occurrences(plain, 'null') === removed ? plain.slice(1, -1) : s.entities.map(encodeJsonFast).join(',');
  return encoder.encode(`${head.slice(0, -2)}${rows}]}`);
}

const encoder = new TextEncoder();

function occurrences(text: string, word: string): number {
  let n = 0;
  for (let i = text.indexOf(word); i >= 0; i = text.indexOf(word, i + word.length)) n++;
  return n;
}

export function decodeSnapshot(bytes: Uint8Array): SnapshotObject {
  const s = fromBytes<SnapshotObject>(bytes);
  if (s?.format !== 1 || !Array.isArray(s.entities)) {
    throw new ManifestChainError(0, null, 'a snapshot object of format 1', `an object of format ${String((s as { format?: unknown })?.format)}`);
  }
  return s;
}

/** A partition's state rebuilt from its chain. */
export interface RestoredPartition {
  readonly stage: number;
  readonly partition: number;
  readonly epoch: number;
  readonly progress: PartitionProgress;
  /** entity -> { kg, fields } */
  readonly entities: Map<string, { kg: number; fields: Map<string, unknown> }>;
  readonly timers: Map<string, TimerEntry>;
  readonly bytes: number;
}

export function applyChain(objects: readonly SnapshotObject[], links: readonly ChainLink[], epoch: number): RestoredPartition {
  if (objects.length === 0) throw new ManifestChainError(epoch, null, 'a non-empty snapshot chain', 'none');
  if (!objects[0].full) throw new ManifestChainError(epoch, `${objects[0].stage}/${objects[0].partition}`, 'a chain starting with a full snapshot', `a delta of epoch ${objects[0].epoch}`);
  const entities = new Map<string, { kg: number; fields: Map<string, unknown> }>();
  const timersOf = new Map<string, readonly TimerEntry[]>();
  let progress = objects[0].progress;
  let bytes = 0;
  objects.forEach((o, i) => {
    if (o.epoch !== links[i].epoch) throw new ManifestChainError(epoch, `${o.stage}/${o.partition}`, `snapshot of epoch ${links[i].epoch} at ${links[i].key}`, `epoch ${o.epoch}`);
    if (o.full) {
      entities.clear();
      timersOf.clear();
    }
    for (const [kg, entity, fields, timers] of o.entities) {
      if (fields === null) entities.delete(entity);
      else entities.set(entity, { kg, fields: new Map(fields) });
      if (timers.length) timersOf.set(entity, timers.map((t) => fromSnapshotTimer(t, kg, entity)));
      else timersOf.delete(entity);
    }
    progress = o.progress;
    bytes += links[i].bytes;
  });
  const timers = new Map<string, TimerEntry>();
  for (const ts of timersOf.values()) for (const t of ts) timers.set(timerId(t), t);
  return { stage: objects[0].stage, partition: objects[0].partition, epoch, progress, entities, timers, bytes };
}

/** Reads every partition's chain of a manifest and rebuilds its state. */
export async function restoreManifest(manifest: Manifest, blobs: BlobStore): Promise<Map<string, RestoredPartition>> {
  const out = new Map<string, RestoredPartition>();
  for (const [key, part] of Object.entries(manifest.partitions)) {
    const objects: SnapshotObject[] = [];
    for (const link of part.chain) {
      const bytes = await blobs.get(link.key);
      if (!bytes) throw new ManifestChainError(manifest.epoch, key, `snapshot object ${link.key}`, 'nothing (deleted or never written)');
      objects.push(decodeSnapshot(bytes));
    }
    out.set(key, applyChain(objects, part.chain, manifest.epoch));
  }
  return out;
}

/** Sorted entity and timer lists for a snapshot object. */
export function sortedEntries<V>(m: ReadonlyMap<string, V>): [string, V][] {
  return [...m].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}
