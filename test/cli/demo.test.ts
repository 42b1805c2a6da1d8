/** `sluice demo` (npm start) runs Q5 on generated events, prints closed windows and a summary, and exits 0 by itself. */
import { describe, expect, it } from 'vitest';
import { sluice } from './helpers.ts';

describe('sluice demo', () => {
  it('prints window results and a summary, then exits 0', async () => {
    const t0 = Date.now();
    const r = await sluice(['demo', '--duration', '3']);
    expect(r.code, r.stderr).toBe(0);
    expect(Date.now() - t0).toBeLessThan(30_000);
    const windows = r.stdout.split('\n').filter((l) => /^window \d\d:\d\d:\d\d-\d\d:\d\d:\d\d {2}hot auctions? [\d, ]+ with [\d,]+ bids/.test(l));
    expect(windows.length).toBeGreaterThan(0);
    expect(r.stdout).toMatch(/demo done: [\d,]+ events processed in [\d.]+ s \([\d,]+ events\/s\), [\d,]+ windows emitted, peak RSS \d+ MB/);
    expect(r.stderr).toMatch(/events\/s .* watermark \d\d:\d\d:\d\d\.\d{3}/);
  });

  it('rejects a bad --duration naming the flag', async () => {
    const r = await sluice(['demo', '--duration', 'soon']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/--duration: expected a positive number of seconds.*received "soon"/);
  });
});
