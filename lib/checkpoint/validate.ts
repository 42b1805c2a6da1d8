/**
 * Validation of everything a coordinator step receives. The inputs arrive as JSON from
 * Step Functions payloads, control items and partitions, so the static types are not
 * enough: each check names the field, what was expected and what was received.
 */
import { InvalidCoordinatorInputError, ManifestChainError, PlanMismatchError } from './errors.ts';
import {
  DEFAULT_CONFIG,
  participantKey,
  sourcePartitionKey,
  type Ack,
  type Activity,
  type CommitPointer,
  type CoordinatorConfig,
  type CoordinatorSetup,
  type Manifest,
  type Participant,
  type SourcePartitionKey,
} from './protocol.ts';

export function describe(v: unknown): string {
  if (v === undefined) return 'undefined';
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return String(v);
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? `${v.slice(0, 60)}...` : v);
  if (Array.isArray(v)) return `array(${v.length})`;
  return typeof v;
}

function fail(field: string, expected: string, received: unknown): never {
  throw new InvalidCoordinatorInputError(field, expected, describe(received));
}

export function checkTime(field: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) fail(field, 'a finite time in ms >= 0', v);
  return v;
}

export function checkInt(field: string, v: unknown, min: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) fail(field, `an integer >= ${min}`, v);
  return v;
}

function checkString(field: string, v: unknown): string {
  if (typeof v !== 'string' || v.length === 0) fail(field, 'a non-empty string', v);
  return v;
}

function checkRecord(field: string, v: unknown): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(field, 'an object', v);
  return v as Record<string, unknown>;
}

function checkPositions(field: string, v: unknown): Record<SourcePartitionKey, number> {
  const rec = checkRecord(field, v);
  for (const [k, pos] of Object.entries(rec)) checkInt(`${field}["${k}"]`, pos, 0);
  return rec as Record<SourcePartitionKey, number>;
}

export function resolveConfig(partial: CoordinatorSetup['config']): CoordinatorConfig {
  const c = { ...DEFAULT_CONFIG, ...partial, retention: { ...DEFAULT_CONFIG.retention, ...partial?.retention } };
  if (typeof c.timeoutMs !== 'number' || !Number.isFinite(c.timeoutMs) || c.timeoutMs <= 0) fail('config.timeoutMs', 'a finite number > 0', c.timeoutMs);
  checkTime('config.minIntervalMs', c.minIntervalMs);
  checkInt('config.maxChainLength', c.maxChainLength, 1);
  checkInt('config.retention.epochs', c.retention.epochs, 1);
  checkTime('config.retention.ms', c.retention.ms);
  // The history keeps the truncation point, the newest checkpoint and the last `epochs` ones in between.
  checkInt('config.historyLimit', c.historyLimit, Math.max(2, c.retention.epochs + 1));
  checkInt('config.abortedLimit', c.abortedLimit, 0);
  return c;
}

/** Participants sorted by (stage, partition), after checking they are distinct and source partitions unique. */
export function checkSetup(setup: CoordinatorSetup): { participants: Participant[]; config: CoordinatorConfig } {
  checkRecord('setup', setup);
  checkString('setup.job', setup.job);
  checkString('setup.fingerprint', setup.fingerprint);
  if (!Array.isArray(setup.participants) || setup.participants.length === 0) fail('setup.participants', 'a non-empty array', setup.participants);
  const seen = new Set<string>();
  const sources = new Set<string>();
  const participants = setup.participants.map((p, i) => {
    checkRecord(`setup.participants[${i}]`, p);
    const stage = checkInt(`setup.participants[${i}].stage`, p.stage, 0);
    const partition = checkInt(`setup.participants[${i}].partition`, p.partition, 0);
    const key = participantKey({ stage, partition });
    if (seen.has(key)) fail(`setup.participants[${i}]`, 'distinct (stage, partition) pairs', key);
    seen.add(key);
    if (!Array.isArray(p.sources)) fail(`setup.participants[${i}].sources`, 'an array of source names', p.sources);
    for (const s of p.sources) {
      const sp = sourcePartitionKey(checkString(`setup.participants[${i}].sources[]`, s), partition);
      if (sources.has(sp)) fail(`setup.participants[${i}].sources`, 'each source partition read by one participant', sp);
      sources.add(sp);
    }
    return { stage, partition, sources: [...p.sources].sort() };
  });
  // Without a source partition no input can ever be observed, so no epoch would ever run.
  if (sources.size === 0) fail('setup.participants', 'at least one participant reading a source', 'none');
  participants.sort((a, b) => a.stage - b.stage || a.partition - b.partition);
  return { participants, config: resolveConfig(setup.config) };
}

