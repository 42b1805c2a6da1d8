/** `sluice demo` (npm start) runs Q5 (or any --query of examples/nexmark) on generated events, prints results and a summary, and exits 0 by itself. */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEMO_QUERIES } from '../../lib/cli/demo.ts';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { ROOT, sluice, type CliResult } from './helpers.ts';
import { sluiceInProcess } from './in-process.ts';

const WINDOW_LINE = /^window \d\d:\d\d:\d\d-\d\d:\d\d:\d\d {2}hot auctions? [\d, ]+ with [\d,]+ bids/;
const SUMMARY = /demo done: ([\d,]+) events processed in [\d.]+ s \([\d,]+ events\/s\), ([\d,]+) windows emitted \([\d,]+ results\), peak RSS \d+ MB/;

function check(r: CliResult): { events: number; windows: number } {
  expect(r.code, r.stderr).toBe(0);
  const m = SUMMARY.exec(r.stdout);
  expect(m, r.stdout).not.toBeNull();
  expect(r.stderr).toMatch(/events\/s .* watermark (-|\d\d:\d\d:\d\d\.\d{3})/);
  const windows = r.stdout.split('\n').filter((l) => WINDOW_LINE.test(l)).length;
  return { events: Number(m![1].replace(/,/g, '')), windows };
}

describe('sluice demo', () => {
  it('prints window results and a summary, then exits 0', { timeout: 60_000 }, async () => {
    const t0 = Date.now();
    let run = check(await sluice(['demo', '--duration', '3']));
    expect(Date.now() - t0).toBeLessThan(30_000);
    // The first window closes once ~60 000 events are through (6 s of event time: 2 s of window
    // plus the 4 s watermark delay). A machine busy with other tests may not get there in 3 s;
    // then check the window lines on a longer run rather than fail on the machine's load.
    if (run.events < 70_000) run = check(await sluice(['demo', '--duration', '10']));
    expect(run.windows).toBeGreaterThan(0);
  });

  // The argument errors and the help parse in this process (in-process.ts).
  it('rejects a bad --duration naming the flag', async () => {
    const r = await sluiceInProcess(['demo', '--duration', 'soon']);
    expect(r.code).toBe(EXIT.error);
    expect(r.stderr).toMatch(/--duration: expected a positive number of seconds.*received "soon"/);
  });

  it('rejects an unknown --query naming every query, also as JSON with --json', async () => {
    const r = await sluiceInProcess(['demo', '--query', 'q6', '--json']);
    expect(r.code).toBe(EXIT.error);
    expect(r.stderr).toContain(`--query: expected one of ${DEMO_QUERIES.join(', ')}, received "q6"`);
    expect(JSON.parse(r.stdout)).toEqual({ error: { kind: 'error', code: 'CONFIG', message: expect.stringContaining('--query'), field: '--query', expected: `one of ${DEMO_QUERIES.join(', ')}`, received: '"q6"' } });
  });
});

describe('sluice demo --query', () => {
  it('offers every query of examples/nexmark, and its --help lists them', async () => {
    const examples = readdirSync(join(ROOT, 'examples/nexmark')).filter((f) => /^q\d+\.ts$/.test(f)).map((f) => f.slice(0, -3));
    expect(examples.length).toBeGreaterThan(5);
    expect([...DEMO_QUERIES].sort()).toEqual(examples.sort());
    const help = await sluiceInProcess(['demo', '--help']);
    for (const q of DEMO_QUERIES) expect(help.stdout).toMatch(new RegExp(`\\b${q}\\b`));
  });

  it.each(DEMO_QUERIES)('%s runs and prints its summary as JSON, the only thing on stdout', { timeout: 60_000 }, async (query) => {
    const r = await sluice(['demo', '--query', query, '--duration', '1', '--events-per-second', '5000', '--json']);
    expect(r.code, r.stderr).toBe(EXIT.ok);
    expect(r.stderr).toContain(`sluice demo: Nexmark ${query.toUpperCase()} "`);
    expect(r.stderr).toMatch(/demo done: [\d,]+ events processed/);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const summary = JSON.parse(lines[0]);
    expect(Object.keys(summary)).toEqual(['query', 'events', 'results', 'windows', 'durationMs', 'peakRssBytes']);
    expect(summary).toMatchObject({ query, events: expect.any(Number), results: expect.any(Number), durationMs: expect.any(Number) });
    expect(summary.events).toBeGreaterThan(0);
    // Q0 passes every bid; Q4 ends its bounded input (5 000 events), so its categories come out, one line each.
    if (query === 'q0') expect(summary.results).toBeGreaterThan(0);
    if (query === 'q4') {
      expect(summary.events).toBe(5000);
      const rows = r.stderr.split('\n').filter((l) => l.startsWith('{"category":'));
      expect(rows.length).toBe(summary.results);
      expect(rows.length).toBeGreaterThan(0);
    }
  });
});
