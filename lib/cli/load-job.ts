/**
 * Loading a job module for the CLI: `sluice run|dev <job>` import the module
 * (path resolved from the working directory) and take its default export, a
 * Job or a function (params) => Job. `--param key=value` values are numbers,
 * booleans or strings, so a function job can declare typed parameters.
 */
import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Job } from '../api/stream.ts';
import { ConfigError } from '../errors.ts';
import type { LogicalNode } from '../graph/logical.ts';

export type JobParams = Record<string, string | number | boolean>;

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

/** Structural check, so a job built against another copy of the library is still recognised. */
export function isJob(x: unknown): x is Job {
  const graph = (x as { graph?: { nodes?: unknown; sources?: unknown } } | null)?.graph;
  return typeof x === 'object' && x !== null && !!graph && Array.isArray(graph.nodes) && typeof graph.sources === 'function';
}

export async function loadJob(path: string, params: JobParams = {}): Promise<Job> {
  const file = resolve(process.cwd(), path);
  try {
    const s = await stat(file);
    if (!s.isFile()) throw Object.assign(new Error('not a file'), { code: 'EISDIR' });
  } catch (err) {
    throw new ConfigError('<job>', 'a path to a job module (.ts or .js)', `"${path}" (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (err) {
    throw new Error(`cannot load job module "${path}": ${(err as Error).message}`, { cause: err });
  }
  const exported = mod.default;
  if (isJob(exported)) {
    if (Object.keys(params).length > 0) {
      throw new ConfigError('--param', `a job module whose default export is a function (params) => Job`, `"${path}", which exports a fixed Job`);
    }
    return exported;
  }
  if (typeof exported === 'function') {
    const job: unknown = await (exported as (p: JobParams) => unknown)(params);
    if (isJob(job)) return job;
    throw new ConfigError(`default export of "${path}"`, 'a function returning a Job', describe(job));
  }
  throw new ConfigError(`default export of "${path}"`, 'a Job or a function (params) => Job', describe(exported));
}

function describe(v: unknown): string {
  if (v === undefined) return 'nothing (add `export default job`)';
  if (v === null) return 'null';
  if (typeof v === 'object') return `an object with keys ${Object.keys(v).slice(0, 5).join(', ') || '(none)'}`;
  return typeof v;
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
