/**
 * `sluice state get <job> <operator> <key>`: one key's keyed state as a checkpoint (the
 * latest, or --from an epoch or savepoint) holds it: an embedded checkpoint directory, a
 * local-AWS run's or a deployed job's (--target local-aws|aws; the snapshots have one format). Entities are `${operator}\u0001
 * ${keyToString(key)}`; a map state's entries are fields `${name}\u0002${JSON key}`.
 */
import { join } from 'node:path';
import { keyToString } from '../api/types.ts';
import { fromBytes } from '../checkpoint/codec.ts';
import { POINTER_NAME } from '../checkpoint/driver.ts';
import { DirectoryBlobStore, FilePointerStore } from '../checkpoint/local-storage.ts';
import { type CommitPointer, type Manifest, manifestObjectKey } from '../checkpoint/protocol.ts';
import { restoreManifest } from '../checkpoint/snapshot.ts';
import type { BlobStore } from '../checkpoint/storage.ts';
import { loadRestorePoint } from '../aws/restore/savepoints.ts';
import { type AwsTarget, type AwsTargetFlags, type Resolved, withTarget } from './checkpoints-aws.ts';
import { ConfigError } from '../errors.ts';
import { defaultCheckpointDir } from '../local/checkpointing.ts';
import { loadSavepoint } from '../local/restore.ts';
import { listCheckpoints } from './checkpoints.ts';
import { loadJob, parseParams } from './load-job.ts';
import { checkRestoreSource } from './restore-checks.ts';

type Log = (line: string) => void;

/** What `sluice state get --json` prints. */
export interface StateGetResult {
  job: string;
  operator: string;
  /** The key as it matched: a string, or a number when the text is one and only the number matched. */
  key: string | number;
  /** "checkpoint 12" or "savepoint \"v1\"". */
  from: string;
  epoch: number;
  /** Per state name: a value state's value, or a map state's entries as an object. */
  state: Record<string, unknown>;
}

/** `--target` and the deployment flags for local-aws and aws (lib/cli/checkpoints-aws.ts). */
export type StateGetFlags = { checkpointDir?: string; from?: string; param?: string[]; target?: 'embedded' | AwsTarget } & Omit<Partial<AwsTargetFlags>, 'target'>;

export async function stateGetCommand(jobPath: string, operator: string, rawKey: string, opts: StateGetFlags, out: Log): Promise<StateGetResult> {
  const job = await loadJob(jobPath, parseParams(opts.param));
  const operators = job.graph.nodes.map((n) => n.name);
  if (!operators.includes(operator)) throw new ConfigError('<operator>', `an operator of job "${job.name}": ${operators.map((o) => `"${o}"`).join(', ')}`, `"${operator}"`);
  if (opts.target === 'local-aws' || opts.target === 'aws') {
    const target = opts.target;
    return withTarget(jobPath, { ...opts, target }, async (r) => {
      const point = await pickAws(r, opts.from);
      return findKeyState({ ...point, job: job.name, operator, rawKey, where: r.where }, out);
    });
  }
  const dir = opts.checkpointDir ?? defaultCheckpointDir(job.name);
  return findKeyState({ ...(await pick(job.name, dir, opts.from)), job: job.name, operator, rawKey, where: dir }, out);
}

interface KeyLookup {
  readonly job: string;
  readonly operator: string;
  readonly rawKey: string;
  readonly manifest: Manifest;
  readonly blobs: BlobStore;
  /** "checkpoint 12" or "savepoint \"v1\"". */
  readonly from: string;
  /** Where the checkpoints are, for messages. */
  readonly where: string;
}

