/**
 * What the endpoint of a checkpointed embedded runtime accepts survives: an event nested
 * deeper than JSON.stringify can write is logged and replayed; a request whose log
 * write fails gets an error and leaves no gap (later requests go on); a resume without a
 * completed checkpoint replays the log; events accepted while a resume replays are logged
 * like any other; and the 202 waits for the log's fsync. A "kill" here is a runtime
 * dropped without a checkpoint: only what is on disk carries over.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Sinks, type Sink } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { type CheckpointingOptions, type LocalCheckpointing } from '../../lib/local/checkpointing.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { SourceLog } from '../../lib/local/input-log.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { type Ev, lines, payments, tmp } from '../checkpoint/jobs.ts';
import { type Run, checkpointedRuns, drainAndCheckpoint, until } from '../support/checkpointed-runs.ts';

/** Running totals per user from one ingestion partition (deterministic), or the same over items. */
function job(sink: Sink<unknown>, items?: readonly Ev[]): Job {
  const j = new Job('ingest-durable', { parallelism: 2 });
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

const runs = checkpointedRuns(job);
afterEach(runs.stopAll);
const stop = runs.stop;
const start = (dir: string, checkpointing: Partial<CheckpointingOptions> = {}, before?: (c: LocalCheckpointing) => void, serve = false) => runs.start(dir, { checkpointing, before, serve });

async function expectOutput(dir: string, events: readonly Ev[]): Promise<void> {
  const ref = Sinks.collect<unknown>();
  await runJob(job(ref, events));
  assertExactlyOnce(ref.records, lines(join(dir, 'out.jsonl')).map((l) => JSON.parse(l)));
}

const post = (r: Run, events: readonly unknown[]) =>
  fetch(`${r.server!.url}/streams/events/events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(events) });

/** An event with a field nested `depth` levels deep (built as text: JSON.stringify cannot write it). */
function deepBody(e: Ev, depth: number): string {
  return `[{"user":${JSON.stringify(e.user)},"amount":${e.amount},"t":${e.t},"deep":${'['.repeat(depth)}1${']'.repeat(depth)}}]`;
}

describe('accepted means durable (embedded runtime, endpoint)', () => {
  it('a deeply nested event is accepted and replayed; a request whose log write fails gets a 500 and leaves no gap', async () => {
    const dir = tmp('sluice-durable-deep-');
    const events = payments(40);
    let failNext = false;
    const a = await start(dir, {}, (c) => {
      const logFor = c.logFor.bind(c);
      c.logFor = (source, replayable) => {
        const l = logFor(source, replayable);
        const appendAll = l.log.appendAll.bind(l.log);
        l.log.appendAll = (batch) => {
          if (failNext) {
            failNext = false;
            throw new Error('ENOSPC: no space left on device, write');
          }
          appendAll(batch);
        };
        return l;
      };
    }, true);
    const accepted: Ev[] = [];
    expect((await post(a, events.slice(0, 10))).status).toBe(202);
    accepted.push(...events.slice(0, 10));
    await drainAndCheckpoint(a, 10);
    // 20,000 levels: past what JSON.stringify and a recursive encoder can write. Offered
    // directly: the endpoint's validation bounds the depth of what arrives over HTTP.
    const deep = a.runtime.offer('events', JSON.parse(deepBody(events[10], 20_000)) as unknown[]);
    expect(deep.ok).toBe(true);
    accepted.push(events[10]);
    failNext = true;
    const failed = await post(a, events.slice(11, 20));
    expect(failed.status).toBe(500);
    expect(((await failed.json()) as { message: string }).message).toMatch(/ENOSPC/);
    expect((await post(a, events.slice(20))).status).toBe(202);
    accepted.push(...events.slice(20));
    await until(() => a.runtime.stats().sourceRecords === accepted.length && a.runtime.stats().queuedRecords === 0);
    // No gap: the runtime is still running (a gap fails it) and the log holds exactly what was accepted.
    expect(new SourceLog(join(dir, 'log'), 'events').readFrom(0, 0)).toHaveLength(accepted.length);
    await stop(a);

    // Resumed from the checkpoint after the first ten: the rest, the deep event too, replays from the log.
    const b = await start(dir, { start: 'resume' });
    expect(b.checkpoints.restoredEpoch).toBeGreaterThan(0);
    await drainAndCheckpoint(b, 0);
    await stop(b);
    await expectOutput(dir, accepted);
  });

  it('--resume without a completed checkpoint replays everything the endpoint accepted', async () => {
    const dir = tmp('sluice-durable-nock-');
    const events = payments(600);
    const a = await start(dir);
    for (let i = 0; i < 600; i += 100) expect(a.runtime.offer('events', events.slice(i, i + 100)).ok).toBe(true);
    await until(() => a.runtime.stats().sourceRecords === 600);
    await stop(a);

    const b = await start(dir, { start: 'resume' });
    expect(b.checkpoints.resumed).toBe('start');
    expect(b.checkpoints.restoredEpoch).toBe(0);
    await drainAndCheckpoint(b, 0);
    await stop(b);
    await expectOutput(dir, events);
  });

  it('events accepted while a resume replays are logged at once, and survive another kill', async () => {
    const dir = tmp('sluice-durable-replay-');
    const events = payments(3500);
    const a = await start(dir);
    expect(a.runtime.offer('events', events.slice(0, 100)).ok).toBe(true);
    await drainAndCheckpoint(a, 100);
    expect(a.runtime.offer('events', events.slice(100, 3100)).ok).toBe(true);
    await stop(a);

    // Killed early in the replay (3,000 records after the checkpoint, 50 a round): new input arrived meanwhile.
    const b = await start(dir, { start: 'resume' });
    expect(b.runtime.replaying()).toBe(true);
    expect(b.runtime.offer('events', events.slice(3100)).ok).toBe(true);
    expect(new SourceLog(join(dir, 'log'), 'events').readFrom(0, 100)).toHaveLength(3400);
    await stop(b);

    const c = await start(dir, { start: 'resume' });
    await drainAndCheckpoint(c, 0);
    await stop(c);
    await expectOutput(dir, events);
  });

  it('the 202 waits for the fsync of the log; a failed fsync answers 500', async () => {
    const dir = tmp('sluice-durable-fsync-');
    const pending: ((e: Error | null) => void)[] = [];
    const a = await start(dir, { durable: true, logFsync: (_fd, done) => pending.push(done) }, undefined, true);
    const events = payments(20);
    let answered = false;
    const res = post(a, events.slice(0, 10)).then((r) => ((answered = true), r));
    await until(() => pending.length > 0);
    // Event-loop turns for the answer to arrive, if it did not wait.
    for (let i = 0; i < 50; i++) await new Promise((r) => setImmediate(r));
    expect(answered).toBe(false);
    for (const done of pending.splice(0)) done(null);
    expect((await res).status).toBe(202);

    const bad = post(a, events.slice(10));
    await until(() => pending.length > 0);
    for (const done of pending.splice(0)) done(new Error('EIO: i/o error, fsync'));
    const r = await bad;
    expect(r.status).toBe(500);
    expect(((await r.json()) as { message: string }).message).toMatch(/EIO/);
  });

  it('a barrier behind a request still waiting for its fsync fsyncs it first: the request is answered 202 and precedes the barrier', async () => {
    const dir = tmp('sluice-durable-fsync-barrier-');
    const pending: ((e: Error | null) => void)[] = [];
    const a = await start(dir, { durable: true, logFsync: (_fd, done) => pending.push(done) }, undefined, true);
    const events = payments(10);
    const res = post(a, events);
    await until(() => pending.length > 0);
    // The checkpoint's barrier fsyncs the segment itself; the asynchronous fsync is still out.
    const epoch = await a.checkpoints.checkpointNow();
    expect(epoch).toBeGreaterThan(0);
    expect((await res).status).toBe(202);
    for (const done of pending.splice(0)) done(null);
    await drainAndCheckpoint(a, 10);
    await stop(a);
    await expectOutput(dir, events);
  });

  it('500 means not accepted: events whose fsync failed never reach the job, nor the log a resume replays', async () => {
    const dir = tmp('sluice-durable-fsync-lost-');
    const pending: ((e: Error | null) => void)[] = [];
    const sync = async () => {
      await until(() => pending.length > 0);
      for (const done of pending.splice(0)) done(null);
    };
    const a = await start(dir, { durable: true, logFsync: (_fd, done) => pending.push(done) }, undefined, true);
    const events = payments(30);
    const first = post(a, events.slice(0, 10));
    await sync();
    expect((await first).status).toBe(202);
    await until(() => a.runtime.stats().sourceRecords === 10 && a.runtime.stats().queuedRecords === 0);

    // Two requests appended, the first one's fsync fails: what was appended since the last
    // good fsync is cut off the log, so both answer 500 (the second waited for the next fsync).
    const logged = () => new SourceLog(join(dir, 'log'), 'events').readFrom(0, 0).length;
    let answered = 0;
    const bad = [post(a, events.slice(10, 15)), post(a, events.slice(15, 20))].map((p) => p.then((r) => (answered++, r)));
    await until(() => pending.length > 0 && logged() === 20);
    for (const done of pending.splice(0)) done(new Error('EIO: i/o error, fsync'));
    // Later fsyncs succeed.
    await until(() => {
      for (const done of pending.splice(0)) done(null);
      return answered === 2;
    });
    for (const r of await Promise.all(bad)) expect(r.status).toBe(500);

    const after = post(a, events.slice(20));
    await sync();
    expect((await after).status).toBe(202);
    const accepted = [...events.slice(0, 10), ...events.slice(20)];
    await drainAndCheckpoint(a, accepted.length);
    expect(a.runtime.stats().sourceRecords).toBe(accepted.length);
    expect(new SourceLog(join(dir, 'log'), 'events').readFrom(0, 0).map((rec) => rec.value)).toEqual(accepted);
    await stop(a);
    await expectOutput(dir, accepted);

    // A resume from scratch replays only the log: the refused events are not in it.
    const b = await start(dir, { start: 'resume' });
    await drainAndCheckpoint(b, 0);
    await stop(b);
    await expectOutput(dir, accepted);
  });
});
