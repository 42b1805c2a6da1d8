/**
 * A transactional JSON-lines file sink: records become visible only when the
 * checkpoint that covers them commits (two-phase commit, as Flink's
 * TwoPhaseCommitSinkFunction):
 *
 *   staging/<tag>-<producer>.jsonl   records of one producer delivered after barrier
 *                                    <tag>, appended as they arrive (pending)
 *   <output>                         committed records, appended per committed epoch
 *   staging/committed.json           {epoch, length, history}: readers follow `length`
 *
 * prepare(e) fsyncs the pending files before the coordinator's commit point; commit(e)
 * appends every pending file tagged below e to the output (sorted by tag then producer),
 * fsyncs it and records the new length atomically, then deletes those files. A crash
 * anywhere leaves either the old or the new committed.json; on open the output is cut
 * back to the committed length, and recover(e) redoes the commit of the restored
 * checkpoint and drops what was staged after it (the restored run produces it again).
 */
import { closeSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { Sink, SinkBatch, TransactionalSink } from '../api/sinks.ts';
import { RestoreError } from '../checkpoint/driver-errors.ts';
import { writeFileAtomic } from '../checkpoint/local-storage.ts';

export interface CommittedState {
  readonly path: string;
  readonly epoch: number;
  readonly length: number;
  readonly records: number;
  /** Length after each committed epoch (the last 256), for restoring an older checkpoint. */
  readonly history: readonly { readonly epoch: number; readonly length: number; readonly records: number }[];
}

const PENDING = /^(\d{12})-(.+)\.jsonl$/;

export class CommittedFileSink<T> implements Sink<T>, TransactionalSink {
  readonly kind = 'committed-jsonl-file';
  readonly transactional = true;
  /** Records committed by this process (a run's "records out"). */
  committedRecords = 0;
  private state: CommittedState;
  private readonly highWater = new Map<string, number>();
  private readonly fds = new Map<string, number>();
  duplicatesDropped = 0;

  constructor(
    readonly path: string,
    readonly staging: string,
    /** fsync staged files, the output and the committed state (default true; tests turn it off). */
    private readonly durable = true,
  ) {
    this.state = { path: resolve(path), epoch: 0, length: 0, records: 0, history: [] };
  }

  private get stateFile(): string {
    return join(this.staging, 'committed.json');
  }

  open(): void {
    mkdirSync(this.staging, { recursive: true });
    mkdirSync(dirname(this.path), { recursive: true });
    this.state = this.stored() ?? this.state;
    this.refuseOtherOutput(this.state.path);
    this.cutOutput(this.state.length);
  }

  /** What the staging directory says was committed, or undefined before the first commit. */
  private stored(): CommittedState | undefined {
    try {
      return JSON.parse(readFileSync(this.stateFile, 'utf8')) as CommittedState;
    } catch {
      return undefined;
    }
  }

  /** Refuses another output file than the one this staging directory commits to; changes nothing. */
  check(): void {
    this.refuseOtherOutput(this.stored()?.path ?? this.state.path);
  }

  private refuseOtherOutput(path: string): void {
    if (path !== resolve(this.path)) throw new RestoreError('--output', `the file this checkpoint directory commits to (${path})`, resolve(this.path));
  }

  /** The output holds exactly the committed bytes (a crash may have left part of an append). */
  private cutOutput(length: number): void {
    const fd = openSync(this.path, 'a');
    try {
      if (statSync(this.path).size !== length) {
        ftruncateSync(fd, length);
        fsyncSync(fd);
      }
    } finally {
      closeSync(fd);
    }
  }

  write(batch: SinkBatch<T> & { readonly afterBarrier?: number }): void {
    const hw = this.highWater.get(batch.producer) ?? 0;
    if (batch.seq <= hw) {
      this.duplicatesDropped++;
      return;
    }
    this.highWater.set(batch.producer, batch.seq);
    if (batch.records.length === 0) return;
    const name = `${String(batch.afterBarrier ?? 0).padStart(12, '0')}-${batch.producer.replace(/[^A-Za-z0-9_.-]/g, '_')}.jsonl`;
    let fd = this.fds.get(name);
    if (fd === undefined) this.fds.set(name, (fd = openSync(join(this.staging, name), 'a')));
    let text = '';
    for (const r of batch.records) text += JSON.stringify(r) + '\n';
    writeSync(fd, text);
  }

  private pending(below: number): { name: string; tag: number }[] {
    return readdirSync(this.staging)
      .flatMap((name) => {
        const m = PENDING.exec(name);
        return m && Number(m[1]) < below ? [{ name, tag: Number(m[1]) }] : [];
      })
      .sort((a, b) => a.tag - b.tag || (a.name < b.name ? -1 : 1));
  }

  prepare(epoch: number): void {
    for (const { name } of this.pending(epoch)) {
      const fd = this.fds.get(name);
      if (fd !== undefined && this.durable) fsyncSync(fd);
    }
  }

  commit(epoch: number): void {
    if (this.state.epoch >= epoch) return;
    const files = this.pending(epoch);
    const out = openSync(this.path, 'a');
    let length = this.state.length;
    let records = 0;
    try {
      for (const { name } of files) {
        const fd = this.fds.get(name);
        if (fd !== undefined) {
          closeSync(fd);
          this.fds.delete(name);
        }
        const text = readFileSync(join(this.staging, name));
        writeSync(out, text);
        length += text.byteLength;
        for (const b of text) if (b === 10) records++;
      }
      if (this.durable) fsyncSync(out);
    } finally {
      closeSync(out);
    }
    const total = this.state.records + records;
    const history = [...this.state.history, { epoch, length, records: total }].slice(-256);
    this.state = { path: this.state.path, epoch, length, records: total, history };
    writeFileAtomic(this.stateFile, JSON.stringify(this.state), this.durable);
    for (const { name } of files) rmSync(join(this.staging, name), { force: true });
    this.committedRecords += records;
  }

  recover(epoch: number): void {
    if (this.state.epoch > epoch) {
      // Restoring an older checkpoint: its output is what was committed up to it.
      const at = [...this.state.history].reverse().find((h) => h.epoch <= epoch) ?? { epoch: 0, length: 0, records: 0 };
      this.state = { ...this.state, epoch: at.epoch, length: at.length, records: at.records, history: this.state.history.filter((h) => h.epoch <= at.epoch) };
      writeFileAtomic(this.stateFile, JSON.stringify(this.state), this.durable);
      this.cutOutput(at.length);
    }
    this.commit(epoch);
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
    for (const { name } of this.pending(Number.MAX_SAFE_INTEGER)) rmSync(join(this.staging, name), { force: true });
  }

  /** Records committed by this process (alias for run summaries). */
  get written(): number {
    return this.committedRecords;
  }

  /** The committed state (epoch, bytes, records): what a reader may read. */
  committed(): CommittedState {
    return this.state;
  }

  close(): void {
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }
}
