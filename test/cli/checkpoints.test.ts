/**
 * Checkpoints from the command line, as a user checks them: `sluice run --crash-after`
 * kills the process abruptly, `--resume` finishes from the last completed checkpoint,
 * and the output file then equals the uninterrupted run's (sorted). `sluice checkpoints`
 * lists what is retained; `sluice dev` takes a savepoint on `sluice savepoint`, and
 * `sluice restore --from` starts from it, also after a compatible change (parallelism),
 * and refuses an incompatible one (a state's kind changed) with a clear message.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventsFile } from '../aws/checkpoint-jobs.ts';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { ROOT, sluice } from './helpers.ts';

// The counts job of the checkpoint tests under its own name; --param kind=map changes a state's kind.
const JOB = `import { countsJob } from '${ROOT}test/aws/checkpoint-jobs.ts';
export default (p) => countsJob({ name: 'cli-counts', parallelism: p.parallelism, maxParallelism: 128, totalKind: p.kind === 'map' ? 'map' : 'value' });
`;

let dir: string;
let job: string;
let input: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-cli-ck-'));
  // A module directory of its own: tsx loads .ts outside the repository as ESM only under "type": "module".
  await writeFile(join(dir, 'package.json'), '{"type":"module"}');
  job = join(dir, 'counts.ts');
  await writeFile(job, JOB);
  input = eventsFile(dir, 'events.jsonl', 60_000);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const sorted = async (f: string) => (await readFile(f, 'utf8')).split('\n').filter(Boolean).sort().join('\n');

describe('sluice run --checkpoint-interval --crash-after / --resume', () => {
  it('a killed run resumes from its last checkpoint; the output equals the uninterrupted run (sorted)', async () => {
    const ref = join(dir, 'ref.jsonl');
    const r0 = await sluice(['run', job, '--input', input, '--output', ref]);
    expect(r0.code, r0.stderr).toBe(0);

    const out = join(dir, 'out.jsonl');
    const ck = join(dir, 'ck');
    const args = ['run', job, '--input', input, '--output', out, '--checkpoint-interval', '1', '--checkpoint-dir', ck];
    const crashed = await sluice([...args, '--crash-after', '40000']);
    expect(crashed.code, crashed.stderr).toBe(137);
    expect(crashed.stderr).not.toMatch(/records in/); // No summary: it died.
    const partial = await sorted(out);

    const resumed = await sluice([...args, '--resume']);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stderr).toMatch(/restored checkpoint \d+ from/);
    const expected = await sorted(ref);
    expect(expected.split('\n').length).toBeGreaterThan(1000);
    expect(partial.length).toBeLessThan(expected.length);
    expect(await sorted(out)).toBe(expected);

    const list = await sluice(['checkpoints', job, '--checkpoint-dir', ck]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/epoch\s+completed \(UTC\)\s+duration\s+size\s+restore\s+keys/);
    expect(list.stdout).toMatch(/^\s+\d+\s+\d{4}-\d\d-\d\dT\S+\s+\d+ ms\s+[\d.]+ [KM]?B\s+[\d.]+ [KM]?B\s+[\d,]+\s+latest$/m);
    const json = JSON.parse((await sluice(['checkpoints', job, '--checkpoint-dir', ck, '--json'])).stdout) as { checkpoints: { epoch: number; bytes: number; durationMs: number }[] };
    expect(json.checkpoints.length).toBeGreaterThan(0);
    expect(Object.keys(json)).toEqual(['checkpoints', 'savepoints']);
    expect(Object.keys(json.checkpoints[0]).sort()).toEqual(expect.arrayContaining(['epoch', 'completedAt', 'durationMs', 'bytes', 'restoreBytes', 'entities', 'latest']));

    // sluice state get: one key's state as the latest checkpoint (the run's last, at the end of input) holds it.
    const refTotal = (await readFile(ref, 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((r) => r.user === 'u7' && r.total !== undefined).total;
    const got = await sluice(['state', 'get', job, 'per-user', 'u7', '--checkpoint-dir', ck, '--json']);
    expect(got.code, got.stderr).toBe(EXIT.ok);
    const state = JSON.parse(got.stdout);
    expect(state).toMatchObject({ job: 'cli-counts', operator: 'per-user', key: 'u7', from: `checkpoint ${state.epoch}`, state: { total: refTotal } });
    expect(got.stderr).toContain(`  total = ${refTotal}\n`);
    const noKey = await sluice(['state', 'get', job, 'per-user', 'nobody', '--checkpoint-dir', ck]);
    expect(noKey.code).toBe(EXIT.error);
    expect(noKey.stderr).toMatch(/<key>: expected a key operator "per-user" has state for in checkpoint \d+ of \S+ \(50 keys, e\.g\. "u\d+"/);
    const noOp = await sluice(['state', 'get', job, 'per-usr', 'u7', '--checkpoint-dir', ck]);
    expect(noOp.code).toBe(EXIT.error);
    expect(noOp.stderr).toContain('<operator>: expected an operator of job "cli-counts": ');

    // A changed job is refused by --resume, naming what changed, and the directory is left as it was.
    const changed = await sluice([...args, '--resume', '--param', 'parallelism=3']);
    expect(changed.code).toBe(EXIT.error);
    expect(changed.stderr).toContain(`--resume: expected the job as its checkpoints in ${ck} were taken`);
    expect(changed.stderr).toContain('received a changed job: stage "events" parallelism 2 -> 3; stage "per-user" parallelism 2 -> 3\n');
    expect(changed.stderr).not.toMatch(/fingerprint/);
    const after = JSON.parse((await sluice(['checkpoints', job, '--checkpoint-dir', ck, '--json'])).stdout) as typeof json;
    expect(after.checkpoints.map((c) => c.epoch)).toEqual(json.checkpoints.map((c) => c.epoch));

    // An epoch that is not retained: where it looked and what is there.
    const missing = await sluice(['restore', job, '--from', '999999', '--checkpoint-dir', ck, '--input', input, '--output', join(dir, 'never.jsonl')]);
    expect(missing.code).toBe(EXIT.error);
    expect(missing.stderr).toContain(`(in ${ck}: retained checkpoints ${json.checkpoints.map((c) => c.epoch).join(', ')}; savepoints (none); another directory: --checkpoint-dir), received epoch 999999: no such retained checkpoint in ${ck}`);
  }, 120_000); // eleven CLI processes in a row: about 27 s alone, more on a loaded 2-core machine

  it('lists nothing for a directory without checkpoints', async () => {
    const r = await sluice(['checkpoints', job, '--checkpoint-dir', join(dir, 'none')]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/\(none retained\)/);
  });
});

/** A long-running `sluice dev`, with its ingestion URL once it is up. */
async function startDev(args: string[]): Promise<{ child: ChildProcess; url: string; stderr: () => string }> {
  const child = spawn(process.execPath, ['bin/sluice.js', 'dev', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  child.stdout!.resume();
  const deadline = Date.now() + 30_000;
  for (;;) {
    const m = /ingestion endpoint (http:\/\/\S+)/.exec(err);
    if (m) return { child, url: m[1], stderr: () => err };
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`dev did not start: ${err}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('sluice savepoint / restore', () => {
  it('takes a savepoint of a running dev job and restores from it, refusing incompatible state', async () => {
    const ck = join(dir, 'dev-ck');
    const dev = await startDev([job, '--port', '0', '--checkpoint-dir', ck, '--checkpoint-interval', '100']);
    try {
      const small = join(dir, 'small.jsonl');
      await writeFile(small, (await readFile(input, 'utf8')).split('\n').slice(0, 3000).join('\n') + '\n');
      const pub = await sluice(['publish', 'events', small, '--url', dev.url, '--json']);
      expect(pub.code, pub.stderr).toBe(0);
      expect(JSON.parse(pub.stdout)).toEqual({ stream: 'events', file: small, url: dev.url, sent: 3000, accepted: 3000, rejected: [] });
      const sp = await sluice(['savepoint', job, '--checkpoint-dir', ck, '--label', 'before-change', '--json']);
      expect(sp.code, sp.stderr).toBe(0);
      expect(sp.stderr).toMatch(/savepoint "before-change" of job "cli-counts": epoch \d+/);
      // The restore hint carries the flags that found the savepoint.
      const restoreHint = `sluice restore ${job} --checkpoint-dir ${ck} --from before-change`;
      expect(sp.stderr).toContain(`restore: ${restoreHint}\n`);
      expect(JSON.parse(sp.stdout)).toEqual({ target: 'embedded', job: 'cli-counts', label: 'before-change', epoch: expect.any(Number), bytes: expect.any(Number), location: join(ck, 'savepoints', 'before-change'), restore: restoreHint });
    } finally {
      dev.child.kill('SIGINT');
      await new Promise((r) => dev.child.once('close', r));
    }
    expect(dev.stderr()).toMatch(/savepoint "before-change" written to/);

    const list = await sluice(['checkpoints', job, '--checkpoint-dir', ck]);
    expect(list.stdout).toMatch(/before-change\s+epoch \d+/);

    const rest = join(dir, 'rest.jsonl');
    const tail = join(dir, 'tail.jsonl');
    await writeFile(tail, (await readFile(input, 'utf8')).split('\n').slice(3000, 6000).join('\n') + '\n');
    // The savepoint's totals continue: the final totals equal a run over both parts.
    const both = join(dir, 'both.jsonl');
    await writeFile(both, (await readFile(input, 'utf8')).split('\n').slice(0, 6000).join('\n') + '\n');
    const ref = join(dir, 'both-out.jsonl');
    expect((await sluice(['run', job, '--input', both, '--output', ref])).code).toBe(0);
    const totals = async (f: string) => (await sorted(f)).split('\n').filter((l) => l.includes('"total"')).join('\n');

    for (const extra of [[], ['--param', 'parallelism=3']]) {
      const r = await sluice(['restore', job, '--from', 'before-change', '--checkpoint-dir', ck, '--input', tail, '--output', rest, '--json', ...extra]);
      expect(r.code, r.stderr).toBe(0);
      expect(await totals(rest)).toBe(await totals(ref));
      expect(JSON.parse(r.stdout)).toMatchObject({ job: 'cli-counts', target: 'embedded', output: rest, recordsIn: 3000, rejectedInputs: 0, deadLetters: 0 });
    }

    // A rejected input line: the restore completes but exits 3, unless --allow-rejects.
    const tailBad = join(dir, 'tail-bad.jsonl');
    await writeFile(tailBad, (await readFile(tail, 'utf8')) + '{"user": "u1"\n');
    const rejected = await sluice(['restore', job, '--from', 'before-change', '--checkpoint-dir', ck, '--input', tailBad, '--output', rest, '--json']);
    expect(rejected.code, rejected.stderr).toBe(EXIT.rejects);
    expect(JSON.parse(rejected.stdout)).toMatchObject({ recordsIn: 3000, rejectedInputs: 1, deadLetters: 0 });
    const allowed = await sluice(['restore', job, '--from', 'before-change', '--checkpoint-dir', ck, '--input', tailBad, '--output', rest, '--allow-rejects']);
    expect(allowed.code, allowed.stderr).toBe(EXIT.ok);

    // A label that is no savepoint: where it looked and the savepoints there.
    const unknown = await sluice(['restore', job, '--from', 'before-chnage', '--checkpoint-dir', ck, '--input', tail, '--output', rest]);
    expect(unknown.code).toBe(EXIT.error);
    expect(unknown.stderr).toMatch(/savepoints "before-change"; another directory: --checkpoint-dir\), received "before-chnage": no savepoint of that label in \S+savepoints, and no savepoint directory/);

    const bad = await sluice(['restore', job, '--from', 'before-change', '--checkpoint-dir', ck, '--input', tail, '--output', rest, '--param', 'kind=map']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/does not fit this job's state/);
    expect(bad.stderr).toMatch(/operator "per-user": state "total" was value state, is now map state/);
  }, 120_000); // ten CLI processes in a row: about 30 s alone, more on a loaded 2-core machine
});
