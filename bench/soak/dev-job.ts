/**
 * `sluice dev`'s job in the dev soak (bench/soak/dev.ts): one partition end to end, so a
 * replay numbers events in the order they were logged; each event gets the next running
 * count, and the idempotent sink appends each row synchronously to `--param out=<file>`,
 * so rows emitted again after a restart are the same rows.
 */
import { appendFileSync } from 'node:fs';
import { IdempotentSink } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';

class Rows extends IdempotentSink<unknown> {
  readonly kind = 'test-rows';
  constructor(readonly path: string) {
    super();
  }
  protected writeRecords(records: readonly unknown[]): void {
    if (records.length) appendFileSync(this.path, records.map((r) => JSON.stringify(r)).join('\n') + '\n');
  }
}

export default (p: Record<string, string>): Job => {
  const job = new Job('durable-dev', { parallelism: 1 });
  job
    .ingest<{ id: string; t: number }>('events', { timestamp: (e) => e.t })
    .keyBy(() => 'all')
    .process({
      state: { n: valueState<number>() },
      processElement(e, ctx) {
        const n = (ctx.state.n.get() ?? 0) + 1;
        ctx.state.n.set(n);
        ctx.emit({ n, id: e.id });
      },
    })
    .sinkTo(new Rows(p.out), 'rows');
  return job;
};
