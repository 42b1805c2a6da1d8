/** One query end to end through `sluice run` (file in, file out), as a user would run it. */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { serializeEvent } from '../../lib/nexmark/index.ts';
import { sluice } from '../cli/helpers.ts';
import { refQ4 } from './reference.ts';
import { generated } from './support.ts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-nexmark-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('sluice run examples/nexmark/q4.ts gives the batch result of section 5.2', async () => {
  const events = generated(5000, 250, 5);
  const input = join(dir, 'events.jsonl');
  const output = join(dir, 'q4.jsonl');
  await writeFile(input, events.map((e) => serializeEvent(e) + '\n').join(''));
  const r = await sluice(['run', 'examples/nexmark/q4.ts', '--input', input, '--output', output]);
  expect(r.code, r.stderr).toBe(0);
  expect(r.stderr).toMatch(/5,000 records in, 5 out.*0 rejected inputs, 0 dead letters/);
  const rows = (await readFile(output, 'utf8')).trim().split('\n').map((l) => JSON.parse(l) as { category: number });
  expect(rows.sort((a, b) => a.category - b.category)).toEqual(refQ4(events));
});
