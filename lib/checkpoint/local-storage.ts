/**
 * Checkpoint storage on the local disk (the embedded runtime's "S3" and "ZooKeeper"):
 * - DirectoryBlobStore: immutable files; a put writes a temporary file, fsyncs it and
 *   hard-links it into place, so an object is either absent or complete and is never
 *   overwritten (link fails when the name exists);
 * - FilePointerStore: one small JSON file per name, changed by compare-and-set under a
 *   lock file created exclusively; the lock file holds the new value, fsynced, and is
 *   renamed over the old one (publishing it and releasing the lock in one step), then the
 *   directory is fsynced, so a crash leaves the old or the new one.
 * Plus in-memory versions for tests.
 */
import { closeSync, fsyncSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { decodeJson, encodeJson } from './codec.ts';
import { BlobKeyError, BlobOverwriteError, PointerLockedError } from './driver-errors.ts';
import type { BlobStore, PointerStore, PointerValue } from './storage.ts';

const TMP = '.tmp-';

function code(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException).code;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

/**
 * Open `path` with `flags`, making its directory only when it is missing (ENOENT): a
 * directory that exists costs no mkdir per write (a checkpoint writes several files).
 */
export function openMakingDir(path: string, flags: string): number {
  try {
    return openSync(path, flags);
  } catch (e) {
    if (code(e) !== 'ENOENT') throw e;
    mkdirSync(dirname(path), { recursive: true });
    return openSync(path, flags);
  }
}

/** Write bytes to a fresh temporary file beside `path`, fsynced unless `durable` is false; returns its name. */
function writeTemp(path: string, body: Uint8Array | string, durable = true): string {
  const tmp = join(dirname(path), `${TMP}${process.pid}-${Math.random().toString(36).slice(2, 10)}`);
  const fd = openMakingDir(tmp, 'wx');
  try {
    if (typeof body === 'string') writeSync(fd, body);
    else writeSync(fd, body);
    if (durable) fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return tmp;
}

export function fsyncDir(dir: string): void {
  try {
    const fd = openSync(dir, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    // Some file systems refuse fsync on directories; the rename is still atomic.
  }
}

/**
 * Replace a file atomically: temporary file, fsync, rename, fsync of the directory.
 * `durable: false` skips the fsyncs (still atomic against a process crash, not against
 * a power loss): for tests and benchmarks that measure the protocol, not the disk.
 */
export function writeFileAtomic(path: string, body: Uint8Array | string, durable = true): void {
  const tmp = writeTemp(path, body, durable);
  renameSync(tmp, path);
  if (durable) fsyncDir(dirname(path));
}

export interface LocalStorageOptions {
  /** fsync files and directories (default true). */
  readonly durable?: boolean;
}

export class DirectoryBlobStore implements BlobStore {
  private readonly durable: boolean;
  constructor(
    readonly root: string,
    options: LocalStorageOptions = {},
  ) {
    this.durable = options.durable ?? true;
  }

  private path(key: string): string {
    const parts = key.split('/');
    if (!key || key.startsWith('/') || parts.some((p) => p === '' || p === '.' || p === '..' || p.startsWith(TMP) || p.includes(sep) || p.includes('\0'))) throw new BlobKeyError(key);
    return join(this.root, ...parts);
  }

  async put(key: string, body: Uint8Array): Promise<void> {
    const path = this.path(key);
    // No read first: the link below refuses an existing name, and only then are the stored bytes compared.
    const tmp = writeTemp(path, body, this.durable);
    try {
      linkSync(tmp, path);
    } catch (e) {
      if (code(e) !== 'EEXIST') throw e;
      const now = readFileSync(path);
      if (!sameBytes(now, body)) throw new BlobOverwriteError(key);
    } finally {
      unlinkSync(tmp);
    }
    if (this.durable) fsyncDir(dirname(path));
  }

  /**
   * Make the directories that keys `${prefix}<name>` go to, ahead of the first put: a
   * job's storage is prepared when it opens, not by its first checkpoint.
   */
  makeDirs(prefixes: readonly string[]): void {
    for (const prefix of prefixes) mkdirSync(dirname(this.path(`${prefix}x`)), { recursive: true });
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    try {
      return readFileSync(this.path(key));
    } catch (e) {
      if (code(e) === 'ENOENT' || code(e) === 'ENOTDIR') return undefined;
      throw e;
    }
  }

  async list(prefix: string): Promise<string[]> {
    // Walk from the deepest directory the prefix names.
    const slash = prefix.lastIndexOf('/');
    const base = slash >= 0 ? prefix.slice(0, slash) : '';
    const out: string[] = [];
    const walk = (dir: string, rel: string) => {
      let entries;
      try {
        entries = readdirSync(dir, { withFileTypes: true });
      } catch (e) {
        if (code(e) === 'ENOENT' || code(e) === 'ENOTDIR') return;
        throw e;
      }
      for (const d of entries) {
        if (d.name.startsWith(TMP)) continue;
        const k = rel ? `${rel}/${d.name}` : d.name;
        if (d.isDirectory()) {
          if (k.startsWith(prefix) || prefix.startsWith(`${k}/`)) walk(join(dir, d.name), k);
        } else if (k.startsWith(prefix)) out.push(k);
      }
    };
    walk(base ? join(this.root, ...base.split('/')) : this.root, base);
    return out.sort();
  }

  async delete(keys: readonly string[]): Promise<void> {
    for (const k of keys) rmSync(this.path(k), { force: true });
  }
}

/** A dead holder's lock may be taken over; a live one is waited for, briefly. */
function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return code(e) === 'EPERM';
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** The holder's pid at the head of a lock file: the new pointer value, JSON with `holder` first. */
const HOLDER = /^\{"holder":(\d+)[,}]/;

export class FilePointerStore implements PointerStore {
  private readonly durable: boolean;
  constructor(
    readonly dir: string,
    options: LocalStorageOptions = {},
  ) {
    this.durable = options.durable ?? true;
  }

  private file(name: string): string {
    if (!/^[A-Za-z0-9._-]+$/.test(name)) throw new BlobKeyError(name);
    return join(this.dir, `${name}.json`);
  }

  async read<T>(name: string): Promise<PointerValue<T> | undefined> {
    let text: string;
    try {
      text = readFileSync(this.file(name), 'utf8');
    } catch (e) {
      if (code(e) === 'ENOENT') return undefined;
      throw e;
    }
    const { version, value } = decodeJson<PointerValue<T>>(text);
    return { version, value };
  }

  /**
   * Under `<name>.json.lock`, created exclusively: the lock file is written with the new
   * value (and its holder's pid), so that when the stored version is the expected one,
   * one rename publishes the value and releases the lock together; otherwise the lock file
   * is removed.
   */
  async compareAndSet<T>(name: string, expectedVersion: number, value: T): Promise<boolean> {
    const path = this.file(name);
    const lock = `${path}.lock`;
    const body = encodeJson({ holder: process.pid, version: expectedVersion + 1, value });
    this.lock(lock, body);
    let published = false;
    try {
      const current = (await this.read<T>(name))?.version ?? 0;
      if (current !== expectedVersion) return false;
      renameSync(lock, path);
      published = true;
    } finally {
      if (!published) unlinkSync(lock);
    }
    if (this.durable) fsyncDir(this.dir);
    return true;
  }

  /**
   * Create the lock file with `body` (fsynced when durable), waiting briefly for a live
   * holder; a dead holder's lock is taken over. The body is written to a temporary file
   * first and linked in (exclusive, like the blobs'), so a lock file never exists without
   * its holder: a process killed between creating a lock and writing it would otherwise
   * leave an empty lock that no one can attribute, and the directory locked for good.
   */
  private lock(path: string, body: string): void {
    const tmp = writeTemp(path, body, this.durable);
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          linkSync(tmp, path);
          return;
        } catch (e) {
          if (code(e) !== 'EEXIST') throw e;
        }
        let holder = NaN;
        try {
          holder = Number(HOLDER.exec(readFileSync(path, 'utf8'))?.[1] ?? NaN);
        } catch {
          // Released between our attempts.
        }
        if (Number.isInteger(holder) && holder !== process.pid && !pidAlive(holder)) rmSync(path, { force: true });
        else if (attempt >= 200) throw new PointerLockedError(path, Number.isInteger(holder) ? `process ${holder}` : 'an unknown process');
        else sleepSync(5);
      }
    } finally {
      unlinkSync(tmp);
    }
  }
}

