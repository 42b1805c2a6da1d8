/**
 * Resuming from the command line as a user does it. `sluice dev` answers 202 only for
 * events that survive: killed with SIGKILL while a client publishes, or stopped with
 * SIGINT before any periodic checkpoint, then restarted with --resume, every event that
 * got a 202 is counted exactly once (the job numbers events with a running count, and
 * its sink appends each row synchronously: rows emitted again after a restart are the
 * same rows, so deduplicated by count they must give each accepted event one number).
 * The helpers and the job are the crash soak's (bench/soak/dev.ts), which runs this by seed.
 * `sluice run --resume` refuses another input file and says when there is nothing to
 * resume; `--crash-after` needs checkpoints.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventsFile } from '../aws/checkpoint-jobs.ts';
import { batch, type Dev, exactlyOnceProblems, numbered as numberedRows, publish, startDev as startDevAt, stopWith, writeDevJob } from '../../bench/soak/dev.ts';
import { ROOT, sluice } from './helpers.ts';

const COUNTS_JOB = `import { countsJob } from '${ROOT}test/aws/checkpoint-jobs.ts';
export default () => countsJob({ name: 'cli-resume', parallelism: 2, maxParallelism: 128, totalKind: 'value' });
`;

let dir: string;
let devJob: string;
let countsJob: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-cli-resume-'));
  await writeFile(join(dir, 'package.json'), '{"type":"module"}');
  devJob = writeDevJob(join(dir, 'dev'));
  countsJob = join(dir, 'counts.ts');
  await writeFile(countsJob, COUNTS_JOB);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const startDev = (args: string[]) => startDevAt(devJob, args);

/** Rows of the incarnations' output files, deduplicated by count; fails on a count given to two events. */
function numbered(files: string[]): Map<number, string> {
  const { byN, conflicts } = numberedRows(files);
  expect(conflicts).toEqual([]);
  return byN;
}

/** Every accepted event exactly once: counts 1..N with no hole, no event twice, each accepted one present. */
function expectExactlyOnce(byN: Map<number, string>, accepted: readonly string[], sent: ReadonlySet<string>): void {
  expect(byN.size).toBeGreaterThan(0);
  expect(exactlyOnceProblems(byN, accepted, sent)).toEqual([]);
}

describe('sluice dev: a 202 survives a kill and a restart with --resume', () => {
  it('SIGKILL while a client publishes, with checkpoints every 100 ms', async () => {
    const ck = join(dir, 'kill-ck');
    const outs = [1, 2, 3].map((i) => join(dir, `kill-out-${i}.jsonl`));
    const accepted: string[] = [];
    const sent = new Set<string>();
    const send = (b: number) => {
      const ids = batch(b);
      ids.forEach((id) => sent.add(id));
      return ids;
    };
    const d1 = await startDev(['--checkpoint-dir', ck, '--checkpoint-interval', '100', '--param', `out=${outs[0]}`]);
    for (let b = 0; b < 12; b++) accepted.push(...(await publish(d1, send(b))));
    // Killed during a request: its events may or may not count, but at most once.
    const inFlight = publish(d1, send(12));
    d1.child.kill('SIGKILL');
    accepted.push(...(await inFlight));
    expect(await d1.exited).toBe(null);

    // Checkpoints at the stop only: a periodic one could cover everything before SIGINT, and the stop would then take none.
    const d2 = await startDev(['--checkpoint-dir', ck, '--checkpoint-interval', '0', '--resume', '--param', `out=${outs[1]}`]);
    for (let b = 13; b < 16; b++) accepted.push(...(await publish(d2, send(b))));
    expect(await stopWith(d2, 'SIGINT'), d2.stderr()).toBe(0);
    expect(accepted.length).toBeGreaterThanOrEqual(15 * 50);
    const byN = numbered(outs.slice(0, 2));
    expectExactlyOnce(byN, accepted, sent);
    expect(d2.stderr()).toMatch(/final checkpoint: epoch \d+/);

    // The stop's checkpoint covered everything: a resume has nothing to replay.
    const d3 = await startDev(['--checkpoint-dir', ck, '--resume', '--param', `out=${outs[2]}`]);
    expect(await stopWith(d3, 'SIGINT'), d3.stderr()).toBe(0);
    expect(existsSync(outs[2])).toBe(false);
  }, 60_000);

  it('SIGKILL and SIGINT before any checkpoint (--checkpoint-interval 0), each restarted with --resume', async () => {
    const ck = join(dir, 'nock-ck');
    const outs = [1, 2, 3].map((i) => join(dir, `nock-out-${i}.jsonl`));
    const accepted: string[] = [];
    const sent = new Set<string>();
    const go = async (dev: Dev, from: number, to: number) => {
      for (let b = from; b < to; b++) {
        const ids = batch(b);
        ids.forEach((id) => sent.add(id));
        accepted.push(...(await publish(dev, ids)));
      }
    };
    const d1 = await startDev(['--checkpoint-dir', ck, '--checkpoint-interval', '0', '--param', `out=${outs[0]}`]);
    await go(d1, 0, 5);
    expect(await stopWith(d1, 'SIGKILL')).toBe(null);

    const d2 = await startDev(['--checkpoint-dir', ck, '--checkpoint-interval', '0', '--resume', '--param', `out=${outs[1]}`]);
    await go(d2, 5, 8);
    expect(await stopWith(d2, 'SIGINT'), d2.stderr()).toBe(0);
    const afterTwo = numbered(outs.slice(0, 2));
    expectExactlyOnce(afterTwo, accepted, sent);
    expect(afterTwo.size).toBe(8 * 50);
    expect(d2.stderr()).toMatch(/no checkpoint to resume/);

    // Resumed from the stop's checkpoint: nothing replayed, counting goes on.
    const d3 = await startDev(['--checkpoint-dir', ck, '--checkpoint-interval', '0', '--resume', '--param', `out=${outs[2]}`]);
    expect(d3.stderr()).toMatch(/restored epoch \d+/);
    await go(d3, 8, 10);
    expect(await stopWith(d3, 'SIGINT')).toBe(0);
    const third = numbered([outs[2]]);
    expect(Math.min(...third.keys())).toBe(8 * 50 + 1);
    expectExactlyOnce(numbered(outs), accepted, sent);
  }, 60_000);
});

