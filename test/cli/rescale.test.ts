/**
 * `--parallelism` on `sluice run`, `dev` and `restore`: a run at another parallelism gives
 * the same output; bad values are named; and a job rescaled through a savepoint (`sluice
 * dev` at 2 partitions, `sluice savepoint`, Ctrl-C, then `sluice restore --from <label>
 * --parallelism 4 --input` over the rest) counts every view once: no window twice, every
 * page's total equal to its views.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { serveJob, sluice } from './helpers.ts';

const JOB = 'test/cli/rescale-job.ts';
const PAGES = ['/a', '/b', '/c', '/d', '/e'];
const views = Array.from({ length: 600 }, (_, i) => ({ page: PAGES[(i * 3) % 5], time: 10_000 + i * 20 }));
const rows = (text: string) => text.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { page: string; start: number; views: number });
const sorted = (rs: ReturnType<typeof rows>) => rs.map((r) => `${r.page} ${r.start} ${r.views}`).sort();

describe('sluice --parallelism', () => {
  it('run at another parallelism gives the same output; bad values and unknown operators are named', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-rescale-'));
    const input = join(dir, 'views.jsonl');
    writeFileSync(input, views.map((v) => JSON.stringify(v)).join('\n') + '\n');
    const a = await sluice(['run', JOB, '--input', input, '--output', join(dir, 'a.jsonl')]);
    const b = await sluice(['run', JOB, '--input', input, '--output', join(dir, 'b.jsonl'), '--parallelism', '3', '--parallelism', 'per-page=5']);
    expect(a.code, a.stderr).toBe(EXIT.ok);
    expect(b.code, b.stderr).toBe(EXIT.ok);
    expect(sorted(rows(readFileSync(join(dir, 'b.jsonl'), 'utf8')))).toEqual(sorted(rows(readFileSync(join(dir, 'a.jsonl'), 'utf8'))));
    const bad = await sluice(['run', JOB, '--input', input, '--output', join(dir, 'c.jsonl'), '--parallelism', 'two']);
    expect(bad.code).toBe(EXIT.error);
    expect(bad.stderr).toContain('--parallelism: expected P (the default parallelism of the operators without their own) or operator=P, P a positive integer, received "two"');
    const unknown = await sluice(['run', JOB, '--input', input, '--output', join(dir, 'c.jsonl'), '--parallelism', 'nope=2']);
    expect(unknown.code).toBe(EXIT.error);
    expect(unknown.stderr).toMatch(/operator "nope": expected a parallelism for an operator of job "rescale-views" \(.*per-page.*\), received no such operator/);
    const tooMany = await sluice(['run', JOB, '--input', input, '--output', join(dir, 'c.jsonl'), '--parallelism', '500']);
    expect(tooMany.code).toBe(EXIT.error);
    expect(tooMany.stderr).toMatch(/parallelism an integer from 1 to maxParallelism \(128\)/);
  }, 120_000);

  it('a savepoint of `sluice dev` at 2 partitions restores at 4: every view counted once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-rescale-dev-'));
    const ck = join(dir, 'ck');
    const half = views.length / 2;
    const dev = await serveJob(['dev', JOB, '--port', '0', '--checkpoint-dir', ck, '--checkpoint-interval', '0']);
    try {
      const res = await fetch(`${dev.url}/streams/views/events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(views.slice(0, half)) });
      expect(res.status).toBe(202);
      const sp = await sluice(['savepoint', JOB, '--checkpoint-dir', ck, '--label', 'mid']);
      expect(sp.code, sp.stderr).toBe(EXIT.ok);
    } finally {
      dev.child.kill('SIGINT');
    }
    expect(await dev.exited).toBe(EXIT.ok);
    const rest = join(dir, 'rest.jsonl');
    writeFileSync(rest, views.slice(half).map((v) => JSON.stringify(v)).join('\n') + '\n');
    const out = join(dir, 'out.jsonl');
    const restored = await sluice(['restore', JOB, '--from', 'mid', '--checkpoint-dir', ck, '--parallelism', '4', '--input', rest, '--output', out]);
    expect(restored.code, restored.stderr).toBe(EXIT.ok);
    const plan = JSON.parse(readFileSync(join(ck, 'plan.json'), 'utf8')) as { stages: { parallelism: number }[] };
    expect(plan.stages.map((s) => s.parallelism)).toEqual([4, 4]);

    const all = [...rows(dev.stdout()), ...rows(readFileSync(out, 'utf8'))];
    const windows = all.map((r) => `${r.page} ${r.start}`);
    expect(new Set(windows).size, 'a window fired twice').toBe(windows.length);
    const total = (page: string) => all.filter((r) => r.page === page).reduce((n, r) => n + r.views, 0);
    for (const page of PAGES) expect(total(page), page).toBe(views.filter((v) => v.page === page).length);
    expect(rows(dev.stdout()).length, 'windows fired before the savepoint').toBeGreaterThan(0);
  }, 120_000);
});
