/**
 * The Idempotency-Key cases of the embedded endpoint, with a checkpointed runtime whose
 * input log holds the keys: a replay answers as the first request did, another body is a
 * 409, and both survive a kill (the runtime dropped without a checkpoint: only what is on
 * disk carries over) and a resume. A key line whose records never reached the log is
 * dropped when read back; a key whose fsync failed is not remembered.
 */
import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Sinks, type Sink } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { type CheckpointingOptions } from '../../lib/local/checkpointing.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { KeyMemory } from '../../lib/local/ingest-keys.ts';
import { SourceLog } from '../../lib/local/input-log.ts';
import { type IngestServer } from '../../lib/local/ingest-server.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { type Ev, lines, payments, tmp } from '../checkpoint/jobs.ts';
import { type Run, checkpointedRuns, drainAndCheckpoint, until } from '../support/checkpointed-runs.ts';

function job(sink: Sink<unknown>, items?: readonly Ev[]): Job {
  const j = new Job('ingest-keys', { parallelism: 2 });
  const src = items ? j.fromItems('events', items, { timestamp: (e) => e.t, parallelism: 2 }) : j.ingest<Ev>('events', { timestamp: (e) => e.t, parallelism: 2 });
  src.map((e) => ({ user: e.user, amount: e.amount, t: e.t })).sinkTo(sink, 'out');
  return j;
}

const runs = checkpointedRuns(job);
afterEach(runs.stopAll);
const stop = runs.stop;
type Served = Run & { server: IngestServer };
const start = async (dir: string, checkpointing: Partial<CheckpointingOptions> = {}): Promise<Served> => (await runs.start(dir, { checkpointing, serve: true, sourceBatchSize: 4 })) as Served;

async function post(r: Served, body: string, key?: string) {
  const res = await fetch(`${r.server.url}/streams/events/events`, { method: 'POST', headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) }, body });
  return { status: res.status, replayed: res.headers.get('idempotent-replayed'), body: (await res.json()) as Record<string, any> };
}

async function finish(r: Run, accepted: number): Promise<void> {
  await drainAndCheckpoint(r, accepted);
  await stop(r);
}

async function expectOutput(dir: string, events: readonly Ev[]): Promise<void> {
  const ref = Sinks.collect<unknown>();
  await runJob(job(ref, events));
  assertExactlyOnce(ref.records, lines(join(dir, 'out.jsonl')).map((l) => JSON.parse(l)));
}

const events = payments(40);
const body = (from: number, to: number) => JSON.stringify(events.slice(from, to));

