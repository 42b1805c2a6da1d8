/**
 * The embedded endpoint's Idempotency-Keys, per source: the last `maxKeys` keys of the
 * last `retentionMs`, each with its body's fingerprint and its answer. A logged source
 * appends a key's line to log/<source>/keys.jsonl in the same batch as its records, the
 * key first (input-log.ts writes, fsyncs and cuts them back together), naming the log
 * positions of those records; a line whose records are not all in the log (the process
 * died between the two writes) is dropped when the keys are read back, so a replayed
 * answer always stands for records that are in the log. Decisions are
 * lib/transport/idempotency.ts.
 */
import { existsSync, readFileSync } from 'node:fs';
import { DEFAULT_RETENTION_MS, type Remembered, type RememberedAnswer } from '../transport/idempotency.ts';
import { KEYS_PARTITION, type LogAppend, type SourceLog } from './input-log.ts';

export const DEFAULT_MAX_KEYS = 100_000;

/** A keyed request offered to a source: what to remember once its events are accepted. */
export interface KeyedOffer {
  readonly key: string;
  readonly fingerprint: string;
  readonly at: number;
  readonly answer: RememberedAnswer;
}

interface KeyLine {
  /** key, fingerprint, stream, arrival, answer */
  readonly k: string;
  readonly f: string;
  readonly s: string;
  readonly t: number;
  readonly a: RememberedAnswer;
  /** The records' log positions: [partition, first position, count]. */
  readonly w: readonly (readonly [number, number, number])[];
}

type Entry = Remembered & { readonly stream: string; readonly line: string };

export class KeyMemory {
  private readonly keys = new Map<string, Entry>();
  /** Lines in keys.jsonl (compacted when mostly stale). */
  private fileLines = 0;

  constructor(
    readonly stream: string,
    private readonly log: SourceLog | undefined,
    private readonly maxKeys = DEFAULT_MAX_KEYS,
    private readonly retentionMs = DEFAULT_RETENTION_MS,
  ) {}

  /** The keys in a logged source's keys.jsonl whose records are in its log (a torn last line is ignored); compacts the file. */
  load(now: number): this {
    const log = this.log;
    if (!log || !existsSync(log.keysFile)) return this;
    const ends = new Map<number, number>();
    const endOf = (p: number) => ends.get(p) ?? (ends.set(p, log.endOf(p)), ends.get(p)!);
    let lines = 0;
    for (const text of readFileSync(log.keysFile, 'utf8').split('\n')) {
      if (!text) continue;
      lines++;
      let line: KeyLine;
      try {
        line = JSON.parse(text) as KeyLine;
      } catch {
        continue; // torn: the process died writing it, before its records
      }
      if (now - line.t >= this.retentionMs || !line.w.every(([p, at, n]) => at + n <= endOf(p))) continue;
      this.put(line.k, this.entryOf(line, text));
    }
    this.fileLines = lines;
    if (lines > this.keys.size) this.compact();
    return this;
  }

  /** What is remembered of `key`, unless it expired. */
  get(key: string, now: number): Entry | undefined {
    const e = this.keys.get(key);
    if (e && e.expiresAt <= now) {
      this.keys.delete(key);
      return undefined;
    }
    return e;
  }

  /** The append of a keyed request's line, naming its records' appends: goes first in their batch. */
  append(offer: KeyedOffer, records: readonly LogAppend[]): LogAppend {
    const w = records.map((a) => [a.p, a.at, countLines(a.text)] as const);
    const line: KeyLine = { k: offer.key, f: offer.fingerprint, s: this.stream, t: offer.at, a: offer.answer, w };
    return { p: KEYS_PARTITION, at: 0, text: JSON.stringify(line) + '\n' };
  }

  /** Remember an offered request (its line, when logged, already appended). */
  remember(offer: KeyedOffer, logged?: LogAppend): void {
    const text = logged?.text.slice(0, -1) ?? '';
    this.put(offer.key, { state: 'done', fingerprint: offer.fingerprint, stream: this.stream, startedAt: offer.at, expiresAt: offer.at + this.retentionMs, answer: offer.answer, line: text });
    if (logged) this.fileLines++;
  }

  /** Forget a request whose records did not reach the log (its line was cut off with them). */
  forget(key: string, fingerprint: string): void {
    if (this.keys.get(key)?.fingerprint === fingerprint) this.keys.delete(key);
  }

  /** Rewrite keys.jsonl with the live keys when most of its lines are stale; only with no append waiting for an fsync. */
  compactIfStale(): void {
    if (this.log && this.fileLines > 2 * this.keys.size + 1000) this.compact();
  }

  get size(): number {
    return this.keys.size;
  }

  private compact(): void {
    const live = [...this.keys.values()].filter((e) => e.line);
    this.log!.rewriteKeys(live.map((e) => e.line + '\n').join(''));
    this.fileLines = live.length;
  }

  private entryOf(line: KeyLine, text: string): Entry {
    return { state: 'done', fingerprint: line.f, stream: line.s, startedAt: line.t, expiresAt: line.t + this.retentionMs, answer: line.a, line: text };
  }

  /** Insertion order is age order: the oldest go first past maxKeys. */
  private put(key: string, e: Entry): void {
    this.keys.delete(key);
    this.keys.set(key, e);
    for (const [k, old] of this.keys) {
      if (this.keys.size <= this.maxKeys && old.expiresAt > e.startedAt) break;
      this.keys.delete(k);
    }
  }
}

function countLines(text: string): number {
  let n = 0;
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) n++;
  return n;
}
