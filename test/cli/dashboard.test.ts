/**
 * The dashboard of `sluice dev` in headless Chromium (Debian's, driven by playwright-core):
 * it loads, draws the job's operators, its counters follow published events and equal
 * GET /stats and then `sluice status --json`, and its checkpoint timeline gains an epoch. Screenshot: test-artifacts/dashboard.png.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { ROOT, sluice, waitFor } from './helpers.ts';

const CHROMIUM = '/usr/bin/chromium';
const missing = !existsSync(CHROMIUM);
if (missing) console.warn(`dashboard test skipped: no ${CHROMIUM} (.ci/run installs Debian's chromium package)`);

/** Polls `check` until it returns true; fails with `what` after timeoutMs. */
async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe.skipIf(missing)('dashboard in headless Chromium', () => {
  it('loads, shows the operators, counters equal to GET /stats while events arrive, and a new checkpoint epoch', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-dash-'));
    const dev = spawn(process.execPath, ['bin/sluice.js', 'dev', 'examples/first-job.ts', '--port', '0', '--checkpoint-dir', join(dir, 'ck'), '--checkpoint-interval', '300'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    dev.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    dev.stdout.resume();
    const exited = new Promise<number | null>((resolve) => dev.on('close', resolve));
    const browser = await chromium.launch({ executablePath: CHROMIUM });
    try {
      const [, url] = await waitFor(() => stderr, /ingestion endpoint (http:\/\/127\.0\.0\.1:\d+)/, 30_000);
      const stats = async () => (await (await fetch(`${url}/stats`)).json()) as { recordsIngested: number; lastCheckpoint: number | null; operators: { name: string; recordsIn: number }[] };
      const page = await browser.newPage();
      await page.goto(`${url}/`);
      await until('the page shows the job', async () => (await page.textContent('#job')) === 'page-views');
      const names = await page.$$eval('[data-testid=operator]', (ns) => ns.map((n) => n.getAttribute('data-name')));
      expect(names).toEqual((await stats()).operators.map((o) => o.name));
      expect(names).toEqual(expect.arrayContaining(['views', 'counts']));

      const shown = async () => Number(await page.getAttribute('#records-ingested', 'data-value'));
      const completed = async () => (await page.$$eval('[data-testid=checkpoint][data-status=completed]', (rs) => rs.map((r) => Number(r.getAttribute('data-epoch'))))).reduce((a, b) => Math.max(a, b), 0);
      const epochBefore = await completed();
      let sent = 0;
      for (let round = 1; round <= 3; round++) {
        const views = Array.from({ length: 10 * round }, (_, i) => ({ page: `/p${i % 3}`, user: `u${i}`, time: round * 70_000 + i }));
        const res = await fetch(`${url}/streams/views/events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(views) });
        expect(res.status).toBe(202);
        sent += views.length;
        // The page polls once a second: wait until it and GET /stats agree on the new total.
        await until(`the page shows ${sent} records ingested`, async () => (await shown()) === sent && (await stats()).recordsIngested === sent);
        const text = await page.textContent('#records-ingested .value');
        expect(text).toBe(sent.toLocaleString('en-US'));
      }
      await until('the page and GET /stats agree on every operator', async () => {
        const s = await stats();
        const drawn = await page.$$eval('[data-testid=operator]', (ns) => ns.map((n) => [n.getAttribute('data-name'), Number(n.getAttribute('data-records-in'))]));
        return JSON.stringify(drawn) === JSON.stringify(s.operators.map((o) => [o.name, o.recordsIn]));
      });
      // Publishing has stopped: what the page shows equals what `sluice status --json` prints.
      const status = await sluice(['status', 'examples/first-job.ts', '--checkpoint-dir', join(dir, 'ck'), '--json']);
      expect(status.code, status.stderr).toBe(EXIT.ok);
      const st = JSON.parse(status.stdout) as { recordsIngested: number; lateDroppedTotal: number; operators: { name: string; recordsIn: number }[] };
      expect(await shown()).toBe(st.recordsIngested);
      expect(Number(await page.getAttribute('#late-dropped', 'data-value'))).toBe(st.lateDroppedTotal);
      const drawn = await page.$$eval('[data-testid=operator]', (ns) => ns.map((n) => [n.getAttribute('data-name'), Number(n.getAttribute('data-records-in'))]));
      expect(drawn).toEqual(st.operators.map((o) => [o.name, o.recordsIn]));
      // Each stage carries the scaling advice (partitions for the current input) once its records are measured.
      const advised = await page.$$eval('[data-testid=stage]', (ns) => ns.map((n) => n.getAttribute('data-advised')));
      expect(advised.length).toBeGreaterThan(0);
      for (const a of advised) expect(Number(a)).toBeGreaterThanOrEqual(1);
      await until('the checkpoint timeline gains an epoch', async () => (await completed()) > epochBefore);
      mkdirSync(join(ROOT, 'test-artifacts'), { recursive: true });
      await page.screenshot({ path: join(ROOT, 'test-artifacts', 'dashboard.png'), fullPage: true });
    } finally {
      await browser.close();
      dev.kill('SIGINT');
    }
    await exited;
  }, 60_000);
});
