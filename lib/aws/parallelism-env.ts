/**
 * A deployment's parallelism: what SluiceJob was given (`parallelism`), or what
 * `sluice rescale` set since, as SLUICE_PARALLELISM on every function of the job. The
 * handlers build the job at it (functions/job.ts), so producers route and consumers own
 * key groups by one plan; the CLI reads it back to know the plan a deployment runs.
 */
import { z } from 'zod';
import type { ParallelismOverride } from '../api/logical.ts';
import type { Job } from '../api/stream.ts';
import { ConfigError } from '../errors.ts';

export const PARALLELISM_ENV = 'SLUICE_PARALLELISM';

const positive = z.number().int().positive();
const schema = z.strictObject({ default: positive.optional(), operators: z.record(z.string(), positive).optional() });

/** The variable's value, or undefined when the override changes nothing. */
export function encodeParallelism(o: ParallelismOverride | undefined): string | undefined {
  if (!o || (o.default === undefined && !Object.keys(o.operators ?? {}).length)) return undefined;
  const operators = Object.fromEntries(Object.entries(o.operators ?? {}).sort(([a], [b]) => (a < b ? -1 : 1)));
  return JSON.stringify({ ...(o.default !== undefined ? { default: o.default } : {}), ...(Object.keys(operators).length ? { operators } : {}) });
}

/** The override a variable holds (undefined when unset or empty); a ConfigError naming `where` when it is not one. */
export function decodeParallelism(raw: string | undefined, where = PARALLELISM_ENV): ParallelismOverride | undefined {
  if (!raw) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new ConfigError(where, 'JSON {"default"?: P, "operators"?: {"<operator>": P}}', JSON.stringify(raw));
  }
  const r = schema.safeParse(parsed);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new ConfigError(`${where}${i.path.length ? `.${i.path.join('.')}` : ''}`, 'JSON {"default"?: P, "operators"?: {"<operator>": P}}, P a positive integer', JSON.stringify(raw));
  }
  return r.data;
}

/** The job at a deployment's parallelism. */
export function atParallelism(job: Job, o: ParallelismOverride | undefined): Job {
  return o && encodeParallelism(o) !== undefined ? job.withParallelism(o) : job;
}

/** Lambda's range for an SQS event source's maximum concurrency. */
export const MIN_CONCURRENCY = 2;
export const MAX_CONCURRENCY = 1000;

/**
 * A stage's maximum concurrency when none is set: its partitions (message groups, of which
 * Lambda runs at most one batch at a time each), at least Lambda's minimum, at most 10.
 */
export function defaultMaxConcurrency(partitions: number): number {
  return Math.min(Math.max(MIN_CONCURRENCY, partitions), 10);
}