export function sourcePartitionsOf(participants: readonly Participant[]): SourcePartitionKey[] {
  return participants.flatMap((p) => p.sources.map((s) => sourcePartitionKey(s, p.partition)));
}

/** Shape of an ack (membership and chain checks are the coordinator's). */
export function checkAck(ack: Ack): Ack {
  checkRecord('ack', ack);
  checkInt('ack.epoch', ack.epoch, 1);
  checkInt('ack.stage', ack.stage, 0);
  checkInt('ack.partition', ack.partition, 0);
  checkInt('ack.baseEpoch', ack.baseEpoch, 0);
  if (ack.snapshot !== null) {
    checkRecord('ack.snapshot', ack.snapshot);
    checkString('ack.snapshot.key', ack.snapshot.key);
    checkInt('ack.snapshot.bytes', ack.snapshot.bytes, 0);
    checkInt('ack.snapshot.entities', ack.snapshot.entities, 0);
    if (typeof ack.snapshot.full !== 'boolean') fail('ack.snapshot.full', 'a boolean', ack.snapshot.full);
  }
  checkPositions('ack.positions', ack.positions);
  checkTime('ack.alignedAt', ack.alignedAt);
  checkTime('ack.ackedAt', ack.ackedAt);
  return ack;
}

export function checkActivity(activity: Activity, known: ReadonlySet<string>): void {
  checkRecord('activity', activity);
  if (activity.heads !== undefined) {
    const heads = checkPositions('activity.heads', activity.heads);
    for (const k of Object.keys(heads)) if (!known.has(k)) fail('activity.heads', `source partitions of the plan (${[...known].join(', ')})`, k);
  }
  if (activity.touched !== undefined) {
    if (!Array.isArray(activity.touched)) fail('activity.touched', 'an array of source partition keys', activity.touched);
    for (const k of activity.touched) if (!known.has(k)) fail('activity.touched', `source partitions of the plan (${[...known].join(', ')})`, k);
  }
}

export function checkPointer(pointer: CommitPointer): CommitPointer {
  checkRecord('pointer', pointer);
  checkInt('pointer.epoch', pointer.epoch, 1);
  checkString('pointer.manifestKey', pointer.manifestKey);
  checkTime('pointer.committedAt', pointer.committedAt);
  return pointer;
}

/** A manifest read back on resume must continue this plan's chain and cover every participant. */
export function checkManifest(
  manifest: Manifest,
  expect: { job: string; fingerprint: string; epoch: number; participants: readonly Participant[] },
): Manifest {
  checkRecord('manifest', manifest);
  if (manifest.job !== expect.job) throw new PlanMismatchError('manifest job', JSON.stringify(expect.job), describe(manifest.job));
  if (manifest.fingerprint !== expect.fingerprint) throw new PlanMismatchError('manifest plan fingerprint', expect.fingerprint, describe(manifest.fingerprint));
  if (manifest.epoch !== expect.epoch) throw new ManifestChainError(expect.epoch, null, `the manifest of the pointer's epoch ${expect.epoch}`, `manifest of epoch ${describe(manifest.epoch)}`);
  checkRecord('manifest.partitions', manifest.partitions);
  for (const p of expect.participants) {
    const key = participantKey(p);
    const part = manifest.partitions[key];
    if (!part || !Array.isArray(part.chain)) throw new ManifestChainError(manifest.epoch, key, 'a chain for every participant', 'none');
    part.chain.forEach((link, i) => {
      checkString(`manifest.partitions["${key}"].chain[${i}].key`, link.key);
      if (link.full && i !== 0) throw new ManifestChainError(manifest.epoch, key, 'a full snapshot only at the start of a chain', `full snapshot at position ${i}`);
    });
  }
  const positions = checkPositions('manifest.positions', manifest.positions);
  for (const sp of sourcePartitionsOf(expect.participants)) {
    if (positions[sp] === undefined) throw new ManifestChainError(manifest.epoch, null, `a position for source partition ${sp}`, 'none');
  }
  return manifest;
}
