/**
 * Checkpoint garbage, shared by the in-process driver (driver.ts) and the Step Functions
 * tasks (lib/aws/checkpoint/checkpoint-steps.ts): the manifests and stats of epochs outside `keep`,
 * and the snapshot objects that no kept manifest's chain names. It lists the stores, so it
 * also finds what a crashed coordinator left behind (snapshots of an epoch that never
 * committed). Call it only with no epoch in flight: a live epoch's snapshots are in no
 * manifest yet.
 */
import { fromBytes } from './codec.ts';
import type { Manifest } from './protocol.ts';
import type { BlobStore } from './storage.ts';

/** The epoch a manifest or stats key names (`.../000000000042.json`). */
const epochOf = (key: string) => Number(/(\d{12})\.json$/.exec(key)?.[1] ?? NaN);

export async function collectGarbage(blobs: BlobStore, job: string, keep: ReadonlySet<number>): Promise<void> {
  const manifests = await blobs.list(`${job}/manifests/`);
  const stats = (await blobs.list(`${job}/checkpoints/`)).filter((k) => !keep.has(epochOf(k)));
  const live = new Set<string>();
  for (const k of manifests.filter((m) => keep.has(epochOf(m)))) {
    const bytes = await blobs.get(k);
    if (bytes) for (const p of Object.values(fromBytes<Manifest>(bytes).partitions)) for (const l of p.chain) live.add(l.key);
  }
  const snapshots = (await blobs.list(`${job}/snapshots/`)).filter((k) => !live.has(k));
  const drop = [...manifests.filter((k) => !keep.has(epochOf(k))), ...stats, ...snapshots];
  if (drop.length) await blobs.delete(drop);
}
