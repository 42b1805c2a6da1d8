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
 * process that dies loses nothing it logged; barrier entries and the segments they close
 * are fsynced before the barrier goes in, so a checkpoint never names a lost position.
 */
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { StreamRecord } from '../api/types.ts';
import { decodeJson, encodeJson } from '../checkpoint/codec.ts';
import { openMakingDir, writeFileAtomic } from '../checkpoint/local-storage.ts';

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

const SEGMENT = /^(\d{12})\.jsonl$/;

export class SourceLog {
  private readonly dir: string;
  private readonly open = new Map<number, number>();

  constructor(
    root: string,
    readonly source: string,
    /** fsync closed segments and barrier entries (default true). */
    private readonly durable = true,
  ) {
    this.dir = join(root, encodeURIComponent(source));
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
    let fd = this.open.get(p);
    if (fd === undefined) {
      fd = openMakingDir(join(this.partitionDir(p), `${String(start).padStart(12, '0')}.jsonl`), 'a');
      this.open.set(p, fd);
    }
    let text = '';
    for (const r of records) text += encodeJson([r.timestamp, r.value]) + '\n';
    writeSync(fd, text);
  }

  /** Close the current segments (fsynced) and record the barrier durably. */
  barrier(entry: BarrierEntry): void {
    for (const fd of this.open.values()) {
      if (this.durable) fsyncSync(fd);
      closeSync(fd);
    }
    this.open.clear();
    const fd = openMakingDir(join(this.dir, 'barriers.jsonl'), 'a');
    try {
      writeSync(fd, JSON.stringify(entry) + '\n');
      if (this.durable) fsyncSync(fd);
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

  private static records(file: string): StreamRecord[] {
    const out: StreamRecord[] = [];
    for (const line of readFileSync(file, 'utf8').split('\n')) {
      if (!line) continue;
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

  /** Logged records of partition p at positions >= from, in order. */
  readFrom(p: number, from: number): StreamRecord[] {
    const out: StreamRecord[] = [];
    const segs = this.segments(p);
    segs.forEach((s, i) => {
      const end = segs[i + 1]?.start ?? Number.POSITIVE_INFINITY;
      if (end <= from) return;
      const recs = SourceLog.records(s.file);
      out.push(...recs.slice(Math.max(0, from - s.start)));
    });
    return out;
  }

  /** Forget records at positions >= at (a restore re-reads them from a replayable source). */
  cutAt(p: number, at: number): void {
    for (const s of this.segments(p)) {
      if (s.start >= at) rmSync(s.file, { force: true });
      else {
        const recs = SourceLog.records(s.file);
        if (s.start + recs.length > at) writeFileAtomic(s.file, recs.slice(0, at - s.start).map((r) => encodeJson([r.timestamp, r.value]) + '\n').join(''), this.durable);
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
    if (keep.length < lines.length) writeFileAtomic(path, keep.map((l) => l + '\n').join(''), this.durable);
  }

  /** Segment files per partition (tests, listing). */
  segmentCount(p: number): number {
    return this.segments(p).length;
  }

  close(): void {
    for (const fd of this.open.values()) closeSync(fd);
    this.open.clear();
  }
}
