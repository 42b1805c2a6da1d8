/**
 * Where a job's functions are bundled from: the job module and the project around it
 * (the directory of its lock file), so esbuild resolves the job's imports, `sluice`
 * included, from the user's node_modules and the asset hash follows the user's lock file.
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { SluiceJobPropsError } from './errors.ts';
import type { JobBundle } from './function.ts';

/** What NodejsFunction accepts as a lock file, in the order a project is searched. */
export const LOCK_FILES = ['package-lock.json', 'yarn.lock', 'pnpm-lock.yaml', 'bun.lockb', 'bun.lock'] as const;

const JOB_EXTENSIONS = /\.(ts|mts|cts|js|mjs|cjs)$/;

/** The nearest lock file at or above `dir`. */
export function findLockFile(dir: string): string | undefined {
  for (let d = resolve(dir); ; d = dirname(d)) {
    for (const name of LOCK_FILES) {
      const f = join(d, name);
      if (existsSync(f)) return f;
    }
    if (dirname(d) === d) return undefined;
  }
}

export function findProject(props: { readonly jobModule?: unknown; readonly projectRoot?: string; readonly depsLockFilePath?: string }): JobBundle {
  if (typeof props.jobModule !== 'string' || props.jobModule.length === 0) {
    throw new SluiceJobPropsError('jobModule', 'the path of the module that exports the job (default export), e.g. "jobs/orders.ts"', props.jobModule === undefined ? 'undefined' : JSON.stringify(props.jobModule));
  }
  const jobModule = resolve(props.jobModule);
  if (!existsSync(jobModule) || !statSync(jobModule).isFile()) throw new SluiceJobPropsError('jobModule', 'an existing job module file', JSON.stringify(props.jobModule));
  if (!JOB_EXTENSIONS.test(jobModule)) throw new SluiceJobPropsError('jobModule', 'a .ts, .mts, .cts, .js, .mjs or .cjs file', JSON.stringify(props.jobModule));
  const lock = props.depsLockFilePath !== undefined ? resolve(props.depsLockFilePath) : findLockFile(props.projectRoot ?? dirname(jobModule));
  if (lock === undefined) {
    throw new SluiceJobPropsError('depsLockFilePath', `a lock file (${LOCK_FILES.join(', ')}) at or above the job module: run \`npm install\` in the project first`, `none above ${dirname(jobModule)}`);
  }
  if (!existsSync(lock)) throw new SluiceJobPropsError('depsLockFilePath', 'an existing lock file', JSON.stringify(props.depsLockFilePath));
  const projectRoot = resolve(props.projectRoot ?? dirname(lock));
  const inside = (f: string) => {
    const r = relative(projectRoot, f);
    return r !== '' && !r.startsWith('..') && !isAbsolute(r);
  };
  if (!inside(jobModule)) throw new SluiceJobPropsError('jobModule', `a file inside the project root ${projectRoot}`, jobModule);
  return { jobModule, projectRoot, depsLockFilePath: lock };
}
