/**
 * `sluice rescale --target local-aws` between two runs of `sluice run --target local-aws
 * --checkpoint-interval`, as a user runs it, in child processes against the test setup's
 * DynamoDB Local and fauxqs: a run killed in the middle of its windows (tumbling, sliding,
 * session) and keyed process function with timers, a rescale killed at a seeded AWS call
 * and run again, a second stage rescaled, then `--resume` to the end. Up (2 -> 4, 2 -> 3)
 * and down (4 -> 1), the output passes the exactly-once checker against an uninterrupted
 * embedded run at the job's own parallelism: nothing lost or duplicated, per (operator,
 * user) in order.
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { Sinks, type Sink } from '../../../lib/api/sinks.ts';
import { EmbeddedRuntime } from '../../../lib/local/embedded.ts';
import { Rng } from '../../../lib/nexmark/random.ts';
import { assertExactlyOnce } from '../../../lib/testing/checker.ts';
import { sluice } from '../../cli/helpers.ts';
import { localServerEnv } from '../../aws/helpers.ts';
import job, { rescaleEvents } from './rescale-job.ts';

const JOB = 'test/testing/local-aws/rescale-job.ts';
const EVENTS = 6000;
const dir = mkdtempSync(join(tmpdir(), 'sluice-local-rescale-'));
const input = join(dir, 'events.jsonl');
let reference: unknown[];

const run = (args: string[], env: NodeJS.ProcessEnv = {}) => sluice(args, { env: { ...process.env, ...localServerEnv(), ...env }, timeoutMs: 150_000 });
const records = (f: string) => (existsSync(f) ? readFileSync(f, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as unknown) : []);
const orderKey = (r: unknown) => `${(r as { op: string }).op}/${(r as { user: string }).user}`;

beforeAll(async () => {
  writeFileSync(input, rescaleEvents(EVENTS).map((e) => JSON.stringify(e)).join('\n') + '\n');
  const ref = Sinks.collect<unknown>();
  await new EmbeddedRuntime(job, { sources: { events: { kind: 'file', path: input } }, sinks: { out: ref as Sink<any> } }).run();
  reference = ref.records;
  expect(new Set(reference.map((r) => (r as { op: string }).op))).toEqual(new Set(['tumbling', 'sliding', 'session', 'totals']));
});

interface Rescale {
  readonly stage: string;
  readonly partitions: number;
  /** Kill the first attempt at this AWS call (SLUICE_KILL_AT any#n), then run it again. */
  readonly killAt?: number;
}

async function crashRescaleResume(name: string, o: { seed: number; parallelism?: string[]; rescales: readonly Rescale[]; beforeRescale?: (ck: string, runArgs: string[]) => Promise<void> }): Promise<string> {
  const rng = new Rng(o.seed);
  const out = join(dir, `${name}.jsonl`);
  const ck = join(dir, `${name}-ck`);
  const args = ['run', JOB, '--input', input, '--output', out, '--target', 'local-aws', '--checkpoint-interval', '100', '--checkpoint-dir', ck];
  const crashed = await run([...args, ...(o.parallelism ?? []).flatMap((p) => ['--parallelism', p]), '--crash-after', String(1500 + rng.int(3000))]);
  expect(crashed.code, crashed.stderr).toBe(137);
  await o.beforeRescale?.(ck, args);
  for (const r of o.rescales) {
    const cmd = ['rescale', JOB, '--target', 'local-aws', '--checkpoint-dir', ck, '--stage', r.stage, '--partitions', String(r.partitions)];
    if (r.killAt !== undefined) {
      const killed = await run(cmd, { SLUICE_KILL_AT: `any#${r.killAt}` });
      expect(killed.code === null || killed.code === 137, `killed at any#${r.killAt}: ${killed.code}\n${killed.stderr}`).toBe(true);
      // An unfinished rescale: the run refuses to resume until it is finished.
      if (JSON.parse(readFileSync(join(ck, 'local-aws.json'), 'utf8')).rescale) {
        const early = await run([...args, '--resume']);
        expect(early.code).not.toBe(0);
        expect(early.stderr).toContain('a rescale of the run in');
      }
    }
    const done = await run(cmd);
    expect(done.code, done.stderr).toBe(0);
    expect(done.stderr).toMatch(new RegExp(`rescaled stage "${r.stage}" \\d+ -> ${r.partitions} partitions from savepoint "rescale-e\\d+-[0-9a-f]{8}"`));
  }
  const resumed = await run([...args, '--resume']);
  expect(resumed.code, resumed.stderr).toBe(0);
  assertExactlyOnce(reference, records(out), { orderKey, label: name });
  return ck;
}

/** What a rescale refuses, and a resume at another parallelism than the run's, on a killed run; none of it changes the run. */
async function refusals(ck: string, runArgs: string[]): Promise<void> {
  const rescale = (stage: string, p: string) => run(['rescale', JOB, '--target', 'local-aws', '--checkpoint-dir', ck, '--stage', stage, '--partitions', p]);
  const source = await rescale('events', '4');
  expect(source.code).toBe(1);
  expect(source.stderr).toContain('--stage: expected a stage after the sources (a source stage keeps its partitions');
  expect(source.stderr).toContain('received stage 0 "events" (2 partitions), which reads source "events"');
  const unknown = await rescale('nope', '4');
  expect(unknown.stderr).toMatch(/--stage: expected a stage of job "rescale-mix", by id or name: 0 "events" \(2 partitions\), 1 "tumbling"/);
  const tooMany = await rescale('1', '17');
  expect(tooMany.stderr).toContain('--partitions: expected an integer from 1 to 16, received "17"');
  const same = await rescale('tumbling', '2');
  expect(same.code, same.stderr).toBe(0);
  expect(same.stderr).toContain('already has 2 partitions');
  const other = await run([...runArgs, '--resume', '--parallelism', 'tumbling=3']);
  expect(other.code).toBe(1);
  expect(other.stderr).toContain('--parallelism: expected the parallelism of the run in');
  expect(other.stderr).toContain('sluice rescale <job> --target local-aws');
}

describe('sluice rescale --target local-aws', () => {
  it('up: a killed run, its tumbling stage 2 -> 4 (the rescale killed once) and its session-window stage 2 -> 3, resumed: exactly once; refusals first', async () => {
    const rng = new Rng(11);
    const ck = await crashRescaleResume('up', { seed: 11, rescales: [{ stage: 'tumbling', partitions: 4, killAt: 20 + rng.int(600) }, { stage: 'sessions', partitions: 3 }], beforeRescale: refusals });
    expect(JSON.parse(readFileSync(join(ck, 'local-aws.json'), 'utf8')).parallelism).toEqual({ operators: { tumbling: 4, sessions: 3 } });
  }, 600_000);

  it('down: a run at 4 killed, its sliding and process stages 4 -> 1 (one rescale killed), resumed: exactly once', async () => {
    const rng = new Rng(23);
    await crashRescaleResume('down', {
      seed: 23,
      parallelism: ['sliding=4', 'totals=4'],
      rescales: [
        { stage: 'sliding', partitions: 1 },
        { stage: 'totals', partitions: 1, killAt: 20 + rng.int(600) },
      ],
    });
  }, 600_000);
});
