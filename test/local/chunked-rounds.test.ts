import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock, WatermarkStrategies } from '../../lib/api/types.ts';
import { compile } from '../../lib/graph/compile.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { chunkedRounds } from '../../lib/local/embedded.ts';
import { SOURCE_BATCH, sourceChunking } from '../../lib/local/rounds.ts';

interface Ev {
  n: number;
  t: number;
}

/** A selection and projection: one source, one stage, one partition, no state. */
function selection(clock: ManualClock, count: number): { job: Job; out: ReturnType<typeof Sinks.collect<{ n: number }>> } {
  const job = new Job('chunked', { parallelism: 1 });
  const out = Sinks.collect<{ n: number }>();
  job
    .fromGenerator<Ev>(
      'in',
      {
        count,
        // Time moves as input is read (not as it is processed), so both runs see the same clock at every tick.
        generate: (n) => {
          clock.advance(1);
          return { n, t: n * 3 - (n % 7) * 5 };
        },
      },
      { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(20) },
    )
    .filter((e) => e.n % 3 !== 0)
    .map((e) => ({ n: e.n }))
    .sinkTo(out);
  return { job, out };
}

async function run(chunksPerRound: number, intervalMs: number) {
  const clock = new ManualClock(1_000);
  const { job, out } = selection(clock, 3_000);
  const dir = mkdtempSync(join(tmpdir(), 'sluice-chunked-'));
  try {
    const { runtime, checkpoints } = await openCheckpointedRuntime(job, { clock, sourceBatchSize: 16, sourceChunksPerRound: chunksPerRound }, { dir, intervalMs, durable: false, clock });
    // Every barrier's position, as its partition acknowledged it.
    const barriers: { epoch: number; positions: Readonly<Record<string, number>> }[] = [];
    const onAck = checkpoints.onAck.bind(checkpoints);
    checkpoints.onAck = (ack) => {
      barriers.push({ epoch: ack.epoch, positions: ack.positions });
      onAck(ack);
    };
    const stats = await runtime.run();
    return { rows: out.records, barriers, completed: checkpoints.driver.completed.map((c) => c.epoch), commits: stats.commits, deliveries: out.records.length };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('several source chunks per round (one source, one stage of one partition, no state)', () => {
  it('applies only to such jobs', () => {
    const { job } = selection(new ManualClock(0), 1);
    expect(chunkedRounds(compile(job.graph), 1)).toBe(true);
    const keyed = new Job('keyed', { parallelism: 1 });
    keyed
      .fromItems('in', [1, 2])
      .keyBy((x) => x)
      .process<number>({ processElement: (x, ctx) => ctx.emit(x) })
      .sinkTo(Sinks.collect());
    expect(chunkedRounds(compile(keyed.graph), 1)).toBe(false);
    const wide = new Job('wide', { parallelism: 2 });
    wide.fromItems('in', [1, 2]).sinkTo(Sinks.collect());
    expect(chunkedRounds(compile(wide.graph), 1)).toBe(false);
  });

  it('sizes their chunks so that a round is 4096 records (within one batch); other jobs keep chunks of SOURCE_BATCH records, one per round', () => {
    const plan = compile(selection(new ManualClock(0), 1).job.graph);
    expect(sourceChunking(plan, {}, 16_384)).toEqual({ batchSize: 2048, chunksPerRound: 2 });
    expect(sourceChunking(plan, {}, 2048)).toEqual({ batchSize: 2048, chunksPerRound: 1 });
    expect(sourceChunking(plan, { sourceBatchSize: 16 }, 16_384)).toEqual({ batchSize: 16, chunksPerRound: 256 });
    expect(sourceChunking(plan, { sourceBatchSize: 16, sourceChunksPerRound: 3 }, 16_384)).toEqual({ batchSize: 16, chunksPerRound: 3 });
    expect(sourceChunking(plan, { sourceBatchSize: 50_000 }, 16_384)).toEqual({ batchSize: 50_000, chunksPerRound: 1 });
    const wide = new Job('wide', { parallelism: 2 });
    wide.fromItems('in', [1, 2]).sinkTo(Sinks.collect());
    expect(sourceChunking(compile(wide.graph), { sourceChunksPerRound: 8 }, 16_384)).toEqual({ batchSize: SOURCE_BATCH, chunksPerRound: 1 });
  });

  // 40 ms: epochs with input between them (chunks go several per round between epochs);
  // 5 ms: the next epoch is due as soon as one completes (one chunk per round throughout).
  it.each([40, 5])('changes only the batching: the same rows in the same order, barriers at the same positions, the same epochs (interval %i ms)', async (interval) => {
    const one = await run(1, interval);
    const eight = await run(8, interval);
    expect(one.barriers.length).toBeGreaterThan(5);
    expect(eight.rows).toEqual(one.rows);
    expect(eight.barriers).toEqual(one.barriers);
    expect(eight.completed).toEqual(one.completed);
    if (interval === 40) expect(eight.commits).toBeLessThan(one.commits);
  });
});
