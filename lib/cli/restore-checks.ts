/**
 * What the CLI checks before it opens a checkpoint directory, so that a refusal says what
 * it looked at and what would work:
 * - `--from`: an epoch that is not retained, or a label that is no savepoint, is reported
 *   with the directory looked in and the checkpoints and savepoints that do exist;
 * - `--resume` of a changed job: plan.json (written by every checkpointed run and dev) holds
 *   the plan the checkpoints were taken of, so the refusal names the operators, stages and
 *   parallelism that differ instead of two fingerprints.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Job } from '../api/stream.ts';
import { planFingerprint } from '../checkpoint/fingerprint.ts';
import { RECORD_NAME } from '../checkpoint/driver.ts';
import { FilePointerStore, writeFileAtomic } from '../checkpoint/local-storage.ts';
import { ConfigError } from '../errors.ts';
import { compile, type PhysicalPlan } from '../graph/compile.ts';

/** The plan a directory's checkpoints were taken of, as plan.json records it. */
export interface PlanRecord {
  readonly fingerprint: string;
  readonly maxParallelism: number;
  /** [name, kind] per operator. */
  readonly operators: readonly (readonly [string, string])[];
  /** Per stage: its name, parallelism and operators' names. */
  readonly stages: readonly { readonly name: string; readonly parallelism: number; readonly operators: readonly string[] }[];
}

const PLAN_FILE = 'plan.json';

export function planRecord(plan: PhysicalPlan): PlanRecord {
  const names = plan.job.nodes.map((n) => n.name);
  return {
    fingerprint: planFingerprint(plan),
    maxParallelism: plan.job.maxParallelism,
    operators: plan.job.nodes.map((n) => [n.name, n.spec.kind] as const),
    stages: plan.stages.map((s) => ({ name: s.name, parallelism: s.parallelism, operators: s.nodes.map((i) => names[i]!) })),
  };
}

/** What differs from `was` to `now`, one phrase each; empty when only edges or state descriptors changed. */
export function planChanges(was: PlanRecord, now: PlanRecord): string[] {
  const out: string[] = [];
  if (was.maxParallelism !== now.maxParallelism) out.push(`maxParallelism ${was.maxParallelism} -> ${now.maxParallelism}`);
  const kinds = (p: PlanRecord) => new Map(p.operators.map(([n, k]) => [n, k]));
  const [k0, k1] = [kinds(was), kinds(now)];
  for (const [n, k] of k1) if (!k0.has(n)) out.push(`operator "${n}" (${k}) added`);
  for (const [n, k] of k0) if (!k1.has(n)) out.push(`operator "${n}" (${k}) removed`);
  for (const [n, k] of k1) if (k0.has(n) && k0.get(n) !== k) out.push(`operator "${n}" was ${k0.get(n)}, is now ${k}`);
  const stageOf = (p: PlanRecord) => new Map(p.stages.flatMap((s) => s.operators.map((o) => [o, s.name] as const)));
  const [s0, s1] = [stageOf(was), stageOf(now)];
  for (const [o, s] of s1) if (s0.has(o) && s0.get(o) !== s) out.push(`operator "${o}" moved from stage "${s0.get(o)}" to "${s}"`);
  const stages = (p: PlanRecord) => new Map(p.stages.map((s) => [s.name, s]));
  const [st0, st1] = [stages(was), stages(now)];
  if (was.stages.length !== now.stages.length) out.push(`${was.stages.length} stages -> ${now.stages.length}`);
  for (const [name, s] of st1) {
    const before = st0.get(name);
    if (before && before.parallelism !== s.parallelism) out.push(`stage "${name}" parallelism ${before.parallelism} -> ${s.parallelism}`);
  }
  return out;
}

export function recordPlan(dir: string, job: Job): void {
  mkdirSync(dir, { recursive: true });
  writeFileAtomic(join(dir, PLAN_FILE), JSON.stringify(planRecord(compile(job.graph)), null, 2));
}

function readPlan(dir: string): PlanRecord | undefined {
  try {
    return JSON.parse(readFileSync(join(dir, PLAN_FILE), 'utf8')) as PlanRecord;
  } catch {
    return undefined;
  }
}

/**
 * --resume over checkpoints of another plan: refused here, naming what changed (the
 * coordinator would refuse it too, with the two fingerprints only).
 */
export async function checkResumable(dir: string, job: Job): Promise<void> {
  // The coordinator's record in the pointer store carries the fingerprint of the plan it checkpoints.
  const record = (await new FilePointerStore(join(dir, 'pointers')).read<{ fingerprint?: string }>(RECORD_NAME))?.value;
  if (!record?.fingerprint) return;
  const now = planRecord(compile(job.graph));
  if (record.fingerprint === now.fingerprint) return;
  const was = readPlan(dir);
  const changes = was && was.fingerprint === record.fingerprint ? planChanges(was, now) : [];
  const what = changes.length ? changes.join('; ') : `the plan's edges or state (fingerprint ${record.fingerprint} -> ${now.fingerprint})`;
  // Only partition counts changed: rescaling goes through a savepoint of the running job.
  const rescale = changes.length > 0 && changes.every((c) => / parallelism \d+ -> \d+$/.test(c))
    ? '; to rescale, resume as it was, take a savepoint (sluice savepoint <job> --label L), stop it, then sluice restore <job> --from L --parallelism P'
    : '';
  throw new ConfigError(
    '--resume',
    `the job as its checkpoints in ${dir} were taken (resume with the job, --param and --parallelism as they were, or start over without --resume; a changed job continues from a savepoint: sluice restore --from <label>${rescale})`,
    `a changed job: ${what}`,
  );
}

/** --from names a retained checkpoint's epoch, a savepoint label of `dir`, or a savepoint directory. */
export function checkRestoreSource(dir: string, from: string, l: { checkpoints: readonly { epoch: number }[]; savepoints: readonly { label: string }[] }): void {
  const epochs = l.checkpoints.map((c) => c.epoch);
  const labels = l.savepoints.map((s) => s.label);
  if (/^\d+$/.test(from) ? epochs.includes(Number(from)) : labels.includes(from) || existsSync(join(from, 'meta.json'))) return;
  const there = `retained checkpoints ${epochs.length ? epochs.join(', ') : '(none)'}; savepoints ${labels.length ? labels.map((s) => `"${s}"`).join(', ') : '(none)'}`;
  const looked = /^\d+$/.test(from)
    ? `epoch ${from}: no such retained checkpoint in ${resolve(dir)}`
    : `"${from}": no savepoint of that label in ${resolve(dir, 'savepoints')}, and no savepoint directory ${resolve(from)} (with a meta.json)`;
  throw new ConfigError('--from', `a retained checkpoint's epoch, a savepoint label or a savepoint directory (in ${resolve(dir)}: ${there}; another directory: --checkpoint-dir)`, looked);
}
