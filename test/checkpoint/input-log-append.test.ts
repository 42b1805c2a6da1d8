/**
 * The input log on its own: a batch of appends is written whole or not at all, a torn
 * tail left by a killed process is cut before the segment grows, a replay of hundreds
 * of thousands of records in one partition reads them all, and durable() fsyncs with
 * group commit (one fsync for every caller waiting at that moment).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { StreamRecord } from '../../lib/api/types.ts';
import { encodeRecords, SourceLog } from '../../lib/local/input-log.ts';
import { tmp } from './jobs.ts';

const recs = (from: number, n: number): StreamRecord[] => Array.from({ length: n }, (_, i) => ({ timestamp: from + i, value: { n: from + i } }));
const text = (r: readonly StreamRecord[]) => encodeRecords(r.map((x) => x.timestamp), r.map((x) => x.value));

describe('input log', () => {
  it('a batch whose write fails leaves no record of it; the next append takes the same positions', () => {
    const root = tmp('sluice-log-atomic-');
    const log = new SourceLog(root, 'events', false);
    log.append(0, 0, recs(0, 3));
    // Partition 1's directory cannot be made (a file is in its place): its write fails after partition 0's.
    writeFileSync(join(root, 'events', 'p1'), 'in the way');
    expect(() => log.appendAll([{ p: 0, at: 3, text: text(recs(3, 2)) }, { p: 1, at: 0, text: text(recs(100, 2)) }])).toThrow();
    expect(log.readFrom(0, 0).map((r) => r.timestamp)).toEqual([0, 1, 2]);
    log.appendAll([{ p: 0, at: 3, text: text(recs(50, 1)) }]);
    expect(log.readFrom(0, 0).map((r) => r.timestamp)).toEqual([0, 1, 2, 50]);
    log.close();
  });

  it('a torn line (a process killed mid-append) is cut off before its segment grows again', () => {
    const root = tmp('sluice-log-torn-');
    const a = new SourceLog(root, 'events', false);
    a.append(0, 0, recs(0, 1));
    a.close();
    // Killed during the segment's first write: nothing whole in it, so new input goes to position 0, the same file.
    const file = join(root, 'events', 'p0', '000000000000.jsonl');
    writeFileSync(file, readFileSync(file, 'utf8').slice(0, 5));
    const b = new SourceLog(root, 'events', false);
    expect(b.readFrom(0, 0)).toHaveLength(0);
    b.append(0, 0, recs(7, 2));
    expect(b.readFrom(0, 0).map((r) => r.timestamp)).toEqual([7, 8]);
    b.close();
    // Whole lines before a torn one: new input starts the next segment, after them.
    const c = new SourceLog(root, 'events', false);
    writeFileSync(file, readFileSync(file, 'utf8') + '[9,{"n":');
    c.append(0, 2, recs(10, 1));
    expect(c.readFrom(0, 0).map((r) => r.timestamp)).toEqual([7, 8, 10]);
    c.close();
  });

  it('replays 300,000 records of one partition (no spread of a segment into an array)', () => {
    const root = tmp('sluice-log-big-');
    const log = new SourceLog(root, 'events', false);
    const n = 300_000;
    for (let at = 0; at < n; at += 50_000) log.append(0, at, recs(at, 50_000));
    log.barrier({ epoch: 1, cursor: null, next: 0, positions: [n] });
    log.append(0, n, recs(n, 10));
    const back = log.readFrom(0, 0);
    expect(back).toHaveLength(n + 10);
    expect(back[n + 9].timestamp).toBe(n + 9);
    expect(log.readFrom(0, 123_456)[0].timestamp).toBe(123_456);
    log.close();
  });

  it('durable() resolves only after the fsync of what was appended; callers waiting at once share the next one', async () => {
    const root = tmp('sluice-log-group-');
    const calls: { fd: number; done: (e: Error | null) => void }[] = [];
    const log = new SourceLog(root, 'events', true, { fsync: (fd, done) => calls.push({ fd, done }) });
    const settled: number[] = [];
    log.append(0, 0, recs(0, 1));
    const first = log.durable().then(() => settled.push(1));
    // Two more requests while the first fsync runs: both wait for the second one.
    log.append(0, 1, recs(1, 1));
    const second = log.durable().then(() => settled.push(2));
    log.append(0, 2, recs(2, 1));
    const third = log.durable().then(() => settled.push(3));
    // The first group: the segment and the directories that gained it.
    const firstGroup = calls.length;
    expect(firstGroup).toBeGreaterThanOrEqual(1);
    await new Promise((r) => setImmediate(r));
    expect(settled).toEqual([]);
    for (const c of calls.splice(0)) c.done(null);
    await first;
    expect(settled).toEqual([1]);
    // One fsync (of the one segment) for both waiting callers.
    expect(calls).toHaveLength(1);
    calls.pop()!.done(null);
    await Promise.all([second, third]);
    expect(settled).toEqual([1, 2, 3]);
    // Nothing appended since: nothing to wait for.
    await log.durable();
    expect(calls).toHaveLength(0);
    // A failed fsync fails its callers (their requests are not answered 202).
    log.append(0, 3, recs(3, 1));
    const failed = log.durable();
    calls.pop()!.done(new Error('EIO: i/o error, fsync'));
    await expect(failed).rejects.toThrow(/EIO/);
    log.close();
  });
});
