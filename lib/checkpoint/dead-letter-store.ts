/**
 * A checkpointed run's dead letters, each once (by stage, partition and deadLetterId: a
 * redelivered outbox may carry one again; the partition is part of the identity, as two
 * partitions' letters can name the same channel position). With a file (the checkpoint
 * directory's `dead-letters.jsonl`, or one a caller names) every letter is appended as
 * one JSON line, fsynced: on the embedded runtime as its outbox is delivered, before the
 * barrier ack after it reaches the coordinator, so before the checkpoint that covers it
 * can commit; on local AWS as the stage DLQs are drained (the messages carry their epoch
 * and are deleted only once written). A resume from checkpoint E keeps the letters of
 * epochs up to E (their records are behind E and are not replayed) and drops later ones
 * (their records are replayed and parked again). Without a file they live in memory:
 * such a run is not resumable, a restart parks them again.
 */
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Key } from '../api/types.ts';
import { writeFileAtomic } from './local-storage.ts';
import { RestoreError } from './driver-errors.ts';
import { type DeadLetter, jobDeadLetterId } from '../transport/envelope.ts';
import { faultSite } from '../util/fault-sites.ts';

/** The store's file in a checkpoint directory. */
export const DEAD_LETTERS_FILE = 'dead-letters.jsonl';

/** A dead letter with where it was parked: its stage partition, its key, its epoch. */
export interface StoredDeadLetter extends DeadLetter {
  readonly id: string;
  readonly stage: number;
  readonly partition: number;
  /** The record's key (absent before a keyBy), or the timer's. */
  readonly key?: Key;
  /** The checkpoint epoch that covers it: its record came before that epoch's barrier. */
  readonly epoch: number;
}

/** Where an outbox comes from: an embedded stage partition (its slot) after its batch. */
export interface DeadLetterOrigin {
  readonly stage: number;
  readonly partition: number;
  /** lastBarrier: the partition's last snapshotted barrier (letters after the outbox's last ack belong to the next epoch). */
  readonly runtime: { readonly lastBarrier: number };
}

export interface DeadLetterStoreOptions {
  /** fsync each append (default true). */
  readonly durable?: boolean;
  /** Letters already in the file: kept up to this epoch (a resume), or all dropped ('none', a fresh run). Default 'none'. */
  readonly keepThroughEpoch?: number | 'none';
}

export class DeadLetterStore {
  private readonly letters: StoredDeadLetter[] = [];
  private readonly ids = new Set<string>();
  private fd: number | undefined;

  private constructor(
    /** The JSON-lines file, or undefined: in memory only. */
    readonly path: string | undefined,
    private readonly durable: boolean,
  ) {}

  static memory(): DeadLetterStore {
    return new DeadLetterStore(undefined, false);
  }

  /** A store in `path`: what it holds is reloaded (up to keepThroughEpoch) and the file rewritten to just that. */
  static open(path: string, options: DeadLetterStoreOptions = {}): DeadLetterStore {
    const durable = options.durable ?? true;
    const store = new DeadLetterStore(path, durable);
    const keep = options.keepThroughEpoch ?? 'none';
    const found = keep === 'none' || !existsSync(path) ? [] : readLetters(path);
    for (const d of found) if (d.epoch <= (keep as number) && !store.ids.has(d.id)) store.remember(d);
    if (found.length !== store.letters.length || !existsSync(path)) {
      mkdirSync(dirname(path), { recursive: true });
      writeFileAtomic(path, store.letters.map(line).join(''), durable);
    }
    return store;
  }

  get count(): number {
    return this.letters.length;
  }

  /** Every letter, each once, in the order they were parked. */
  list(): readonly StoredDeadLetter[] {
    return this.letters;
  }

  has(id: string): boolean {
    return this.ids.has(id);
  }

  /** Record a parked letter unless it is there already; appended (and fsynced) before this returns. */
  add(d: DeadLetter, origin: DeadLetterOrigin, epoch: number): boolean {
    return this.addAt(d, origin.stage, origin.partition, epoch);
  }

  /** Record a letter of stage partition `stage`/`partition` and `epoch` unless it is there already; appended (and fsynced) before this returns. */
  addAt(d: DeadLetter, stage: number, partition: number, epoch: number): boolean {
    const id = jobDeadLetterId(stage, partition, d);
    if (this.ids.has(id)) return false;
    const key = d.record?.key ?? d.timer?.key;
    const stored: StoredDeadLetter = { id, stage, partition, ...(key !== undefined ? { key } : {}), epoch, ...d };
    if (this.path !== undefined) {
      faultSite('dead-letter.append');
      this.fd ??= openSync(this.path, 'a');
      writeSync(this.fd, line(stored));
      if (this.durable) fsyncSync(this.fd);
    }
    this.remember(stored);
    return true;
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  private remember(d: StoredDeadLetter): void {
    this.ids.add(d.id);
    this.letters.push(d);
  }
}

/** One letter per line; values JSON cannot hold (bigint, a non-finite number) as strings. */
function line(d: StoredDeadLetter): string {
  return JSON.stringify(d, (_k, v) => (typeof v === 'bigint' ? `${v}` : typeof v === 'number' && !Number.isFinite(v) ? String(v) : v)) + '\n';
}

/** The letters of a store file; a torn last line (a crash mid-append) is dropped, anything else unreadable is an error. */
function readLetters(path: string): StoredDeadLetter[] {
  const text = readFileSync(path, 'utf8');
  const lines = text.split('\n');
  const out: StoredDeadLetter[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i] === '') continue;
    try {
      const d = JSON.parse(lines[i]) as StoredDeadLetter;
      if (typeof d.id !== 'string' || typeof d.epoch !== 'number') throw new Error('no id or epoch');
      out.push(d);
    } catch (e) {
      if (i === lines.length - 1) break;
      throw new RestoreError(`dead letters ${path}, line ${i + 1}`, 'a JSON dead letter with id and epoch', `${lines[i].slice(0, 80)} (${(e as Error).message})`);
    }
  }
  return out;
}
