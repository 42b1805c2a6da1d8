/**
 * Loading a job module for the CLI: `sluice run|dev <job>` import the module
 * (path resolved from the working directory) and take its default export, a
 * Job or a function (params) => Job. `--param key=value` values are numbers,
 * booleans or strings, so a function job can declare typed parameters.
 */
import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { importJobModule } from './import-module.ts';
import { isJob, jobFromModule, type JobParams } from '../api/job-module.ts';
import type { Job } from '../api/stream.ts';
import { ConfigError } from '../errors.ts';
import type { LogicalNode } from '../api/logical.ts';

export { isJob, type JobParams };

/** `--param a=1 --param b=x` -> { a: 1, b: 'x' }. */
export function parseParams(raw: readonly string[] = []): JobParams {
  const out: JobParams = {};
  for (const item of raw) {
    const eq = item.indexOf('=');
    const key = eq > 0 ? item.slice(0, eq).trim() : '';
    if (!/^[A-Za-z_$][\w$]*$/.test(key)) {
      throw new ConfigError('--param', 'key=value with a key of letters, digits and "_" (e.g. --param sizeMs=60000)', JSON.stringify(item));
    }
    if (key in out) throw new ConfigError('--param', `each key once`, `"${key}" twice`);
    out[key] = parseValue(item.slice(eq + 1));
  }
  return out;
}

function parseValue(v: string): string | number | boolean {
  if (v === 'true') return true;
  if (v === 'false') return false;
  // Only plain decimals become numbers, so values like "007" or "1e3" keep their text.
  if (/^-?(0|[1-9]\d*)(\.\d+)?$/.test(v)) return Number(v);
  return v;
}

export async function loadJob(path: string, params: JobParams = {}): Promise<Job> {
  const file = resolve(process.cwd(), path);
  try {
    const s = await stat(file);
    if (!s.isFile()) throw Object.assign(new Error('not a file'), { code: 'EISDIR' });
  } catch (err) {
    throw new ConfigError('<job>', 'a path to a job module (.ts, .mts, .js or .mjs)', `"${path}" (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return jobFromModule(await importJobModule(file, path), params, `"${path}"`);
}

export function sourceNodes(job: Job): LogicalNode[] {
  return job.graph.sources();
}

export function sinkNodes(job: Job): LogicalNode[] {
  return job.graph.sinks();
}

/** The node a flag names, or the only candidate; otherwise an error naming the flag and the choices. */
export function pickNode(flag: string, what: string, nodes: readonly LogicalNode[], requested: string | undefined, preferred?: readonly LogicalNode[]): LogicalNode {
  const names = nodes.map((n) => `"${n.name}"`).join(', ') || '(none)';
  if (requested !== undefined) {
    const hit = nodes.find((n) => n.name === requested);
    if (!hit) throw new ConfigError(flag, `the name of one of the job's ${what}s: ${names}`, `"${requested}"`);
    return hit;
  }
  for (const candidates of [preferred, nodes]) {
    if (candidates?.length === 1) return candidates[0];
  }
  if (nodes.length === 0) throw new ConfigError(flag, `a job with a ${what}`, `a job without one`);
  throw new ConfigError(flag, `the ${what} to use, since the job has several: ${names}`, 'nothing');
}
