/**
 * Logged input: what the ingestion endpoint accepted cannot be read again, so it is
 * logged per source partition and epoch; a restore replays everything after the
 * checkpoint's positions. Logs behind the retained checkpoints are truncated.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Sinks, type Sink } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { SourceLog } from '../../lib/local/input-log.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { type Ev, lines, payments, tmp } from './jobs.ts';

/** Running totals per user from one ingestion partition (deterministic), or the same over items. */
function job(sink: Sink<unknown>, items?: readonly Ev[]): Job {
  const j = new Job('ck-ingest', { parallelism: 2 });
  const src = items ? j.fromItems('events', items, { timestamp: (e) => e.t, parallelism: 1 }) : j.ingest<Ev>('events', { timestamp: (e) => e.t, parallelism: 1 });
  src
    .keyBy((e) => e.user)
    .process({
      state: { total: valueState<number>() },
      processElement(e, ctx) {
        const total = (ctx.state.total.get() ?? 0) + e.amount;
        ctx.state.total.set(total);
        ctx.emit({ user: e.user, total });
      },
    })
    .name('totals')
    .sinkTo(sink, 'out');
  return j;
}

const until = async (f: () => boolean) => {
  for (let i = 0; !f(); i++) {
    if (i > 5000) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 1));
  }
};

describe('logged input', () => {
  it('a restore replays what the endpoint accepted after the checkpoint; old segments are truncated', async () => {
    const events = payments(2000);
    const dir = tmp('sluice-log-');
    const file = join(dir, 'out.jsonl');
    const clock = new ManualClock(1_000_000);

    // First process: 1,500 events accepted, a checkpoint after 1,000, then it dies.
    const sink1 = new CommittedFileSink(file, join(dir, 'sinks', 'out'), false);
    const a = await openCheckpointedRuntime(job(sink1), { clock, sinks: { out: sink1 }, sourceBatchSize: 50 }, { dir, intervalMs: 0, sinks: [sink1], durable: false });
    await a.runtime.start();
    const loop1 = a.runtime.loop();
    for (let i = 0; i < 1000; i += 100) {
      expect(a.runtime.offer('events', events.slice(i, i + 100)).ok).toBe(true);
      await until(() => a.runtime.stats().sourceRecords >= i + 100);
      await a.checkpoints.checkpointNow();
    }
    a.runtime.offer('events', events.slice(1000, 1500));
    // Accepted means logged: in the log when offer() returns, before any scheduling step.
    const log = new SourceLog(join(dir, 'log'), 'events');
    expect(log.readFrom(0, 1000)).toHaveLength(500);
    await until(() => a.runtime.stats().sourceRecords === 1500);
    // Retention keeps the log back to the last checkpoint only: earlier segments are gone.
    expect(log.segmentCount(0)).toBeLessThanOrEqual(2);
    expect(log.readFrom(0, 1000)).toHaveLength(500);
    a.runtime.stop();
    await loop1;
    const committedBefore = lines(file).length;

    // Second process: resume; the 500 logged records are replayed, then new input arrives.
    const sink2 = new CommittedFileSink(file, join(dir, 'sinks', 'out'), false);
    const b = await openCheckpointedRuntime(job(sink2), { clock, sinks: { out: sink2 }, sourceBatchSize: 50 }, { dir, intervalMs: 0, sinks: [sink2], durable: false, start: 'resume' });
    expect(b.checkpoints.restoredEpoch).toBeGreaterThan(0);
    await b.runtime.start();
    const loop2 = b.runtime.loop();
    await until(() => b.runtime.stats().sourceRecords === 0 && b.runtime.stats().queuedRecords === 0);
    b.runtime.offer('events', events.slice(1500));
    await until(() => b.runtime.stats().sourceRecords === 500 && !b.runtime.replaying());
    await b.checkpoints.checkpointNow();
    b.runtime.stop();
    await loop2;

    const ref = Sinks.collect<unknown>();
    await runJob(job(ref, events));
    const got = lines(file).map((l) => JSON.parse(l));
    expect(committedBefore).toBeLessThan(got.length);
    assertExactlyOnce(ref.records, got);
    expect(readdirSync(join(dir, 'log', 'events')).sort()).toEqual(['barriers.jsonl', 'p0']);
    // Barrier entries behind the retention point are gone too.
    expect(lines(join(dir, 'log', 'events', 'barriers.jsonl')).length).toBeLessThanOrEqual(2);
  });
});