describe('Idempotency-Key on the embedded endpoint', () => {
  it('the same key and body twice: the second is a replay with the first answer; another body is a 409; the events go once', async () => {
    const dir = tmp('sluice-keys-replay-');
    const a = await start(dir);
    const withInvalid = JSON.stringify([...events.slice(0, 10), { user: 'x' }]);
    const first = await post(a, withInvalid, 'batch-1');
    expect(first.status).toBe(202);
    expect(first.replayed).toBeNull();
    expect(first.body.accepted).toBe(10);
    const again = await post(a, withInvalid, 'batch-1');
    expect(again.status).toBe(202);
    expect(again.replayed).toBe('true');
    expect(again.body).toEqual({ ...first.body, replay: true });
    const other = await post(a, body(10, 20), 'batch-1');
    expect(other.status).toBe(409);
    expect(other.body).toMatchObject({ error: 'idempotency_key_reused', idempotencyKey: 'batch-1' });
    expect(other.body.message).toMatch(/^Idempotency-Key "batch-1" was first used with another body \(same stream, other bytes\); nothing was enqueued/);
    expect(a.server.rejections().byStatus[409]).toBe(10);
    expect((await post(a, body(10, 20), 'batch-2')).status).toBe(202);
    await finish(a, 20);
    await expectOutput(dir, events.slice(0, 20));
  });

  it('concurrent requests with one key: the second waits for the first, then is its replay', async () => {
    const dir = tmp('sluice-keys-concurrent-');
    const a = await start(dir);
    const [x, y] = await Promise.all([post(a, body(0, 10), 'k'), post(a, body(0, 10), 'k')]);
    expect([x.status, y.status]).toEqual([202, 202]);
    expect([x.replayed, y.replayed].sort()).toEqual(['true', null].sort());
    await finish(a, 10);
    await expectOutput(dir, events.slice(0, 10));
  });

  it('keys survive a kill and a resume, with or without a checkpoint in between', async () => {
    const dir = tmp('sluice-keys-resume-');
    const a = await start(dir);
    expect((await post(a, body(0, 10), 'k1')).status).toBe(202);
    await until(() => a.runtime.stats().sourceRecords === 10);
    await a.checkpoints.checkpointNow();
    expect((await post(a, body(10, 20), 'k2')).status).toBe(202);
    await stop(a); // killed: k2's events only in the log

    const b = await start(dir, { start: 'resume' });
    for (const [k, from, to] of [['k1', 0, 10], ['k2', 10, 20]] as const) {
      const r = await post(b, body(from, to), k);
      expect([r.status, r.replayed, r.body.accepted]).toEqual([202, 'true', 10]);
      expect((await post(b, body(20, 30), k)).status).toBe(409);
    }
    expect((await post(b, body(20, 30), 'k3')).status).toBe(202);
    await stop(b);

    const c = await start(dir, { start: 'resume' });
    expect((await post(c, body(20, 30), 'k3')).replayed).toBe('true');
    await finish(c, 0);
    await expectOutput(dir, events.slice(0, 30));
  });

  it('a key line whose records never reached the log (died between the two writes) is dropped: the retry is accepted', async () => {
    const dir = tmp('sluice-keys-torn-');
    const a = await start(dir);
    expect((await post(a, body(0, 10), 'k1')).status).toBe(202);
    await stop(a);
    const log = new SourceLog(join(dir, 'log'), 'events');
    const keys = readFileSync(log.keysFile, 'utf8').split('\n').filter(Boolean);
    expect(keys).toHaveLength(1);
    // The next request's key line, written; its records not: positions past the log's end.
    const line = JSON.parse(keys[0]) as { k: string; w: [number, number, number][] };
    const fp = (await import('../../lib/transport/idempotency.ts')).bodyFingerprint('events', new TextEncoder().encode(body(10, 20)));
    appendFileSync(log.keysFile, JSON.stringify({ ...line, k: 'k2', f: fp, w: line.w.map(([p]) => [p, log.endOf(p), 5]) }) + '\n{"k":"torn');

    const b = await start(dir, { start: 'resume' });
    const retry = await post(b, body(10, 20), 'k2');
    expect([retry.status, retry.replayed]).toEqual([202, null]);
    expect((await post(b, body(0, 10), 'k1')).replayed).toBe('true');
    await finish(b, 0);
    await expectOutput(dir, events.slice(0, 20));
    // Compacted when read back: the dropped and torn lines are gone.
    expect(readFileSync(log.keysFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).k)).toEqual(['k1', 'k2']);
  });

  it('a request whose fsync failed (500) leaves its key free: the retry is accepted, not replayed', async () => {
    const dir = tmp('sluice-keys-fsync-');
    const pending: ((e: Error | null) => void)[] = [];
    let fail = true;
    const a = await start(dir, { durable: true, logFsync: (_fd, done) => (fail ? pending.push(done) : done(null)) });
    const first = post(a, body(0, 10), 'k');
    await until(() => pending.length > 0);
    for (const done of pending.splice(0)) done(new Error('EIO: i/o error, fsync'));
    expect((await first).status).toBe(500);
    fail = false;
    const retry = await post(a, body(0, 10), 'k');
    expect([retry.status, retry.replayed]).toEqual([202, null]);
    await finish(a, 10);
    await expectOutput(dir, events.slice(0, 10));
  });
});

describe('the key memory', () => {
  it('keeps the last maxKeys keys of the retention period', () => {
    const m = new KeyMemory('s', undefined, 3, 1000);
    const offer = (key: string, at: number) => m.remember({ key, fingerprint: 'f', at, answer: { status: 202, body: {} } });
    for (const [k, at] of [['a', 0], ['b', 1], ['c', 2], ['d', 3]] as const) offer(k, at);
    expect(['a', 'b', 'c', 'd'].map((k) => m.get(k, 10) !== undefined)).toEqual([false, true, true, true]);
    expect(m.get('b', 1001)).toBeUndefined();
    offer('e', 1500); // b, c and d have expired by then
    expect(m.size).toBe(1);
  });

  it('compacts keys.jsonl to the live keys once most of its lines are stale, and reads them back', () => {
    const dir = tmp('sluice-keys-compact-');
    const log = new SourceLog(join(dir, 'log'), 'events', false);
    const m = new KeyMemory('events', log, 10, 1000);
    for (let i = 0; i < 1100; i++) {
      const offer = { key: `k${i}`, fingerprint: 'f', at: 0, answer: { status: 202, body: { accepted: 1 } } };
      const records = { p: 0, at: i, text: '[0,1]\n' };
      const line = m.append(offer, [records]);
      log.appendAll([line, records]);
      m.remember(offer, line);
      m.compactIfStale();
    }
    const keys = () => readFileSync(log.keysFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).k as string);
    // Compacted once, past 2 x 10 + 1000 lines: 10 live, and the 79 appended since.
    expect(keys()).toHaveLength(89);
    expect(keys().slice(0, 10)).toEqual(Array.from({ length: 10 }, (_, i) => `k${1011 + i}`));
    log.close();
    const back = new KeyMemory('events', new SourceLog(join(dir, 'log'), 'events', false), 10, 1000).load(0);
    expect(back.size).toBe(10);
    expect(back.get('k1099', 0)).toMatchObject({ state: 'done', answer: { status: 202, body: { accepted: 1 } } });
    expect(keys()).toHaveLength(10);
  });
});
