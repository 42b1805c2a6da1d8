/**
 * The job `sluice dev` serves in bench/overload.ts: one ingestion stream, a map that
 * busy-waits `--param costUs=<µs>` per record (CPU the runtime cannot overlap: its
 * capacity is about 1e6 / costUs records per second), a sink that keeps nothing (so the
 * process's memory is what the endpoint and the queues hold). With `--param keep=<r>` and
 * `--param whenQueued=<n>` the stream sheds: past n queued records it keeps the fraction r.
 */
import type { LoadShedding, Sink } from '../lib/index.ts';
import { Job } from '../lib/index.ts';

export interface Load {
  id: number;
  t: number;
  payload: string;
}

/** A sink that keeps nothing. */
export class Discard implements Sink<unknown> {
  readonly kind = 'discard';
  write(): void {}
}

/** Spin for `us` microseconds: user code that holds the thread. */
export function busy(us: number): void {
  const end = performance.now() + us / 1000;
  while (performance.now() < end) {
    // spin: user code that holds the thread
  }
}

function number(p: Record<string, unknown>, name: string, fallback: number | undefined): number | undefined {
  if (p[name] === undefined) return fallback;
  const n = Number(p[name]);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--param ${name}: expected a number >= 0, received ${JSON.stringify(p[name])}`);
  return n;
}

export default (p: Record<string, unknown>): Job => {
  const costUs = number(p, 'costUs', 1000)!;
  const keep = number(p, 'keep', undefined);
  const whenQueued = number(p, 'whenQueued', undefined);
  if ((keep === undefined) !== (whenQueued === undefined)) throw new Error('--param keep and --param whenQueued: expected both or neither');
  const shed: LoadShedding<Load> | undefined = keep === undefined ? undefined : { whenQueued, drop: { keep } };
  const job = new Job('overload', { parallelism: 1 });
  job
    .ingest<Load>('load', { timestamp: (e) => e.t, shed })
    .map((e) => {
      busy(costUs);
      return e.id;
    })
    .name('slow')
    .sinkTo(new Discard(), 'discard');
  return job;
};
