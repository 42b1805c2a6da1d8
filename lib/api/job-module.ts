/**
 * What a job module exports: its default export is a Job, or a function
 * `(params) => Job | Promise<Job>` for jobs with parameters (`sluice run --param`,
 * SluiceJob's `jobParams`). One resolver for the CLI and the Lambda bundles.
 */
import { ConfigError } from '../errors.ts';
import type { Job } from './stream.ts';

export type JobParams = Record<string, string | number | boolean>;

/** Structural check, so a job built against another copy of the library is still recognised. */
export function isJob(x: unknown): x is Job {
  const graph = (x as { graph?: { nodes?: unknown; sources?: unknown } } | null)?.graph;
  return typeof x === 'object' && x !== null && !!graph && Array.isArray(graph.nodes) && typeof graph.sources === 'function';
}

/** The job a loaded module stands for; `where` names the module in errors. */
export async function jobFromModule(mod: Record<string, unknown>, params: JobParams, where: string): Promise<Job> {
  const exported = mod.default;
  if (isJob(exported)) {
    if (Object.keys(params).length > 0) {
      throw new ConfigError('--param', `a job module whose default export is a function (params) => Job`, `${where}, which exports a fixed Job`);
    }
    return exported;
  }
  if (typeof exported === 'function') {
    const job: unknown = await (exported as (p: JobParams) => unknown)(params);
    if (isJob(job)) return job;
    throw new ConfigError(`default export of ${where}`, 'a function returning a Job', describe(job));
  }
  throw new ConfigError(`default export of ${where}`, 'a Job or a function (params) => Job', describe(exported));
}

function describe(v: unknown): string {
  if (v === undefined) return 'nothing (add `export default job`)';
  if (v === null) return 'null';
  if (typeof v === 'object') return `an object with keys ${Object.keys(v).slice(0, 5).join(', ') || '(none)'}`;
  return typeof v;
}
