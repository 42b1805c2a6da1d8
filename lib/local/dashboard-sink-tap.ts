/**
 * The latest records of each sink, for the dashboard: every sink of the job wrapped so that
 * the records of each batch it wrote are kept, the last `keep` per sink. A batch delivered
 * again (same producer and sequence number, after a recovery) is kept once, as an idempotent
 * sink writes it once.
 */
import type { Sink, SinkBatch } from '../api/sinks.ts';
import type { Job } from '../api/stream.ts';

export interface SinkLatest {
  readonly name: string;
  readonly kind: string;
  /** Records in the batches written so far (each batch once). */
  readonly written: number;
  /** The last records written, oldest first. */
  readonly latest: readonly unknown[];
}

export const DEFAULT_KEPT_RECORDS = 20;

class Kept {
  written = 0;
  readonly latest: unknown[] = [];
  readonly highWater = new Map<string, number>();

  constructor(
    readonly name: string,
    readonly kind: string,
    private readonly keep: number,
  ) {}

  add(batch: SinkBatch<unknown>): void {
    if (batch.seq <= (this.highWater.get(batch.producer) ?? -Infinity)) return;
    this.highWater.set(batch.producer, batch.seq);
    this.written += batch.records.length;
    const from = Math.max(0, batch.records.length - this.keep);
    for (let i = from; i < batch.records.length; i++) this.latest.push(batch.records[i]);
    if (this.latest.length > this.keep) this.latest.splice(0, this.latest.length - this.keep);
  }
}

export class SinkTap {
  private readonly kept = new Map<string, Kept>();

  constructor(private readonly keep = DEFAULT_KEPT_RECORDS) {}

  /** `sink` with its written batches recorded under `name`; every other member (open, close, prepare, commit...) is the sink's own. */
  wrap<T>(name: string, sink: Sink<T>): Sink<T> {
    const kept = new Kept(name, sink.kind, this.keep);
    this.kept.set(name, kept);
    return new Proxy(sink, {
      get(target, prop) {
        if (prop === 'write') {
          return (batch: SinkBatch<T>) => {
            const done = target.write(batch);
            // Recorded once written: a write that fails is retried, not shown.
            if (done instanceof Promise) return done.then(() => kept.add(batch));
            kept.add(batch);
            return done;
          };
        }
        const value = Reflect.get(target, prop, target) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
  }

  /** Every sink of `job`, wrapped (EmbeddedOptions.sinks). */
  wrapJobSinks(job: Job): Record<string, Sink<unknown>> {
    const sinks: Record<string, Sink<unknown>> = {};
    for (const n of job.graph.sinks()) if (n.spec.kind === 'sink') sinks[n.name] = this.wrap(n.name, n.spec.sink);
    return sinks;
  }

  /** Each wrapped sink's latest records, in the order the sinks were wrapped. */
  latest(): SinkLatest[] {
    return [...this.kept.values()].map((k) => ({ name: k.name, kind: k.kind, written: k.written, latest: [...k.latest] }));
  }
}
