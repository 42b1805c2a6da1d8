/** `sluice dev` and `sluice publish` as a user runs them: two processes talking HTTP on loopback. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { serveJob, sluice, waitFor } from './helpers.ts';


describe('sluice dev + sluice publish', () => {
  it('serves the job, shows live stats, takes published events, prints closed windows and stops on SIGINT', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-dev-'));
    const file = join(dir, 'views.jsonl');
    // Two windows of page views; the last view (t = 130 s) moves the watermark past the first window's end.
    const views = [
      { page: '/a', user: 'u1', time: 1_000 },
      { page: '/a', user: 'u2', time: 2_000 },
      { page: '/b', user: 'u1', time: 59_999 },
      { page: '/a', user: 'u3', time: 60_000 },
      { page: '/b', user: 'u2', time: 130_000 },
    ];
    writeFileSync(file, views.map((v) => JSON.stringify(v)).join('\n') + '\n{"page": 1}\n');

    const dev = await serveJob(['dev', 'examples/first-job.ts', '--port', '0', '--json', '--checkpoint-dir', join(dir, 'ck')], { timeoutMs: 30_000 });
    try {
      const { url } = dev;
      const published = await sluice(['publish', 'views', file, '--url', url, '--json']);
      expect(published.code).toBe(EXIT.rejects); // one line was rejected, and publish says so
      expect(published.stderr).toMatch(/5 accepted/);
      expect(published.stderr).toMatch(/line 6/);
      expect(JSON.parse(published.stdout)).toEqual({ stream: 'views', file, url, sent: 6, accepted: 5, rejected: [{ line: 6, error: expect.stringMatching(/time|page/) }] });
      // --allow-rejects: the same report, exit 0. A malformed line is refused before sending, so the job's counts stay.
      const malformed = join(dir, 'malformed.jsonl');
      writeFileSync(malformed, '{"page": "/c"\n');
      const allowed = await sluice(['publish', 'views', malformed, '--url', url, '--allow-rejects', '--json']);
      expect(allowed.code, allowed.stderr).toBe(EXIT.ok);
      expect(allowed.stderr).toMatch(/line 1/);
      expect(JSON.parse(allowed.stdout)).toMatchObject({ stream: 'views', file: malformed, accepted: 0, rejected: [{ line: 1, error: expect.stringMatching(/^malformed JSON/) }] });
      // Watermark = 130 s - 5 s - 1 ms: the window [0, 60 s) has closed, [60 s, 120 s) too.
      // The windows close in two partitions, whose sink writes reach dev.stdout() separately: wait for all three rows.
      await waitFor(() => dev.stdout(), /^(?:.*\n){3}/, 15_000);
      const lines = dev.stdout().trim().split('\n').map((l) => JSON.parse(l));
      lines.length = 3;
      expect(lines).toEqual(
        expect.arrayContaining([
          { page: '/a', windowStart: 0, views: 2 },
          { page: '/b', windowStart: 0, views: 1 },
          { page: '/a', windowStart: 60000, views: 1 },
        ]),
      );
      await waitFor(() => dev.stderr(), /records\/s[\s\S]*watermark/, 5_000);

      // sluice status: the running dev's numbers, from its endpoint's GET /stats.
      const status = await sluice(['status', 'examples/first-job.ts', '--checkpoint-dir', join(dir, 'ck'), '--json']);
      expect(status.code, status.stderr).toBe(EXIT.ok);
      expect(status.stderr).toMatch(new RegExp(`^job "page-views": sluice dev, pid ${dev.child.pid}, up .*, endpoint ${url} \\(dashboard ${url}/\\)\n  5 records ingested, 1 rejected \\(1 invalid\\), 0 dead letters, 0 late dropped, queued \\d+, lag `));
      const s = JSON.parse(status.stdout);
      expect(Object.keys(s)).toEqual([
        'job', 'pid', 'url', 'startedAt', 'uptimeMs', 'recordsIngested', 'queuedRecords', 'rejected', 'deadLetters', 'deadLetterFile', 'lateDropped', 'recordsIn', 'watermarks', 'lastCheckpoint',
        'at', 'lagMs', 'lateDroppedTotal', 'shed', 'shedTotal', 'stages', 'maxParallelism', 'scaling', 'operators', 'edges', 'checkpoints', 'sinks', 'cost',
      ]);
      // Scaling advice per stage, from the records its batches took in and their busy time.
      expect(s.scaling.stages.map((a: { name: string }) => a.name)).toEqual(s.stages.map((st: { name: string }) => st.name));
      expect(s.stages.reduce((n: number, st: { recordsIn: number }) => n + st.recordsIn, 0)).toBeGreaterThan(0);
      expect(status.stderr).toMatch(/scaling at [\d,]+ source records\/s \(the current input; --target-rate for another\)/);
      expect(s).toMatchObject({ job: 'page-views', pid: dev.child.pid, url, recordsIngested: 5, rejected: { invalid: 1, overBounds: 0, requestsRefused: 0 }, deadLetters: 0 });
      expect(Object.values(s.recordsIn)).toContain(5);
      expect(Object.values(s.watermarks).some((w) => typeof w === 'number' && w > 100_000)).toBe(true);
    } finally {
      dev.child.kill('SIGINT');
    }
    expect(await dev.exited).toBe(EXIT.rejects);
    // The endpoint rejected line 6 (in a 202): counted in the live view and the summary.
    expect(dev.stderr()).toMatch(/rejected 1|1 rejected \(1 invalid\)/);
    expect(dev.stderr()).toMatch(/stopped: 5 records ingested, 1 rejected \(1 invalid\)/);
    // Stopped: status says there is no dev process, naming where it looked.
    const gone = await sluice(['status', 'examples/first-job.ts', '--checkpoint-dir', join(dir, 'ck')]);
    expect(gone.code).toBe(EXIT.error);
    expect(gone.stderr).toContain(`<job>: expected a job running under \`sluice dev\` with its checkpoint directory in ${join(dir, 'ck')} (else --checkpoint-dir), received no ${join(dir, 'ck', 'dev.json')}`);
    // --json: the summary is the last line on dev.stdout(), after the job's own dev.stdout() sink.
    const summary = JSON.parse(dev.stdout().trim().split('\n').at(-1)!);
    expect(summary).toEqual({ job: 'page-views', target: 'embedded', url: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+$/), recordsIngested: 5, rejected: { invalid: 1, overBounds: 0, requestsRefused: 0 }, deadLetters: 0, deadLetterFile: join(dir, 'ck', 'dead-letters.jsonl'), lateDropped: {}, shed: {}, finalCheckpoint: expect.any(Number), failed: false });
  }, 60_000);
});
