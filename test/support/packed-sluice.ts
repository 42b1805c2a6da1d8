/**
 * Sluice as a user installs it: `npm pack` of this repository (which runs the prepack
 * build, tsc into dist/, as a publish would) installed into a fresh `npm init -y`
 * project, offline, from npm's cache. Shared by the tests that work in such a project
 * (test/package/installed-package.test.ts, test/docs/tutorial.test.ts).
 *
 * The tarball is made once per content of what goes into it (package.json, the lock
 * file, README.md, the tsconfigs, bin/ and the sources the build compiles) and kept in
 * the OS temporary directory, so test files that run at the same time, or again on
 * unchanged sources, share one pack. A lock directory serializes packing: two packs at
 * once would both rebuild dist/ under each other. Installs into such projects are kept
 * the same way (npmInstall), so the two tests, which install alike, run npm once.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, relative } from 'node:path';

export const ROOT = new URL('../..', import.meta.url).pathname;

/** What the tarball is built from: these files, and every file under these directories. */
const PACK_INPUT_FILES = ['package.json', 'package-lock.json', 'README.md', 'tsconfig.json', 'tsconfig.build.json'];
const PACK_INPUT_DIRS = ['bin', 'lib', 'functions', 'infra', 'examples'];

const CACHE = join(tmpdir(), 'sluice-packed');
const LOCK = join(CACHE, '.lock');
/** A lock older than this, or whose holder has exited, is taken over. */
const LOCK_STALE_MS = 15 * 60_000;
/** Cached tarballs of other contents are removed once this old. */
const PRUNE_AFTER_MS = 24 * 3600_000;

/** `name@version` as this repository's devDependencies pin it, so the install comes from npm's cache. */
export function devVersion(name: string): string {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> };
  const version = pkg.devDependencies[name];
  if (!version) throw new Error(`${name} is not a devDependency of this repository: no version known to be in npm's cache`);
  return `${name}@${version}`;
}

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (e.name === 'node_modules' || e.name.startsWith('.')) return [];
    const path = join(dir, e.name);
    return e.isDirectory() ? files(path) : e.isFile() ? [path] : [];
  });
}

/** A digest of every input of the tarball (names and contents). */
export function packInputsDigest(): string {
  const hash = createHash('sha256');
  const paths = [...PACK_INPUT_FILES.map((f) => join(ROOT, f)), ...PACK_INPUT_DIRS.flatMap((d) => files(join(ROOT, d)))].sort();
  for (const path of paths) {
    if (!existsSync(path)) continue;
    hash.update(relative(ROOT, path)).update('\0').update(readFileSync(path)).update('\0');
  }
  return hash.digest('hex').slice(0, 20);
}

const sleep = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function withLock<T>(fn: () => T): T {
  mkdirSync(CACHE, { recursive: true });
  for (;;) {
    try {
      mkdirSync(LOCK);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      let holder = 0;
      let age = 0;
      try {
        holder = Number(readFileSync(join(LOCK, 'pid'), 'utf8'));
        age = Date.now() - statSync(LOCK).mtimeMs;
      } catch {
        // the holder has not written its pid yet, or just released the lock
      }
      if ((holder > 0 && !alive(holder)) || age > LOCK_STALE_MS) rmSync(LOCK, { recursive: true, force: true });
      else sleep(250);
    }
  }
  try {
    writeFileSync(join(LOCK, 'pid'), String(process.pid));
    return fn();
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
}

function tarballIn(dir: string): string | undefined {
  if (!existsSync(dir)) return undefined;
  const name = readdirSync(dir).find((f) => f.endsWith('.tgz'));
  return name && join(dir, name);
}

/**
 * The path of `npm pack`'s tarball of this repository as it is now: the cached one when
 * the sources have not changed since it was made, else a new pack (about half a minute:
 * the prepack build).
 */
export function packedSluice(): string {
  return withLock(() => {
    const digest = packInputsDigest();
    const cached = tarballIn(join(CACHE, digest));
    if (cached) return cached;
    const staging = mkdtempSync(join(CACHE, 'staging-'));
    execFileSync('npm', ['pack', '--silent', '--pack-destination', staging], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
    if (!tarballIn(staging)) throw new Error(`npm pack wrote no tarball into ${staging}`);
    // Sources edited while packing: this tarball is of neither version; use it, keep none.
    if (packInputsDigest() !== digest) return tarballIn(staging)!;
    renameSync(staging, join(CACHE, digest));
    for (const entry of readdirSync(CACHE)) {
      const path = join(CACHE, entry);
      if (entry !== digest && entry !== 'installs' && !entry.startsWith('.') && Date.now() - statSync(path).mtimeMs > PRUNE_AFTER_MS) rmSync(path, { recursive: true, force: true });
    }
    return tarballIn(join(CACHE, digest))!;
  });
}

const NPM_INSTALL = ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];

/** `npm init -y` in a new directory. */
export function newProject(dir: string): void {
  mkdirSync(dir, { recursive: true });
  execFileSync('npm', ['init', '-y'], { cwd: dir, stdio: 'ignore' });
}

/** Kept installs (npmInstall), each a directory holding what one install left in its project. */
const INSTALLS = join(CACHE, 'installs');
/** What an install changes in a project. */
const INSTALL_RESULT = ['package.json', 'package-lock.json', 'node_modules'];
/** A kept install unused this long is removed (each is a few hundred megabytes; a run uses its own within minutes). */
const INSTALL_UNUSED_MS = 15 * 60_000;

/**
 * What an install's result is a function of: the project's folder name (`npm init -y`
 * names the package after it), its package.json and lock file before, the specs (a
 * tarball's path names its content digest), --save-dev, the project's place relative to
 * the cache (npm records a tarball by relative path) and the Node version (and its npm).
 */
function installKey(dir: string, args: readonly string[]): string {
  const hash = createHash('sha256').update(JSON.stringify([basename(dir), relative(dir, CACHE), process.version, args]));
  for (const f of ['package.json', 'package-lock.json']) hash.update('\0').update(existsSync(join(dir, f)) ? readFileSync(join(dir, f)) : '-');
  return hash.digest('hex').slice(0, 20);
}

/**
 * `npm install` of packages (a tarball's path, or name@version) into a project, from
 * npm's cache where it can. Its result is kept (installKey): an install whose result is
 * kept copies it into the project (seconds; npm takes about twenty).
 */
export function npmInstall(dir: string, specs: readonly string[], options: { dev?: boolean } = {}): void {
  const args = [...NPM_INSTALL, ...(options.dev ? ['--save-dev'] : []), ...specs];
  const kept = join(INSTALLS, installKey(dir, args));
  withLock(() => {
    mkdirSync(INSTALLS, { recursive: true });
    if (existsSync(kept)) {
      rmSync(join(dir, 'node_modules'), { recursive: true, force: true });
      // cp -a: node_modules/.bin holds symlinks, kept as links.
      execFileSync('cp', ['-a', `${kept}/.`, dir]);
      utimesSync(kept, new Date(), new Date());
      return;
    }
    execFileSync('npm', args, { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] });
    const staging = mkdtempSync(join(INSTALLS, 'staging-'));
    const made = INSTALL_RESULT.filter((f) => existsSync(join(dir, f))).map((f) => join(dir, f));
    execFileSync('cp', ['-a', ...made, staging]);
    renameSync(staging, kept);
    for (const entry of readdirSync(INSTALLS)) {
      const path = join(INSTALLS, entry);
      if (path !== kept && Date.now() - statSync(path).mtimeMs > INSTALL_UNUSED_MS) rmSync(path, { recursive: true, force: true });
    }
  });
}
