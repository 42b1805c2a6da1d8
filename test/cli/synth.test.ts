/** `sluice synth --json`: the synthesized stack in its documented shape; a bad job module exits 1 with the error as JSON. */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { sluice } from './helpers.ts';

const dir = mkdtempSync(join(tmpdir(), 'sluice-synth-json-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('sluice synth --json', () => {
  it('prints the stack, its template, functions and streams', { timeout: 180_000 }, async () => {
    const out = join(dir, 'cdk.out');
    const r = await sluice(['synth', 'examples/first-job.ts', '--output', out, '--no-nag', '--json'], { timeoutMs: 170_000 });
    expect(r.code, r.stderr).toBe(EXIT.ok);
    expect(r.stderr).toMatch(/synthesized stack Sluice-page-views/);
    const s = JSON.parse(r.stdout);
    expect(Object.keys(s)).toEqual(['job', 'stackName', 'outdir', 'templateFile', 'functions', 'streams']);
    expect(s).toMatchObject({ job: 'page-views', stackName: 'Sluice-page-views', outdir: out, streams: ['views'] });
    expect(existsSync(s.templateFile)).toBe(true);
    expect(s.functions.length).toBeGreaterThan(1);
  });

  it('a missing job module: exit 1, the error as JSON', async () => {
    const r = await sluice(['synth', 'examples/none.ts', '--output', join(dir, 'x'), '--json']);
    expect(r.code).toBe(EXIT.error);
    expect(JSON.parse(r.stdout).error).toMatchObject({ kind: 'error', field: '<job>', received: expect.stringContaining('examples/none.ts') });
  });
});