describe('sluice dev: Idempotency-Keys survive a SIGKILL and a restart with --resume', () => {
  /** One keyed batch: its status, whether it was a replay, and its accepted count. */
  async function post(dev: Dev, key: string, ids: string[]) {
    const body = ids.map((id, i) => JSON.stringify({ id, t: 1_700_000_000_000 + i })).join('\n');
    const r = await fetch(`${dev.url}/streams/events/events`, { method: 'POST', headers: { 'content-type': 'application/x-ndjson', 'idempotency-key': key }, body });
    const answer = (await r.json()) as { accepted?: number; error?: string };
    return { status: r.status, replayed: r.headers.get('idempotent-replayed') === 'true', accepted: answer.accepted, error: answer.error };
  }

  it('a batch resent after the kill is a replay, enqueued once; the key with another batch is a 409', async () => {
    const ck = join(dir, 'keys-ck');
    const outs = [1, 2].map((i) => join(dir, `keys-out-${i}.jsonl`));
    const d1 = await startDev(['--checkpoint-dir', ck, '--checkpoint-interval', '0', '--param', `out=${outs[0]}`]);
    for (let b = 0; b < 4; b++) expect(await post(d1, `key-${b}`, batch(b))).toEqual({ status: 202, replayed: false, accepted: 50, error: undefined });
    expect(await stopWith(d1, 'SIGKILL')).toBe(null);

    const d2 = await startDev(['--checkpoint-dir', ck, '--checkpoint-interval', '0', '--resume', '--param', `out=${outs[1]}`]);
    for (let b = 0; b < 4; b++) expect(await post(d2, `key-${b}`, batch(b))).toEqual({ status: 202, replayed: true, accepted: 50, error: undefined });
    expect(await post(d2, 'key-0', batch(4))).toMatchObject({ status: 409, error: 'idempotency_key_reused' });
    expect(await post(d2, 'key-4', batch(4))).toMatchObject({ status: 202, replayed: false });
    expect(await stopWith(d2, 'SIGINT'), d2.stderr()).toBe(0);
    const accepted = [0, 1, 2, 3, 4].flatMap((b) => batch(b));
    const byN = numbered(outs);
    expectExactlyOnce(byN, accepted, new Set(accepted));
    expect(byN.size).toBe(5 * 50);
  }, 60_000);
});

describe('sluice run --resume', () => {
  it('refuses an input file other than the checkpoint\'s, saying what differs; resumes with the right one', async () => {
    const input = eventsFile(dir, 'events.jsonl', 20_000);
    const other = join(dir, 'other.jsonl');
    await writeFile(other, (await readFile(input, 'utf8')).split('\n').slice(0, 12_000).join('\n') + '\n');
    const out = join(dir, 'fp-out.jsonl');
    const ck = join(dir, 'fp-ck');
    const args = ['run', countsJob, '--output', out, '--checkpoint-interval', '1', '--checkpoint-dir', ck];
    const crashed = await sluice([...args, '--input', input, '--crash-after', '15000']);
    expect(crashed.code, crashed.stderr).toBe(137);

    const refused = await sluice([...args, '--input', other, '--resume']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/--input: expected the file the checkpoints in .* were taken of, .*events\.jsonl \([\d,]+ bytes, sha256 [0-9a-f]{12}\)/);
    expect(refused.stderr).toMatch(/received .*other\.jsonl \([\d,]+ bytes, sha256 [0-9a-f]{12}\): [\d,]+ bytes instead of [\d,]+/);
    // Same size, other content: refused too.
    const same = join(dir, 'same-size.jsonl');
    const text = await readFile(input, 'utf8');
    await writeFile(same, text.replace('"u', '"v'));
    const refused2 = await sluice([...args, '--input', same, '--resume']);
    expect(refused2.code).toBe(1);
    expect(refused2.stderr).toMatch(/the same size, other content/);

    const resumed = await sluice([...args, '--input', input, '--resume']);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stderr).toMatch(/restored checkpoint \d+|no checkpoint to resume/);
  }, 60_000);

  it('says when there is no checkpoint to resume and reads --input from its beginning', async () => {
    const input = eventsFile(dir, 'small.jsonl', 3000);
    const ref = join(dir, 'nock-ref.jsonl');
    expect((await sluice(['run', countsJob, '--input', input, '--output', ref])).code).toBe(0);
    const out = join(dir, 'nock-run.jsonl');
    const r = await sluice(['run', countsJob, '--input', input, '--output', out, '--checkpoint-dir', join(dir, 'never'), '--resume']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/no checkpoint to resume in .*never; starting from the beginning of --input/);
    const sorted = async (f: string) => (await readFile(f, 'utf8')).split('\n').filter(Boolean).sort();
    expect(await sorted(out)).toEqual(await sorted(ref));
  }, 30_000);

  it('rejects --crash-after without checkpoints, naming the flag', async () => {
    const input = eventsFile(dir, 'tiny.jsonl', 10);
    const r = await sluice(['run', countsJob, '--input', input, '--output', join(dir, 'x.jsonl'), '--crash-after', '5']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/--crash-after: expected checkpoints to resume from: --checkpoint-interval <ms>/);
  });
});