/** The key's state in a checkpoint's snapshots; the same on every target (one snapshot format). */
async function findKeyState(l: KeyLookup, out: Log): Promise<StateGetResult> {
  const { job, operator, rawKey, manifest, from, where } = l;
  const partitions = await restoreManifest(manifest, l.blobs);
  const candidates: (string | number)[] = [rawKey];
  if (/^-?(0|[1-9]\d*)(\.\d+)?$/.test(rawKey)) candidates.push(Number(rawKey));
  const prefix = `${operator}\u0001`;
  let keys = 0;
  const samples: string[] = [];
  for (const key of candidates) {
    const entity = prefix + keyToString(key);
    for (const p of partitions.values()) {
      const hit = p.entities.get(entity);
      if (hit) {
        const state = decodeFields(hit.fields);
        const result: StateGetResult = { job, operator, key, from, epoch: manifest.epoch, state };
        out(`operator "${operator}", key ${JSON.stringify(key)}, in ${from} (epoch ${manifest.epoch}) of ${where}:`);
        for (const [name, value] of Object.entries(state)) out(`  ${name} = ${JSON.stringify(value)}`);
        return result;
      }
    }
  }
  for (const p of partitions.values()) {
    for (const e of p.entities.keys()) {
      if (!e.startsWith(prefix)) continue;
      keys++;
      if (samples.length < 5) samples.push(JSON.stringify(e.slice(prefix.length + 1)));
    }
  }
  throw new ConfigError(
    '<key>',
    keys ? `a key operator "${operator}" has state for in ${from} of ${where} (${keys} keys, e.g. ${samples.join(', ')})` : `a key with state: operator "${operator}" has no keyed state in ${from} of ${where}`,
    JSON.stringify(rawKey),
  );
}

/** The latest checkpoint of a local-AWS run or a deployed job, or --from a retained epoch or a savepoint label. */
async function pickAws(r: Resolved, from: string | undefined): Promise<{ manifest: Manifest; blobs: BlobStore; from: string }> {
  const job = r.plan.job.name;
  if (from !== undefined) {
    const point = await loadRestorePoint({ blobs: r.blobs, job }, from);
    return { manifest: point.manifest, blobs: point.blobs, from: point.what };
  }
  const pointer = (await r.pointers.read<CommitPointer>(POINTER_NAME))?.value;
  const bytes = pointer ? await r.blobs.get(pointer.manifestKey) : undefined;
  if (!pointer || !bytes) throw new ConfigError('<job>', `a completed checkpoint of job "${job}" in ${r.where} (or --from <savepoint>)`, 'none');
  return { manifest: fromBytes<Manifest>(bytes), blobs: r.blobs, from: `checkpoint ${pointer.epoch}` };
}

async function pick(job: string, dir: string, from: string | undefined): Promise<{ manifest: Manifest; blobs: BlobStore; from: string }> {
  const blobs = new DirectoryBlobStore(join(dir, 'blobs'));
  if (from === undefined) {
    const pointer = (await new FilePointerStore(join(dir, 'pointers')).read<CommitPointer>(POINTER_NAME))?.value;
    const bytes = pointer ? await blobs.get(pointer.manifestKey) : undefined;
    if (!pointer || !bytes) throw new ConfigError('--checkpoint-dir', `a directory with a completed checkpoint of job "${job}" (or --from <savepoint>)`, `${dir}, with none`);
    return { manifest: fromBytes<Manifest>(bytes), blobs, from: `checkpoint ${pointer.epoch}` };
  }
  checkRestoreSource(dir, from, await listCheckpoints(job, dir));
  if (/^\d+$/.test(from)) {
    const bytes = (await blobs.get(manifestObjectKey(job, Number(from))))!;
    return { manifest: fromBytes<Manifest>(bytes), blobs, from: `checkpoint ${from}` };
  }
  const byLabel = join(dir, 'savepoints', from);
  const loaded = loadSavepoint((await listCheckpoints(job, dir)).savepoints.some((s) => s.label === from) ? byLabel : from);
  return { manifest: loaded.manifest, blobs: loaded.blobs, from: `savepoint "${loaded.meta?.label ?? from}"` };
}

/** Fields to state: `name` -> value, `name\u0002<JSON key>` -> entries of map state `name`; internal `__` fields left out. */
function decodeFields(fields: ReadonlyMap<string, unknown>): Record<string, unknown> {
  const state: Record<string, unknown> = {};
  for (const [f, v] of [...fields].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (f.startsWith('__')) continue;
    const i = f.indexOf('\u0002');
    if (i < 0) state[f] = v;
    else {
      const map = (state[f.slice(0, i)] ??= {}) as Record<string, unknown>;
      map[String(JSON.parse(f.slice(i + 1)))] = v;
    }
  }
  return state;
}
