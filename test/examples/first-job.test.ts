/** The README's first job (examples/first-job.ts) runs and counts what it says it counts. */
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, sluice } from '../cli/helpers.ts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-first-job-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('examples/first-job.ts', () => {
  it('counts views per page in one-minute windows', async () => {
    const pages = ['/', '/pricing', '/docs'];
    const views = Array.from({ length: 300 }, (_, i) => ({ page: pages[i % 3 === 0 ? 0 : i % 7 === 0 ? 2 : 1], user: `u${i % 11}`, time: 1_700_000_000_000 + i * 600 }));
    // A little disorder within the 5 s bound must not change the result.
    [views[10], views[12]] = [views[12], views[10]];
    const input = join(dir, 'views.jsonl');
    const output = join(dir, 'counts.jsonl');
    await writeFile(input, views.map((v) => JSON.stringify(v)).join('\n') + '\n');

    const r = await sluice(['run', 'examples/first-job.ts', '--input', input, '--output', output]);
    expect(r.code, r.stderr).toBe(0);

    const expected = new Map<string, number>();
    for (const v of views) {
      const k = `${v.page} ${v.time - (v.time % 60_000)}`;
      expected.set(k, (expected.get(k) ?? 0) + 1);
    }
    const rows = (await readFile(output, 'utf8')).trim().split('\n').map((l) => JSON.parse(l) as { page: string; windowStart: number; views: number });
    expect(new Map(rows.map((r) => [`${r.page} ${r.windowStart}`, r.views]))).toEqual(expected);
    expect(rows).toHaveLength(expected.size);
  });

  it('is under 20 lines', async () => {
    const text = await readFile(join(ROOT, 'examples/first-job.ts'), 'utf8');
    expect(text.trimEnd().split('\n').length).toBeLessThan(20);
  });

  // The README shows this file; when it does, it must show it verbatim.
  const readme = join(ROOT, 'README.md');
  const shown = existsSync(readme) && /examples\/first-job\.ts/.test(readFileSync(readme, 'utf8'));
  it.skipIf(!shown)('matches the code block in README.md', async () => {
    const text = (await readFile(join(ROOT, 'examples/first-job.ts'), 'utf8')).trim();
    const blocks = [...(await readFile(readme, 'utf8')).matchAll(/```(?:ts|typescript)\n([\s\S]*?)```/g)].map((m) => m[1].trim());
    expect(blocks).toContain(text);
  });
});

