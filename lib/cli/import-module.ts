/**
 * Importing a user's job module from any project: `.js`/`.mjs`/`.cjs` natively (they
 * follow their package's module type, as Node treats them), TypeScript (`.ts`, `.mts`,
 * `.cts`) compiled by esbuild into one ES module in the job's project (compile-job.ts),
 * each loaded only then so the CLI starts without them. Bare imports (`sluice` included)
 * resolve from the job's own project, as Node resolves them.
 */
import { extname } from 'node:path';
import { pathToFileURL } from 'node:url';
import { JobModuleLoadError } from '../errors.ts';

const TYPESCRIPT = new Set(['.ts', '.mts', '.cts']);
/** This module is TypeScript when Sluice runs from its sources (its repository), JavaScript when installed. */
const FROM_SOURCES = import.meta.url.endsWith('.ts');
const JAVASCRIPT = new Set(['.js', '.mjs', '.cjs']);

/** What to do about the usual failures, in the user's terms. */
function hintFor(err: NodeJS.ErrnoException): string {
  const message = err.message ?? '';
  if (err.code === 'ERR_MODULE_NOT_FOUND' || err.code === 'MODULE_NOT_FOUND') {
    const pkg = /Cannot find (?:package|module) '([^']+)'/.exec(message)?.[1];
    if (pkg && !pkg.startsWith('.') && !pkg.startsWith('/')) return `install it in the job's project: npm install ${pkg.startsWith('@') ? pkg.split('/').slice(0, 2).join('/') : pkg.split('/')[0]}`;
    return 'check the import paths';
  }
  if (err.code === 'ERR_REQUIRE_ASYNC_MODULE' || err.code === 'ERR_REQUIRE_CYCLE_MODULE') {
    return 'the job is loaded as CommonJS because its package.json has no "type": "module"; rename it to .mts or set "type": "module"';
  }
  return '';
}

/**
 * A CommonJS module compiled from ESM syntax (`export default job` in a project without
 * "type": "module") reaches an ESM importer as { default: module.exports }, its own
 * exports one level down: take them from there.
 */
function commonJsExports(ns: Record<string, unknown>): Record<string, unknown> {
  const inner = ns.default as Record<string, unknown> | null | undefined;
  if (inner !== null && typeof inner === 'object' && (inner as { __esModule?: unknown }).__esModule === true) return inner;
  return ns;
}

/** The module namespace of the job file (an absolute path); `shown` is the path as the user gave it. */
export async function importJobModule(file: string, shown = file): Promise<Record<string, unknown>> {
  const ext = extname(file);
  if (!TYPESCRIPT.has(ext) && !JAVASCRIPT.has(ext)) {
    throw new JobModuleLoadError(shown, `unsupported extension "${ext || '(none)'}"`, 'expected .ts, .mts, .cts, .js, .mjs or .cjs');
  }
  try {
    if (JAVASCRIPT.has(ext)) return commonJsExports((await import(pathToFileURL(file).href)) as Record<string, unknown>);
    // From Sluice's own sources, tsx is registered already (bin/sluice.js, vitest).
    if (FROM_SOURCES) return (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    const compiled = await (await import('./compile-job.ts')).compileJob(file);
    if (compiled) return (await import(compiled)) as Record<string, unknown>;
    // No project around the job: tsx's namespaced loader (not register(): a globally
    // registered loader hands a CommonJS package's .ts file to require(), which refuses
    // ESM in the CLI's own module graph "in a cycle").
    const { tsImport } = await import('tsx/esm/api');
    return commonJsExports((await tsImport(pathToFileURL(file).href, import.meta.url)) as Record<string, unknown>);
  } catch (err) {
    throw new JobModuleLoadError(shown, (err as Error).message, hintFor(err as NodeJS.ErrnoException), { cause: err });
  }
}
