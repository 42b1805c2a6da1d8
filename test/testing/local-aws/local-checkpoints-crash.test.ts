/**
 * `sluice run --target local-aws --checkpoint-interval` killed and resumed, as a user runs
 * it, in child processes against the test setup's DynamoDB Local and fauxqs (servers that
 * outlive the killed process, as AWS does): `--crash-after` kills the process abruptly
 * (exit 137, no cleanup), `--resume` restores the last completed checkpoint from the S3
 * snapshots its manifest names, in place (the same table and queues: lib/aws/restore/restore.ts),
 * the source partitions replay the records the input log (S3 segments named by their
 * commits) holds after its positions, and the input file is fed again from where each
 * partition had consumed. The output
 * file holds only committed epochs at every point (a sub-multiset of the final output),
 * and after the resume equals the uninterrupted run's, sorted: no duplicates, no gaps.
 * Crash points are drawn from seeded generators, once and twice per run.
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { Sinks, type Sink } from '../../../lib/api/sinks.ts';
import { EmbeddedRuntime } from '../../../lib/local/embedded.ts';
import { Rng } from '../../../lib/nexmark/random.ts';
import { ROOT, sluice } from '../../cli/helpers.ts';
import { countsJob, eventsFile } from '../../aws/checkpoint-jobs.ts';
import { localServerEnv } from '../../aws/helpers.ts';

const EVENTS = 10_000;
const dir = mkdtempSync(join(tmpdir(), 'sluice-local-ck-cli-'));
let job: string;
let input: string;
let expected: string[];

/** The test setup's servers; the runner's handler and delete errors go to stderr, which a timeout prints. */
function childEnv(): NodeJS.ProcessEnv {
  return { ...process.env, ...localServerEnv(), SLUICE_DEBUG: '1' };
}

const run = (args: string[]) => sluice(args, { env: childEnv(), timeoutMs: 150_000 });

const lines = (f: string) => (existsSync(f) ? readFileSync(f, 'utf8').split('\n').filter(Boolean).sort() : []);

/** True when every line of `part` occurs in `all` at least as often. */
function subMultiset(part: string[], all: string[]): boolean {
  const counts = new Map<string, number>();
  for (const l of all) counts.set(l, (counts.get(l) ?? 0) + 1);
  return part.every((l) => {
    const n = counts.get(l) ?? 0;
    counts.set(l, n - 1);
    return n > 0;
  });
}

beforeAll(async () => {
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
  job = join(dir, 'counts.ts');
  writeFileSync(job, `export { countsJob as default } from '${ROOT}test/aws/checkpoint-jobs.ts';\n`);
  input = eventsFile(dir, 'events.jsonl', EVENTS);
  const ref = Sinks.collect<unknown>();
  await new EmbeddedRuntime(countsJob(), { sources: { events: { kind: 'file', path: input } }, sinks: { out: ref as Sink<any> } }).run();
  expected = ref.records.map((r) => JSON.stringify(r)).sort();
  expect(expected.length).toBeGreaterThan(100);
});

async function crashAndResume(name: string, crashes: readonly number[]): Promise<{ partials: string[][]; resumed: string }> {
  const out = join(dir, `${name}.jsonl`);
  const ck = join(dir, `${name}-ck`);
  const args = ['run', job, '--input', input, '--output', out, '--target', 'local-aws', '--checkpoint-interval', '50', '--checkpoint-dir', ck];
  const partials: string[][] = [];
  for (const [i, at] of crashes.entries()) {
    const r = await run([...args, ...(i > 0 ? ['--resume'] : []), '--crash-after', String(at)]);
    expect(r.code, r.stderr).toBe(137);
    expect(r.stderr).not.toMatch(/records in/); // no summary: it died
    partials.push(lines(out));
  }
  const r = await run([...args, '--resume']);
  expect(r.code, r.stderr).toBe(0);
  expect(lines(out)).toEqual(expected);
  return { partials, resumed: r.stderr };
}

describe('sluice run --target local-aws --checkpoint-interval --crash-after / --resume', () => {
  it('a killed run resumes from its last checkpoint; the output equals the uninterrupted run (sorted)', async () => {
    const { partials, resumed } = await crashAndResume('once', [8000]);
    expect(resumed).toMatch(/restored checkpoint \d+ from .* in place \(run r\w+, restore epoch \d+\); replaying \d+ logged input records/);
    expect(resumed).toMatch(/checkpoints: \d+ completed in this run/);
    // Before the resume the file showed committed epochs only: part of the final output, never more.
    expect(partials[0].length).toBeLessThan(expected.length);
    expect(subMultiset(partials[0], expected)).toBe(true);
  }, 400_000);

  for (const seed of [7]) {
    it(`seed ${seed}: killed at random points (twice), restored each time: no duplicates, no gaps`, async () => {
      const rng = new Rng(seed);
      // The first kill late enough that checkpoints completed; the second within what is left after the restore.
      const crashes = [5000 + rng.int(EVENTS - 5500), 2000 + rng.int(1500)];
      const { partials } = await crashAndResume(`seed-${seed}`, crashes);
      for (const p of partials) expect(subMultiset(p, expected)).toBe(true);
    }, 600_000);
  }
});
