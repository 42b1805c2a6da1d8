/**
 * Late records dropped, counted alike everywhere a user looks: clicks published to
 * `sluice dev` with known late ones (two tumbling windows, late-windows-job.ts) are
 * reported with the same per-operator counts by GET /stats, `sluice status --json`, the
 * dashboard (headless Chromium, when installed), the stop summary (--json) and the
 * CloudWatch EMF lines of --metrics.
 */
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { serveJob, sluice } from './helpers.ts';

const JOB = 'test/cli/late-windows-job.ts';
const CHROMIUM = '/usr/bin/chromium';

/**
 * The watermark of the only partition trails its newest click by nothing, and advances
 * after each request's chunk: after the first request it is past 15,499, so the second
 * request's clicks at 100 and 5,000 are late for both windows, those at 12,000 and 13,000
 * only for the one-second window ([10,000, 20,000) is still open), and 15,600 for neither.
 */
const REQUESTS = [
  [{ user: 'a', ts: 500 }, { user: 'a', ts: 15_500 }],
  [{ user: 'a', ts: 100 }, { user: 'b', ts: 5_000 }, { user: 'a', ts: 12_000 }, { user: 'b', ts: 13_000 }, { user: 'a', ts: 15_600 }],
];
const LATE = { 'per-second': 4, 'per-ten-seconds': 2 };

interface Emf {
  _aws: { CloudWatchMetrics: { Namespace: string; Dimensions: string[][]; Metrics: { Name: string }[] }[] };
  [field: string]: unknown;
}

/** lateDropped summed per operator dimension, and over the stage lines, from the EMF lines. */
function lateFromMetrics(path: string): { perOperator: Record<string, number>; perStage: number } {
  const perOperator: Record<string, number> = {};
  let perStage = 0;
  for (const line of readFileSync(path, 'utf8').split('\n').filter(Boolean)) {
    const emf = JSON.parse(line) as Emf;
    const n = emf.lateDropped as number | undefined;
    if (n === undefined) continue;
    expect(emf._aws.CloudWatchMetrics[0].Namespace).toBe('Sluice');
    expect(emf.service).toBe('late-windows');
    if (typeof emf.operator === 'string') perOperator[emf.operator] = (perOperator[emf.operator] ?? 0) + n;
    else perStage += n;
  }
  return { perOperator, perStage };
}

describe('late records dropped through sluice dev', () => {
  it('the same per-operator counts in GET /stats, sluice status --json, the dashboard, the stop summary and the metrics', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-late-'));
    const ck = join(dir, 'ck');
    const metrics = join(dir, 'metrics', 'emf.jsonl');
    const dev = await serveJob(['dev', JOB, '--port', '0', '--checkpoint-dir', ck, '--metrics', metrics, '--json']);
    const url = dev.url;
    try {
      const stats = async () => (await (await fetch(`${url}/stats`)).json()) as { recordsIn: Record<string, number>; queuedRecords: number; lateDropped: Record<string, number>; lateDroppedTotal: number };
      let sent = 0;
      for (const clicks of REQUESTS) {
        const res = await fetch(`${url}/streams/clicks/events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(clicks) });
        expect(res.status).toBe(202);
        sent += clicks.length;
        // One request at a time through both windows, so each is judged against the watermark the one before left.
        const end = Date.now() + 30_000;
        for (;;) {
          const s = await stats();
          if (s.recordsIn['per-second'] === sent && s.recordsIn['per-ten-seconds'] === sent) break;
          if (Date.now() > end) throw new Error(`records not through the windows: ${JSON.stringify(s.recordsIn)}`);
          await new Promise((r) => setTimeout(r, 50));
        }
      }
      const s = await stats();
      expect(s.lateDropped).toEqual(LATE);
      expect(s.lateDroppedTotal).toBe(6);

      const status = await sluice(['status', JOB, '--checkpoint-dir', ck, '--json']);
      expect(status.code, status.stderr).toBe(EXIT.ok);
      const st = JSON.parse(status.stdout) as { lateDropped: Record<string, number>; operators: { name: string; lateDropped: number }[] };
      expect(st.lateDropped).toEqual(LATE);
      expect(Object.fromEntries(st.operators.filter((o) => o.lateDropped).map((o) => [o.name, o.lateDropped]))).toEqual(LATE);
      expect(status.stderr).toContain('6 late dropped');

      if (existsSync(CHROMIUM)) {
        const browser = await chromium.launch({ executablePath: CHROMIUM });
        try {
          const page = await browser.newPage();
          await page.goto(`${url}/`);
          await page.waitForSelector('#late-dropped[data-value="6"]', { timeout: 30_000 });
          const drawn = await page.$$eval('[data-testid=operator]', (ns) => ns.map((n) => [n.getAttribute('data-name'), Number(n.getAttribute('data-late-dropped'))]));
          expect(Object.fromEntries(drawn.filter(([, n]) => n))).toEqual(LATE);
        } finally {
          await browser.close();
        }
      } else {
        console.warn(`late counts: the dashboard part skipped, no ${CHROMIUM} (.ci/run installs Debian's chromium package)`);
      }
    } finally {
      dev.child.kill('SIGINT');
    }
    expect(await dev.exited).toBe(EXIT.ok);
    const summary = JSON.parse(dev.stdout().trim().split('\n').at(-1)!) as { lateDropped: Record<string, number> };
    expect(summary.lateDropped).toEqual(LATE);
    expect(dev.stderr()).toMatch(/stopped: .*6 late dropped/);
    const m = lateFromMetrics(metrics);
    expect(m.perOperator).toEqual(LATE);
    expect(m.perStage).toBe(6);
  }, 90_000);
});
