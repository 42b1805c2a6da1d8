import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { valueState } from '../../lib/api/state.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { type LingerState, shouldLinger } from '../../lib/local/linger.ts';

const policy = { rounds: 3, records: 100, envelopes: 4 };
const waiting: LingerState = { downstream: true, fedRound: 9, lingered: 0, queuedRecords: 10, queuedEnvelopes: 2 };

describe('shouldLinger', () => {
  it('waits only for a downstream partition fed in the round before, below both bounds', () => {
    expect(shouldLinger(waiting, 10, policy, false)).toBe(true);
    expect(shouldLinger({ ...waiting, downstream: false }, 10, policy, false)).toBe(false);
    expect(shouldLinger({ ...waiting, fedRound: 8 }, 10, policy, false)).toBe(false);
    expect(shouldLinger({ ...waiting, lingered: 3 }, 10, policy, false)).toBe(false);
    expect(shouldLinger({ ...waiting, queuedRecords: 100 }, 10, policy, false)).toBe(false);
    expect(shouldLinger({ ...waiting, queuedEnvelopes: 4 }, 10, policy, false)).toBe(false);
    expect(shouldLinger(waiting, 10, policy, true)).toBe(false);
    expect(shouldLinger(waiting, 10, { rounds: 0, records: 100, envelopes: 4 }, false)).toBe(false);
  });

  it('never waits more than `rounds` rounds in a row, however the input arrives', () => {
    fc.assert(
      fc.property(fc.array(fc.boolean(), { maxLength: 60 }), fc.integer({ min: 0, max: 5 }), (fed, rounds) => {
        // A slot fed in the rounds marked true; the scheduler's bookkeeping as embedded.ts keeps it.
        const s = { downstream: true, fedRound: -1, lingered: 0, queuedRecords: 0, queuedEnvelopes: 0 };
        let run = 0;
        for (let round = 1; round <= fed.length; round++) {
          if (s.queuedRecords > 0) {
            if (shouldLinger(s, round, { rounds, records: 1_000, envelopes: 1_000 }, false)) {
              s.lingered++;
              run++;
            } else {
              s.lingered = 0;
              s.queuedRecords = 0;
              run = 0;
            }
          }
          expect(run).toBeLessThanOrEqual(rounds);
          if (fed[round - 1]) {
            s.queuedRecords++;
            s.fedRound = round;
          }
        }
      }),
    );
  });
});

/** Few records reach the keyed stage (one in ten), as in Nexmark Q8: a batch per round would be small. */
async function runSparse(lingerRounds: number, count = 20_000) {
  const job = new Job('sparse', { parallelism: 2 });
  const out = Sinks.collect<Row>();
  job
    .fromGenerator<number>('in', { count, generate: (n) => n }, { timestamp: (n) => n })
    .filter((n) => n % 10 === 0)
    .keyBy((n) => n % 7)
    .process<Row, typeof totalState>({
      state: totalState,
      processElement(n, ctx) {
        const total = (ctx.state.total.get() ?? 0) + n;
        ctx.state.total.set(total);
        ctx.emit({ key: n % 7, n, total });
      },
    })
    .sinkTo(out);
  const stats = await new EmbeddedRuntime(job, { sourceBatchSize: 64, lingerRounds }).run();
  return { rows: out.records, commits: stats.commits };
}

interface Row {
  key: number;
  n: number;
  total: number;
}
const totalState = { total: valueState<number>() };

describe('lingering partitions (embedded scheduler)', () => {
  it('changes only the batching: the same rows, each key in order, with fewer commits', async () => {
    const every = await runSparse(0);
    const lingering = await runSparse(8);
    expect(lingering.rows).toHaveLength(2_000);
    const byKey = (rows: Row[]) => [0, 1, 2, 3, 4, 5, 6].map((k) => rows.filter((r) => r.key === k));
    expect(byKey(lingering.rows)).toEqual(byKey(every.rows));
    // Each key's running total saw every earlier record of the key.
    for (const rows of byKey(lingering.rows)) rows.forEach((r, i) => expect(r.total).toBe(rows.slice(0, i + 1).reduce((s, x) => s + x.n, 0)));
    // Both runs commit the source stage's ~310 batches alike; the keyed stage, fed ~10 records
    // a round, commits ~310 times taking its queue every round and a fraction of that lingering.
    expect(every.commits - lingering.commits).toBeGreaterThan(200);
  });

  it('does not hold the last records of a finished input', async () => {
    // Fewer records than one batch: the keyed stage is fed once, then its input stops.
    const { rows } = await runSparse(8, 50);
    expect(rows.map((r) => r.n).sort((a, b) => a - b)).toEqual([0, 10, 20, 30, 40]);
  });
});
