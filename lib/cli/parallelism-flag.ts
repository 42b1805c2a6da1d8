/**
 * `--parallelism P` and `--parallelism operator=P` (repeatable) on `run`, `dev` and
 * `restore`: the job at other parallelisms (Job.withParallelism). From a savepoint
 * (`restore --from`), state, timers and key groups move to where the new plan runs them.
 */
import type { ParallelismOverride } from '../api/logical.ts';
import type { Job } from '../api/stream.ts';
import { ConfigError } from '../errors.ts';

const EXPECTED = 'P (the default parallelism of the operators without their own) or operator=P, P a positive integer';

export function parseParallelism(values: readonly string[] | undefined): ParallelismOverride | undefined {
  if (!values?.length) return undefined;
  let fallback: number | undefined;
  const operators: Record<string, number> = {};
  for (const v of values) {
    const eq = v.lastIndexOf('=');
    const n = Number(eq < 0 ? v : v.slice(eq + 1));
    if (!Number.isSafeInteger(n) || n < 1 || eq === 0) throw new ConfigError('--parallelism', EXPECTED, JSON.stringify(v));
    if (eq < 0) fallback = n;
    else operators[v.slice(0, eq)] = n;
  }
  return { ...(fallback !== undefined ? { default: fallback } : {}), ...(Object.keys(operators).length ? { operators } : {}) };
}

/** The job at the parallelisms of `--parallelism`, or as it is without the flag. */
export function withParallelismFlag(job: Job, values: readonly string[] | undefined): Job {
  const o = parseParallelism(values);
  return o ? job.withParallelism(o) : job;
}
