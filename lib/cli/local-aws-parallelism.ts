/**
 * The parallelism of a `sluice run --target local-aws` with checkpoints: a fresh run's
 * `--parallelism` is kept in its identity (local-aws.json), and a resume runs at what the
 * identity says, so the plan always matches its checkpoints; changing it is `sluice
 * rescale`'s (rescale.ts), which restores the state at the new parallelism.
 */
import type { ParallelismOverride } from '../api/logical.ts';
import type { Job } from '../api/stream.ts';
import { atParallelism, encodeParallelism } from '../aws/parallelism-env.ts';
import { ConfigError } from '../errors.ts';
import { readLocalAwsIdentity } from '../testing/local-aws/checkpointing.ts';
import { parseParallelism } from './parallelism-flag.ts';

/** How an override reads in a message. */
export function describeParallelism(o: ParallelismOverride | undefined): string {
  const parts = [...(o?.default !== undefined ? [String(o.default)] : []), ...Object.entries(o?.operators ?? {}).map(([k, v]) => `${k}=${v}`)];
  return parts.length ? `--parallelism ${parts.join(' --parallelism ')}` : "the job's own parallelism";
}

export function localAwsRunParallelism(job: Job, flag: readonly string[] | undefined, ck: { dir: string; resume: boolean }): { job: Job; parallelism?: ParallelismOverride } {
  const given = parseParallelism(flag);
  if (!ck.resume) return { job: atParallelism(job, given), ...(given ? { parallelism: given } : {}) };
  const id = readLocalAwsIdentity(ck.dir);
  const recorded = id?.parallelism;
  if (given && encodeParallelism(given) !== encodeParallelism(recorded)) {
    throw new ConfigError(
      '--parallelism',
      `the parallelism of the run in ${ck.dir} (${describeParallelism(recorded)}; a resume keeps it: leave the flag out). To change it: sluice rescale <job> --target local-aws --checkpoint-dir ${ck.dir} --stage <stage> --partitions <P>`,
      describeParallelism(given),
    );
  }
  return { job: atParallelism(job, recorded), ...(recorded ? { parallelism: recorded } : {}) };
}
