/**
 * The API reference (`npm run docs`, typedoc.json) builds without a warning: every
 * type the four entry points expose is exported (validation.notExported), every
 * `{@link}` resolves (validation.invalidLink), and treatWarningsAsErrors turns any
 * other TypeDoc warning into a failure. Converted and validated without emitting, and
 * without TypeDoc's own type check (a third of its time): `npm test` runs tsc first.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const typedoc = fileURLToPath(new URL('../../node_modules/typedoc/bin/typedoc', import.meta.url));

describe('API reference', () => {
  it('converts and validates the four entry points with no warning', async () => {
    const run = await promisify(execFile)(process.execPath, [typedoc, '--emit', 'none', '--skipErrorChecking'], { cwd: root, maxBuffer: 16 << 20 }).then(
      (r) => ({ code: 0, out: r.stdout + r.stderr }),
      (e: { code?: number; stdout?: string; stderr?: string }) => ({ code: e.code ?? 1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` }),
    );
    const warnings = run.out.split('\n').filter((line) => /\[(warning|error)\]/.test(line));
    expect(warnings).toEqual([]);
    expect(run.code).toBe(0);
  }, 120_000);
});
