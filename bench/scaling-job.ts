/**
 * The job `sluice dev` serves in bench/scaling-advice.ts: one ingestion stream, keyed by
 * `id % keys` (`--param keys`, default 64: every key equally often, no skew), a keyed
 * operator that counts per key, and its slow step `--param costUs` (default 500) per record:
 *
 *   shape=wait (default)  the operator's output goes to a sink that waits costUs per record
 *                         of each batch on a timer, as a remote call would: the thread is free;
 *   shape=cpu             the keyed operator busy-waits costUs per record: the thread is held.
 *
 * Both are the keyed stage's own cost (the sink is chained into it).
 */
import type { Sink, SinkBatch } from '../lib/index.ts';
import { Job, valueState } from '../lib/index.ts';
import { busy, Discard } from './overload-job.ts';

interface Event {
  id: number;
  t: number;
}

class RemoteCall implements Sink<unknown> {
  readonly kind = 'remote-call';
  constructor(readonly usPerRecord: number) {}
  write(batch: SinkBatch<unknown>): Promise<void> {
    return new Promise((resolve) => setTimeout(resolve, (batch.records.length * this.usPerRecord) / 1000));
  }
}

export default (p: Record<string, unknown>): Job => {
  const costUs = Number(p.costUs ?? 500);
  const keys = Number(p.keys ?? 64);
  const shape = String(p.shape ?? 'wait');
  if (!(costUs >= 0)) throw new Error(`--param costUs: expected a number >= 0, received ${JSON.stringify(p.costUs)}`);
  if (!Number.isSafeInteger(keys) || keys < 1) throw new Error(`--param keys: expected an integer >= 1, received ${JSON.stringify(p.keys)}`);
  if (shape !== 'wait' && shape !== 'cpu') throw new Error(`--param shape: expected wait or cpu, received ${JSON.stringify(p.shape)}`);
  const job = new Job('scaling', { parallelism: 1 });
  job
    .ingest<Event>('load', { timestamp: (e) => e.t })
    .keyBy((e) => e.id % keys)
    .process({
      state: { n: valueState<number>() },
      processElement(_e: Event, ctx) {
        if (shape === 'cpu') busy(costUs);
        const n = (ctx.state.n.get() ?? 0) + 1;
        ctx.state.n.set(n);
        ctx.emit(n);
      },
    })
    .name('work')
    .sinkTo(shape === 'wait' ? new RemoteCall(costUs) : new Discard(), 'out');
  return job;
};
