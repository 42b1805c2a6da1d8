/**
 * The CLI and the soak's jobs compiled once per soak by esbuild into ES modules with shared
 * chunks, so a child process starts without a TypeScript loader: `sluice run` on a small
 * input takes about half the time of `bin/sluice.js` under tsx (module loading was most of
 * a seed's time). The jobs are entry points of the same build, so a job and the CLI share
 * one copy of every module (classes, fault-site state). Packages stay bare imports,
 * resolved from the repository's node_modules: the build sits under `.cache/` of the
 * repository, one directory per process, removed when that process exits.
 */
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { JOBS, type Query } from './plan.ts';

/** Jobs of the build besides the Nexmark queries and the timers job: `sluice dev`'s numbering job. */
export const DEV_JOB_SOURCE = 'bench/soak/dev-job.ts';

export interface CliBundle {
  /** The CLI's entry (what `bin/sluice.js` runs). */
  readonly cli: string;
  /** The compiled module of a soak job. */
  job(query: Query | 'dev'): string;
}

let built: Promise<CliBundle> | undefined;

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
};

async function build(root: string): Promise<CliBundle> {
  const base = join(root, '.cache', 'soak-cli');
  // Builds of processes that died without their exit handler (a killed test run).
  if (existsSync(base)) for (const d of readdirSync(base)) if (!alive(Number(d.split('-')[0]))) rmSync(join(base, d), { recursive: true, force: true });
  const dir = join(base, `${process.pid}-${Date.now()}`);
  const { build: esbuild } = await import('esbuild');
  const entryPoints: Record<string, string> = { cli: join(root, 'lib/cli/main.ts'), dev: join(root, DEV_JOB_SOURCE) };
  for (const [query, path] of Object.entries(JOBS)) entryPoints[query] = join(root, path);
  await esbuild({
    entryPoints,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    packages: 'external',
    outdir: dir,
    outExtension: { '.js': '.mjs' },
    logLevel: 'silent',
  });
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return { cli: join(dir, 'cli.mjs'), job: (query) => join(dir, `${query}.mjs`) };
}

/** The build of this process (made on the first call). */
export function cliBundle(root: string): Promise<CliBundle> {
  built ??= build(root).catch((e: unknown) => {
    built = undefined;
    throw new Error(`soak: building the CLI bundle failed: ${(e as Error).message}`);
  });
  return built;
}
