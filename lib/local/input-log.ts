/**
 * Logged input of the embedded runtime, per source, in the checkpoint directory:
 *
 *   log/<source>/p<partition>/<start>.jsonl   records sent to a source partition, one
 *                                             segment per barrier interval; a record's
 *                                             position is start + its line index
 *   log/<source>/barriers.jsonl               per injected barrier: epoch, the reader's
 *                                             cursor, the round-robin partition, positions
 *
 * A restore replays what a non-replayable source (the ingestion endpoint) accepted after
 * the checkpoint's positions; a replayable one (a file: its line numbers are the
 * positions) seeks back to the barrier's cursor instead. Segments start only at barrier
 * boundaries, so truncation drops whole files. Appends are synchronous writes, so a
 * process that dies loses nothing it logged; `durable()` fsyncs what was appended (one
 * fsync for every caller waiting at that moment: group commit), so an accepted event
 * survives a power loss too; barrier entries and the segments they close are fsynced
 * before the barrier goes in, so a checkpoint never names a lost position. A batch of
 * appends is written whole or not at all: a failed write is cut back off its segments,
 * and so is everything appended since the last successful fsync when an fsync fails
 * (its callers are told: what they appended is not in the log).
 */
import { closeSync, existsSync, fstatSync, fsync, fsyncSync, ftruncateSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { StreamRecord } from '../api/types.ts';
import { decodeJson, encodeJson } from '../checkpoint/codec.ts';
import { openMakingDir, writeFileAtomic } from '../checkpoint/local-storage.ts';
import { faultSite } from '../util/fault-sites.ts';

/** One partition's part of a batch of appends: encoded lines (see encodeRecords) for positions at, at + 1, ... */
export interface LogAppend {
  readonly p: number;
  readonly at: number;
  readonly text: string;
}

export interface SourceLogOptions {
  /** Tests: the asynchronous fsync durable() uses (default node:fs fsync). */
  readonly fsync?: (fd: number, done: (err: Error | null) => void) => void;
}

/** The log's lines for records with these timestamps and values. */
export function encodeRecords(timestamps: readonly number[], values: readonly unknown[]): string {
  let text = '';
  for (let i = 0; i < values.length; i++) text += encodeJson([timestamps[i], values[i]]) + '\n';
  return text;
}

interface Deferred {
  readonly promise: Promise<void>;
  resolve(): void;
  reject(e: Error): void;
}

function deferred(): Deferred {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

const READ_BLOCK = 1 << 20;

/** The lines of a file, read in blocks: a segment may be larger than the longest string V8 makes. */
function* fileLines(file: string): Generator<string> {
  const fd = openSync(file, 'r');
  try {
    const block = Buffer.allocUnsafe(READ_BLOCK);
    let carry: Buffer = Buffer.alloc(0);
    for (;;) {
      const n = readSync(fd, block, 0, READ_BLOCK, null);
      if (n === 0) break;
      let buf = carry.length ? Buffer.concat([carry, block.subarray(0, n)]) : block.subarray(0, n);
      let start = 0;
      for (let nl = buf.indexOf(10, start); nl !== -1; nl = buf.indexOf(10, start)) {
        if (nl > start) yield buf.toString('utf8', start, nl);
        start = nl + 1;
      }
      buf = buf.subarray(start);
      carry = Buffer.from(buf);
    }
    // Without its newline: a torn last line, handed over as it is (the reader's parse rejects it).
    if (carry.length) yield carry.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/** The length of a file cut after its last newline (a torn last line, left by a process that died while appending, goes). */
function lengthWithoutTornTail(path: string, size: number): number {
  const fd = openSync(path, 'r');
  try {
    const block = Buffer.allocUnsafe(64 * 1024);
    for (let end = size; end > 0; ) {
      const from = Math.max(0, end - block.length);
      const n = readSync(fd, block, 0, end - from, from);
      const nl = block.subarray(0, n).lastIndexOf(10);
      if (nl !== -1) return from + nl + 1;
      end = from;
    }
    return 0;
  } finally {
    closeSync(fd);
  }
}

export interface BarrierEntry {
  readonly epoch: number;
  /** The reader's cursor when the barrier went in (replayable readers). */
  readonly cursor: number | null;
  /** The partition the next chunk would have gone to. */
  readonly next: number;
  /** Records sent per partition before the barrier. */
  readonly positions: readonly number[];
}

interface Segment {
  readonly start: number;
  readonly file: string;
}

interface OpenSegment {
  readonly fd: number;
  size: number;
  synced: number;
}

const SEGMENT = /^(\d{12})\.jsonl$/;

export class SourceLog {
  private readonly dir: string;
  /** The open segment per partition: its descriptor, its length, and the length known to be on disk. */
  private readonly open = new Map<number, OpenSegment>();
  /** Descriptors written since their last fsync, and directories that gained a file. */
  private readonly dirty = new Set<number>();
  private readonly newDirs = new Set<string>();
  /** Callers of durable() waiting for the next fsync, and whether one is running. */
  private waiting: Deferred | undefined;
  private syncing = false;
  /** Segments closed while an fsync ran on them: closed once it is done. */
  private retired: number[] = [];
  private readonly fsyncAsync: NonNullable<SourceLogOptions['fsync']>;

  constructor(
    root: string,
    readonly source: string,
    /** fsync closed segments and barrier entries, and appends in durable() (default true). */
    private readonly durableWrites = true,
    options: SourceLogOptions = {},
  ) {
    this.dir = join(root, encodeURIComponent(source));
    this.fsyncAsync = options.fsync ?? fsync;
  }

  /** Make this source's log directory (when the job opens: its first barrier then writes without a mkdir). */
  makeDir(): void {
    mkdirSync(this.dir, { recursive: true });
  }

  private partitionDir(p: number): string {
    return join(this.dir, `p${p}`);
  }

  /** Append records sent to partition p, the first at position `start`. */
  append(p: number, start: number, records: readonly StreamRecord[]): void {
    if (records.length === 0) return;
    this.appendAll([{ p, at: start, text: encodeRecords(records.map((r) => r.timestamp), records.map((r) => r.value)) }]);
  }

  /**
   * Write a batch of appends (lines from encodeRecords) whole, or throw having written
   * none of it: what a failed write left is cut off again, so no position is half taken.
   */
  appendAll(batch: readonly LogAppend[]): void {
    faultSite('input-log.append');
    const before = new Map<number, number>();
    try {
      for (const a of batch) {
        if (!a.text) continue;
        const seg = this.segmentFor(a.p, a.at);
        if (!before.has(a.p)) before.set(a.p, seg.size);
        seg.size += writeSync(seg.fd, a.text);
        this.dirty.add(seg.fd);
      }
    } catch (e) {
      for (const [p, size] of before) {
        const seg = this.open.get(p)!;
        try {
          ftruncateSync(seg.fd, size);
          seg.size = size;
        } catch {
          // The segment cannot be cut back: close it, so that the next append reopens it and drops a torn tail.
          this.open.delete(p);
          this.closeFd(seg.fd);
        }
      }
      throw e;
    }
  }

  /** Partition p's open segment; a new one starts at `start` (a torn tail of an existing one is cut off first). */
  private segmentFor(p: number, start: number): OpenSegment {
    const open = this.open.get(p);
    if (open) return open;
    const dir = this.partitionDir(p);
    const path = join(dir, `${String(start).padStart(12, '0')}.jsonl`);
    const dirExisted = existsSync(dir);
    const existed = dirExisted && existsSync(path);
    const fd = openMakingDir(path, 'a');
    let size = existed ? fstatSync(fd).size : 0;
    if (size > 0) {
      const whole = lengthWithoutTornTail(path, size);
      if (whole < size) ftruncateSync(fd, (size = whole));
    }
    // A new file (and partition directory) survives a power loss only once its directory is fsynced too.
    if (!existed) this.newDirs.add(dir);
    if (!dirExisted) this.newDirs.add(this.dir);
    const seg = { fd, size, synced: size };
    this.open.set(p, seg);
    return seg;
  }

  /** Whether durable() fsyncs (false: it resolves at once). */
  get fsyncs(): boolean {
    return this.durableWrites;
  }

  /**
   * Resolves once everything appended so far is on disk. Callers waiting at the same
   * moment share one fsync per segment (group commit); those arriving while it runs
   * wait for the next one. When an fsync fails, everything appended since the last one
   * that succeeded is cut off the log and every caller waiting (for this fsync or the
   * next) is rejected: none of it is in the log, so none of it may be used.
   */
  durable(): Promise<void> {
    if (!this.durableWrites || (this.dirty.size === 0 && this.newDirs.size === 0)) return Promise.resolve();
    const group = (this.waiting ??= deferred());
    if (!this.syncing) this.syncNext();
    return group.promise;
  }

  private syncNext(): void {
    const group = this.waiting;
    if (!group) return;
    this.waiting = undefined;
    const fds = [...this.dirty];
    // The lengths this fsync makes durable (appends from now on wait for the next one).
    const marks: [OpenSegment, number][] = [];
    for (const seg of this.open.values()) if (this.dirty.has(seg.fd)) marks.push([seg, seg.size]);
    const dirs = [...this.newDirs];
    this.dirty.clear();
    this.newDirs.clear();
    this.syncing = true;
    const one = (fd: number) => new Promise<void>((resolve, reject) => this.fsyncAsync(fd, (err) => (err ? reject(err) : resolve())));
    const dirSyncs = dirs.map(async (d) => {
      const fd = openSync(d, 'r');
      try {
        await one(fd);
      } finally {
        closeSync(fd);
      }
    });
    Promise.all([...fds.map(one), ...dirSyncs]).then(
      () => this.synced(group, marks),
      (e: Error) => this.synced(group, marks, e),
    );
  }

  private synced(group: Deferred, marks: readonly [OpenSegment, number][], error?: Error): void {
    this.syncing = false;
    for (const fd of this.retired.splice(0)) closeSync(fd);
    if (error) {
      this.lose(error);
      group.reject(error);
      return;
    }
    for (const [seg, size] of marks) seg.synced = Math.max(seg.synced, size);
    group.resolve();
    this.syncNext();
  }

  /**
   * fsync every open segment now (before a barrier records positions that include what
   * waits for durable()). Throws, having cut off what was not on disk, when one fails.
   */
  syncNow(): void {
    if (!this.durableWrites) return;
    try {
      for (const seg of this.open.values()) {
        if (!this.dirty.has(seg.fd)) continue;
        fsyncSync(seg.fd);
        seg.synced = seg.size;
      }
    } catch (e) {
      this.lose(e as Error);
      throw e;
    }
  }

  /** A failed fsync: cut every open segment back to its length on disk and fail the callers still waiting. */
  private lose(error: Error): void {
    for (const [p, seg] of this.open) {
      this.dirty.delete(seg.fd);
      if (seg.size === seg.synced) continue;
      try {
        ftruncateSync(seg.fd, seg.synced);
        seg.size = seg.synced;
      } catch {
        // Not cut back: closed, so that the next append reopens the segment.
        this.open.delete(p);
        this.closeFd(seg.fd);
      }
    }
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting?.reject(error);
  }

  private closeFd(fd: number): void {
    this.dirty.delete(fd);
    // An fsync running on it must not find it closed (or its number reused).
    if (this.syncing) this.retired.push(fd);
    else closeSync(fd);
  }

  /** Close the current segments (fsynced) and record the barrier durably. */
  barrier(entry: BarrierEntry): void {
    faultSite('input-log.append');
    for (const { fd } of this.open.values()) {
      if (this.durableWrites) fsyncSync(fd);
      this.closeFd(fd);
    }
    this.open.clear();
    const fd = openMakingDir(join(this.dir, 'barriers.jsonl'), 'a');
    try {
      writeSync(fd, JSON.stringify(entry) + '\n');
      if (this.durableWrites) fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }

  /** The barrier entry of an epoch (a torn last line, from a crash while writing it, is ignored). */
  barrierOf(epoch: number): BarrierEntry | undefined {
    const path = join(this.dir, 'barriers.jsonl');
    if (!existsSync(path)) return undefined;
    let found: BarrierEntry | undefined;
    for (const line of readFileSync(path, 'utf8').split('\n')) {
      if (!line) continue;
      try {
        const e = JSON.parse(line) as BarrierEntry;
        if (e.epoch === epoch) found = e;
      } catch {
        // A torn line: written when the process died; its barrier never went in.
      }
    }
    return found;
  }

  private segments(p: number): Segment[] {
    let names: string[];
    try {
      names = readdirSync(this.partitionDir(p));
    } catch {
      return [];
    }
    return names
      .flatMap((n) => {
        const m = SEGMENT.exec(n);
        return m ? [{ start: Number(m[1]), file: join(this.partitionDir(p), n) }] : [];
      })
      .sort((a, b) => a.start - b.start);
  }

  private static records(file: string, skip = 0, out: StreamRecord[] = []): StreamRecord[] {
    let i = 0;
    for (const line of fileLines(file)) {
      if (i++ < skip) continue;
      let pair: [number, unknown];
      try {
        pair = decodeJson<[number, unknown]>(line);
      } catch {
        break; // A torn last line: the process died while appending it, before anything used it.
      }
      out.push({ timestamp: pair[0], value: pair[1] });
    }
    return out;
  }

  /** Logged records of partition p at positions >= from, in order (appended to one array: no spread, whatever the count). */
  readFrom(p: number, from: number): StreamRecord[] {
    const out: StreamRecord[] = [];
    const segs = this.segments(p);
    for (let i = 0; i < segs.length; i++) {
      const end = segs[i + 1]?.start ?? Number.POSITIVE_INFINITY;
      if (end <= from) continue;
      SourceLog.records(segs[i].file, Math.max(0, from - segs[i].start), out);
    }
    return out;
  }

  /** Forget records at positions >= at (a restore re-reads them from a replayable source). */
  cutAt(p: number, at: number): void {
    for (const s of this.segments(p)) {
      if (s.start >= at) rmSync(s.file, { force: true });
      else {
        const recs = SourceLog.records(s.file);
        if (s.start + recs.length > at) writeFileAtomic(s.file, recs.slice(0, at - s.start).map((r) => encodeJson([r.timestamp, r.value]) + '\n').join(''), this.durableWrites);
      }
    }
  }

  /** Drop segments wholly below `below` (the truncation point of the coordinator's retention). */
  truncateBelow(p: number, below: number): number {
    const segs = this.segments(p);
    let dropped = 0;
    segs.forEach((s, i) => {
      const next = segs[i + 1];
      if (next && next.start <= below) {
        rmSync(s.file, { force: true });
        dropped++;
      }
    });
    return dropped;
  }

  /** Forget barrier entries of epochs below `epoch` (behind the retention point: no restore needs them). */
  truncateBarriers(epoch: number): void {
    const path = join(this.dir, 'barriers.jsonl');
    if (!existsSync(path)) return;
    const lines = readFileSync(path, 'utf8').split('\n').filter(Boolean);
    const keep = lines.filter((l) => {
      try {
        return (JSON.parse(l) as BarrierEntry).epoch >= epoch;
      } catch {
        return false;
      }
    });
    if (keep.length < lines.length) writeFileAtomic(path, keep.map((l) => l + '\n').join(''), this.durableWrites);
  }

  /** Segment files per partition (tests, listing). */
  segmentCount(p: number): number {
    return this.segments(p).length;
  }

  close(): void {
    for (const { fd } of this.open.values()) this.closeFd(fd);
    this.open.clear();
  }
}
