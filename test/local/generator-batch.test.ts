/**
 * A generator source's batch form (generateBatch): one call per pull, the same events,
 * cursor and restore behaviour as generate(n), and a clear error for a wrong batch.
 */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock, WatermarkStrategies } from '../../lib/api/types.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { createReader, GeneratorBatchError, type PullResult } from '../../lib/transport/sources.ts';

const clock = new ManualClock(0);
const event = (n: number) => ({ n, t: n % 5 === 4 ? Number.NaN : n * 10 });

describe('generator binding with generateBatch', () => {
  it('the reader makes one call per pull, ends where generate would, and seeks like it', () => {
    const calls: [number, number][] = [];
    const reader = createReader({ kind: 'generator', count: 10, generate: event, generateBatch: (s, e) => (calls.push([s, e]), Array.from({ length: e - s }, (_, i) => event(s + i))) }, 'in', clock);
    const first = reader.pull(4);
    expect(first).toEqual({ events: [0, 1, 2, 3].map(event), done: false });
    expect(reader.cursor!()).toBe(4);
    expect(reader.pull(8)).toEqual({ events: [4, 5, 6, 7, 8, 9].map(event), done: true });
    expect(calls).toEqual([[0, 4], [4, 10]]);
    // No call for an empty pull at the end.
    expect(reader.pull(8)).toEqual({ events: [], done: true });
    reader.seek!(7);
    expect((reader.pull(2) as PullResult).events).toEqual([7, 8].map(event));
    expect(calls).toHaveLength(3);
  });

  it('a batch of the wrong length is a GeneratorBatchError naming the source and the call; a throw leaves the cursor', () => {
    const short = createReader({ kind: 'generator', count: 10, generate: event, generateBatch: (s) => [event(s)] }, 'in', clock);
    expect(() => short.pull(3)).toThrow(GeneratorBatchError);
    expect(() => short.pull(3)).toThrow('source "in": generateBatch(0, 3): expected an array of 3 events, received an array of 1');
    let fail = true;
    const flaky = createReader({ kind: 'generator', count: 10, generate: event, generateBatch: (s, e) => {
      if (fail) throw new Error('not yet');
      return Array.from({ length: e - s }, (_, i) => event(s + i));
    } }, 'in', clock);
    expect(() => flaky.pull(3)).toThrow('not yet');
    expect(flaky.cursor!()).toBe(0);
    fail = false;
    expect((flaky.pull(3) as PullResult).events).toEqual([0, 1, 2].map(event));
  });

  it('a job reads the same records and rejects the same events, with their positions, as with generate alone', async () => {
    const run = async (batch: boolean) => {
      const job = new Job('gen', { parallelism: 1 });
      const out = Sinks.collect<number>();
      job
        .fromGenerator('in', { count: 2_000, generate: event, ...(batch ? { generateBatch: (s: number, e: number) => Array.from({ length: e - s }, (_, i) => event(s + i)) } : {}) }, { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(0) })
        .filter((e) => e.n % 3 === 0)
        .map((e) => e.n)
        .sinkTo(out);
      const runtime = new EmbeddedRuntime(job, { clock: new ManualClock(0) });
      await runtime.run();
      return { rows: out.records, rejected: runtime.rejectedInputs };
    };
    const perEvent = await run(false);
    const batched = await run(true);
    expect(batched).toEqual(perEvent);
    expect(batched.rows).toHaveLength(534);
    expect(batched.rejected).toHaveLength(400);
    expect(batched.rejected[0]).toMatchObject({ source: 'in', position: 'event 4' });
  });
});