export class MemoryBlobStore implements BlobStore {
  readonly objects = new Map<string, Uint8Array>();
  async put(key: string, body: Uint8Array): Promise<void> {
    const stored = this.objects.get(key);
    if (stored && !sameBytes(stored, body)) throw new BlobOverwriteError(key);
    this.objects.set(key, new Uint8Array(body));
  }
  async get(key: string): Promise<Uint8Array | undefined> {
    return this.objects.get(key);
  }
  async list(prefix: string): Promise<string[]> {
    return [...this.objects.keys()].filter((k) => k.startsWith(prefix)).sort();
  }
  async delete(keys: readonly string[]): Promise<void> {
    for (const k of keys) this.objects.delete(k);
  }
}

export class MemoryPointerStore implements PointerStore {
  readonly values = new Map<string, PointerValue<unknown>>();
  async read<T>(name: string): Promise<PointerValue<T> | undefined> {
    const v = this.values.get(name);
    return v ? (structuredClone(v) as PointerValue<T>) : undefined;
  }
  async compareAndSet<T>(name: string, expectedVersion: number, value: T): Promise<boolean> {
    const current = this.values.get(name)?.version ?? 0;
    if (current !== expectedVersion) return false;
    this.values.set(name, { version: current + 1, value: structuredClone(value) });
    return true;
  }
}
