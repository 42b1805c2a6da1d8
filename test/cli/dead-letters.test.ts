/**
 * Dead letters as a user sees them: `sluice run` lists each with its record and error
 * and names the file that holds them all (with checkpoints, the checkpoint directory's
 * dead-letters.jsonl; it survives a --resume); `sluice dev` prints each new one on
 * stderr as it is parked, the first few in full, then a count.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { ROOT, sluice, waitFor } from './helpers.ts';

// Amounts of 13 make the check throw; one partition, so the order of letters is the input's.
const JOB = `import { Sinks } from '${ROOT}lib/api/sinks.ts';
import { Job } from '${ROOT}lib/api/stream.ts';

export default () => {
  const job = new Job('poison-cli', { parallelism: 1 });
  job
    .ingest<{ id: string; amount: number; t: number }>('events', { timestamp: (e) => e.t })
    .map((e) => {
      if (e.amount === 13) throw new Error('unlucky amount of ' + e.id);
      return e;
    })
    .name('check')
    .sinkTo(Sinks.stdout(), 'out');
  return job;
};
`;

let dir: string;
let job: string;
let input: string;

/** 40 events, of which ids e3, e13, ..., e33 (amount 13) are poison. */
const events = Array.from({ length: 40 }, (_, i) => ({ id: `e${i}`, amount: i % 10 === 3 ? 13 : i, t: 1_700_000_000_000 + i }));

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-cli-dl-'));
  await writeFile(join(dir, 'package.json'), '{"type":"module"}');
  job = join(dir, 'poison.ts');
  await writeFile(job, JOB);
  input = join(dir, 'events.jsonl');
  await writeFile(input, events.map((e) => JSON.stringify(e)).join('\n') + '\n');
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('sluice run shows dead letters', () => {
  it('without checkpoints: each with its record and error, at the end', async () => {
    const r = await sluice(['run', job, '--input', input, '--output', join(dir, 'out-1.jsonl')]);
    expect(r.code, r.stderr).toBe(EXIT.rejects);
    expect(r.stderr).toMatch(/4 dead letter\(s\)/);
    expect(r.stderr).toContain('after 3 attempts, operator "check" threw: unlucky amount of e3; record {"id":"e3","amount":13,');
    expect(r.stderr).toContain('unlucky amount of e33');
    expect(r.stderr).toMatch(/4 dead letters, /);
    expect(r.stderr).toMatch(/write them all with --dead-letters/);
  }, 60_000);

  it('exits 0 with --allow-dead-letters, and still 3 with --allow-rejects alone (they are not rejected input)', async () => {
    const allowed = await sluice(['run', job, '--input', input, '--output', join(dir, 'out-3.jsonl'), '--allow-dead-letters']);
    expect(allowed.code, allowed.stderr).toBe(EXIT.ok);
    expect(allowed.stderr).toMatch(/4 dead letters, /);
    const other = await sluice(['run', job, '--input', input, '--output', join(dir, 'out-4.jsonl'), '--allow-rejects']);
    expect(other.code, other.stderr).toBe(EXIT.rejects);
  }, 60_000);

  it('with checkpoints: the summary names the directory\'s file, which holds each once, also after --resume', async () => {
    const ck = join(dir, 'ck');
    const r = await sluice(['run', job, '--input', input, '--output', join(dir, 'out-2.jsonl'), '--checkpoint-interval', '50', '--checkpoint-dir', ck]);
    expect(r.code, r.stderr).toBe(EXIT.rejects);
    const file = join(ck, 'dead-letters.jsonl');
    expect(r.stderr).toContain(`4 dead letters (in ${file})`);
    expect(r.stderr).toContain('unlucky amount of e23; record {"id":"e23"');
    const stored = readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(stored.map((d) => d.record.value.id)).toEqual(['e3', 'e13', 'e23', 'e33']);
    for (const d of stored) expect(d).toMatchObject({ operator: 'check', stage: 0, partition: 0, attempts: 3, error: expect.stringMatching(/unlucky/), stack: expect.stringMatching(/unlucky/) });
    // Resumed after the final checkpoint: nothing to redo, and the letters are still there, once each.
    const again = await sluice(['run', job, '--input', input, '--output', join(dir, 'out-2.jsonl'), '--checkpoint-interval', '50', '--checkpoint-dir', ck, '--resume', '--allow-dead-letters']);
    expect(again.code, again.stderr).toBe(EXIT.ok);
    expect(again.stderr).toContain(`4 dead letters (in ${file})`);
    expect(readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(4);
  }, 60_000);
});

describe('sluice dev shows dead letters as they are parked', () => {
  async function startDev(args: string[]): Promise<{ child: ChildProcess; url: string; stderr: () => string; exited: Promise<number | null> }> {
    const child = spawn(process.execPath, ['bin/sluice.js', 'dev', job, '--port', '0', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
    child.stdout!.resume();
    const exited = new Promise<number | null>((r) => child.once('close', (code) => r(code)));
    const [, url] = await waitFor(() => err, /ingestion endpoint (http:\/\/\S+)/, 30_000);
    return { child, url, stderr: () => err, exited };
  }

  async function publish(url: string, batch: readonly object[]): Promise<void> {
    const r = await fetch(`${url}/streams/events/events`, { method: 'POST', headers: { 'content-type': 'application/x-ndjson' }, body: batch.map((e) => JSON.stringify(e)).join('\n') });
    await r.arrayBuffer();
    expect(r.status).toBe(202);
  }

  it('the first five in full with record and error, then a count; a --resume counts them from the file', async () => {
    const ck = join(dir, 'dev-ck');
    const file = join(ck, 'dead-letters.jsonl');
    const d1 = await startDev(['--checkpoint-dir', ck, '--checkpoint-interval', '100']);
    try {
      await publish(d1.url, events.slice(0, 10));
      await waitFor(d1.stderr, /dead letter: after 3 attempts, operator "check" threw: unlucky amount of e3; record \{"id":"e3","amount":13,/, 15_000);
      // Seven more poison events: four shown in full, then a count.
      await publish(d1.url, Array.from({ length: 7 }, (_, i) => ({ id: `p${i}`, amount: 13, t: 1_700_000_001_000 + i })));
      await waitFor(d1.stderr, /3 more dead letter\(s\) \(only the first 5 are shown\), 8 in total, all in \S+/, 15_000);
    } finally {
      d1.child.kill('SIGINT');
    }
    expect(await d1.exited).toBe(EXIT.rejects);
    const shown = d1.stderr().match(/^dead letter: .*$/gm) ?? [];
    expect(shown).toHaveLength(5);
    expect(shown.map((l) => /unlucky amount of (\w+)/.exec(l)![1])).toEqual(['e3', 'p0', 'p1', 'p2', 'p3']);
    expect(d1.stderr()).toContain(`8 dead letters (in ${file})`);
    expect(d1.stderr()).toMatch(/records ingested, 0 rejected, 8 dead letters \(in /);

    const d2 = await startDev(['--checkpoint-dir', ck, '--resume', '--allow-dead-letters']);
    d2.child.kill('SIGINT');
    expect(await d2.exited).toBe(EXIT.ok);
    expect(d2.stderr()).toContain(`8 dead letters (in ${file}) from before the restored checkpoint`);
    expect(d2.stderr()).not.toMatch(/^dead letter: /m);
    expect(readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(8);
  }, 90_000);
});
