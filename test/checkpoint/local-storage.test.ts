/**
 * The local pointer store (FilePointerStore): compare-and-set on a file, fenced by an
 * exclusively created lock file (staged, then linked in) that carries the new value and is
 * renamed into place.
 * Two stores on one directory stand for two coordinator processes. And the blob store's
 * directories: made ahead by makeDirs, or by the first put (and again when they went).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BlobOverwriteError, PointerLockedError } from '../../lib/checkpoint/driver-errors.ts';
import { DirectoryBlobStore, FilePointerStore } from '../../lib/checkpoint/local-storage.ts';

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'sluice-pointers-'));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** A pid that belonged to a process that has exited. */
function deadPid(): number {
  const r = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']);
  return Number(r.stdout.toString());
}

describe('FilePointerStore', () => {
  it('creates the pointer directory, numbers versions from 1, and reads back only version and value', async () => {
    const dir = join(root, 'nested', 'pointers');
    const s = new FilePointerStore(dir, { durable: false });
    expect(await s.read('p')).toBeUndefined();
    expect(await s.compareAndSet('p', 0, { epoch: 1, at: Number.NEGATIVE_INFINITY })).toBe(true);
    expect(await s.compareAndSet('p', 1, { epoch: 2, at: 5 })).toBe(true);
    expect(await s.read('p')).toEqual({ version: 2, value: { epoch: 2, at: 5 } });
    expect(readdirSync(dir)).toEqual(['p.json']);
  });

  it('refuses a write from a stale version and leaves the value and no lock behind', async () => {
    const s = new FilePointerStore(root);
    expect(await s.compareAndSet('p', 0, 'a')).toBe(true);
    expect(await s.compareAndSet('p', 0, 'b')).toBe(false);
    expect(await s.compareAndSet('p', 2, 'c')).toBe(false);
    expect(await s.read('p')).toEqual({ version: 1, value: 'a' });
    expect(readdirSync(root)).toEqual(['p.json']);
  });

  it('fences two writers from the same version: exactly one wins', async () => {
    const a = new FilePointerStore(root, { durable: false });
    const b = new FilePointerStore(root, { durable: false });
    await a.compareAndSet('record', 0, { owner: 'a' });
    const results = [await b.compareAndSet('record', 1, { owner: 'b' }), await a.compareAndSet('record', 1, { owner: 'a2' })];
    expect(results).toEqual([true, false]);
    expect(await a.read('record')).toEqual({ version: 2, value: { owner: 'b' } });
  });

  it('waits for a live holder and then gives up with PointerLockedError, changing nothing', async () => {
    const s = new FilePointerStore(root, { durable: false });
    await s.compareAndSet('p', 0, 'a');
    // The parent process (the test runner) is alive: its lock must be respected.
    writeFileSync(join(root, 'p.json.lock'), `{"holder":${process.ppid},"version":2,"value":"x"}`);
    await expect(s.compareAndSet('p', 1, 'b')).rejects.toThrow(PointerLockedError);
    expect(await s.read('p')).toEqual({ version: 1, value: 'a' });
    expect(readFileSync(join(root, 'p.json.lock'), 'utf8')).toContain(`"holder":${process.ppid}`);
  });

  it('takes over the lock of a holder that died', async () => {
    const s = new FilePointerStore(root, { durable: false });
    await s.compareAndSet('p', 0, 'a');
    const pid = deadPid();
    writeFileSync(join(root, 'p.json.lock'), `{"holder":${pid},"version":2,"value":"x"}`);
    expect(await s.compareAndSet('p', 1, 'b')).toBe(true);
    writeFileSync(join(root, 'p.json.lock'), `{"holder":${pid},"version":3,"va`); // its body cut short (a disk that filled up)
    expect(await s.compareAndSet('p', 2, 'c')).toBe(true);
    expect(await s.read('p')).toEqual({ version: 3, value: 'c' });
    expect(readdirSync(root)).toEqual(['p.json']);
  });

  it('a lock appears only with its holder: a writer killed before linking it leaves a temporary file that blocks nothing', async () => {
    const s = new FilePointerStore(root, { durable: false });
    await s.compareAndSet('p', 0, 'a');
    // What a kill between writing the staged lock and linking it leaves behind.
    writeFileSync(join(root, `.tmp-${deadPid()}-killed00`), `{"holder":${deadPid()},"version":2,"value":"x"}`);
    expect(await s.compareAndSet('p', 1, 'b')).toBe(true);
    expect(await s.read('p')).toEqual({ version: 2, value: 'b' });
    expect(readdirSync(root).filter((f) => f.endsWith('.lock'))).toEqual([]);
  });

  it('a write that fails after taking the lock releases it', async () => {
    const s = new FilePointerStore(root, { durable: false });
    writeFileSync(join(root, 'p.json'), '{"version":1,'); // unreadable current value
    await expect(s.compareAndSet('p', 1, 'b')).rejects.toThrow();
    expect(readdirSync(root)).toEqual(['p.json']);
    writeFileSync(join(root, 'p.json'), '{"version":1,"value":"a"}');
    expect(await s.compareAndSet('p', 1, 'b')).toBe(true);
  });

  it('recreates its directory when it disappears', async () => {
    const dir = join(root, 'pointers');
    const s = new FilePointerStore(dir, { durable: false });
    expect(await s.compareAndSet('p', 0, 'a')).toBe(true);
    rmSync(dir, { recursive: true });
    expect(await s.compareAndSet('p', 0, 'b')).toBe(true);
    expect(await s.read('p')).toEqual({ version: 1, value: 'b' });
  });
});

describe('DirectoryBlobStore directories', () => {
  const bytes = (s: string) => new TextEncoder().encode(s);

  it('makeDirs makes the directories of keys under each prefix, and puts land there', async () => {
    const blobs = new DirectoryBlobStore(join(root, 'blobs'), { durable: false });
    blobs.makeDirs(['job/manifests/', 'job/snapshots/0-0/']);
    expect(existsSync(join(root, 'blobs', 'job', 'manifests'))).toBe(true);
    expect(existsSync(join(root, 'blobs', 'job', 'snapshots', '0-0'))).toBe(true);
    await blobs.put('job/snapshots/0-0/a.json', bytes('a'));
    expect(readdirSync(join(root, 'blobs', 'job', 'snapshots', '0-0'))).toEqual(['a.json']);
    expect(() => blobs.makeDirs(['../out/'])).toThrow(/blob key/);
  });

  it('a put makes missing directories, also after they were removed, and never overwrites', async () => {
    const blobs = new DirectoryBlobStore(join(root, 'blobs'), { durable: false });
    await blobs.put('job/manifests/1.json', bytes('one'));
    rmSync(join(root, 'blobs'), { recursive: true });
    await blobs.put('job/manifests/2.json', bytes('two'));
    await blobs.put('job/manifests/2.json', bytes('two'));
    await expect(blobs.put('job/manifests/2.json', bytes('other'))).rejects.toThrow(BlobOverwriteError);
    expect(await blobs.list('job/')).toEqual(['job/manifests/2.json']);
    expect(new TextDecoder().decode(await blobs.get('job/manifests/2.json'))).toBe('two');
  });
});
