/**
 * Contract 6 across crashes on local AWS: `sluice run --target local-aws` of the seeded
 * poison job (poison-jobs.ts) with checkpoints, killed with SIGKILL once its output holds
 * a seeded number of rows (some epochs committed, poison records parked before and after
 * the last checkpoint), resumed (`--resume`: restore in place, replay), for one seed
 * killed again during the resume, then resumed to the end. After it: every good
 * record's output exactly once (against the embedded run of the input without poison),
 * every poison record exactly one dead letter with its record, error and maxAttempts
 * attempts, in the summary (--dead-letters) and in the checkpoint directory's
 * dead-letters.jsonl (each with its epoch); and every resume finishes (its final
 * checkpoint commits). The servers outlive the killed process, as AWS does.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { Rng } from '../../lib/nexmark/random.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { ROOT } from '../cli/helpers.ts';
import { localServerEnv } from './helpers.ts';
import { type Pay, poisonEvents, poisonJob, poisonOperator, writeEvents } from './poison-jobs.ts';
import { expectOneLetterPerPoison } from './poison-letters.ts';

const N = 1000;
const dir = mkdtempSync(join(tmpdir(), 'sluice-poison-kill-'));
let job: string;

/** The test setup's servers (they outlive a killed run, as AWS does). */
function childEnv(): NodeJS.ProcessEnv {
  return { ...process.env, ...localServerEnv(), SLUICE_DEBUG: '1' };
}

const readLines = (f: string) => (existsSync(f) ? readFileSync(f, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []);

beforeAll(() => {
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
  job = join(dir, 'poison.ts');
  writeFileSync(job, `export { poisonJob as default } from '${ROOT}test/aws/poison-jobs.ts';\n`);
});

async function reference(events: readonly Pay[]): Promise<unknown[]> {
  const out = Sinks.collect<unknown>();
  await new EmbeddedRuntime(poisonJob(), { sources: { events: { kind: 'items', items: events.filter((e) => poisonOperator(e) === undefined) } }, sinks: { out: out as Sink<any> } }).run();
  return out.records;
}

/** `sluice run`, killed (SIGKILL) once its output file holds `killAtRows` rows (committed epochs), or run to its end. */
function runCli(args: readonly string[], out: string, killAtRows: number | undefined, timeoutMs = 120_000): Promise<{ code: number | null; killed: boolean; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['bin/sluice.js', ...args], { cwd: ROOT, env: childEnv(), stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    let killed = false;
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const poll = setInterval(() => {
      if (killAtRows !== undefined && !killed && rowsIn(out) >= killAtRows) {
        killed = child.kill('SIGKILL');
      }
    }, 20);
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`sluice ${args.join(' ')} did not finish in ${timeoutMs} ms\nstderr: ${stderr.slice(-4000)}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearInterval(poll);
      clearTimeout(timer);
      if (process.env.POISON_KILL_LOG) appendFileSync(process.env.POISON_KILL_LOG, `=== ${args.join(' ')} (kill at ${killAtRows}): code ${code}, killed ${killed}\n${stderr}\n`);
      resolve({ code, killed, stderr });
    });
  });
}

function rowsIn(file: string): number {
  if (!existsSync(file)) return 0;
  let n = 0;
  for (const c of readFileSync(file)) if (c === 10) n++;
  return n;
}

describe('poison records, killed and resumed on local AWS (seeded)', () => {
  for (const seed of [1, 2, 3]) {
    it(`seed ${seed}: good rows exactly once, each poison record one dead letter, every resume completes`, async () => {
      const rng = new Rng(seed);
      const events = poisonEvents(seed, N);
      const expected = await reference(events);
      const input = writeEvents(dir, `events-${seed}.jsonl`, events);
      const out = join(dir, `out-${seed}.jsonl`);
      const ck = join(dir, `ck-${seed}`);
      const letters = join(dir, `dead-${seed}.jsonl`);
      const args = ['run', job, '--input', input, '--output', out, '--target', 'local-aws', '--checkpoint-interval', '100', '--checkpoint-dir', ck, '--dead-letters', letters];
      // Killed once some epochs are committed (poison records parked before and after); seed 2 again during the resume.
      const first = Math.floor(expected.length * (0.15 + 0.4 * rng.double()));
      const second = first + Math.floor(expected.length * (0.1 + 0.25 * rng.double()));
      const kills = seed === 2 ? [first, second] : [first];
      let killed = 0;
      for (const [i, at] of [...kills, undefined].entries()) {
        const r = await runCli([...args, ...(i > 0 ? ['--resume'] : [])], out, at);
        if (r.killed) {
          killed++;
          continue;
        }
        // Completed with dead letters (the poison records): exit 3.
        expect(r.code, r.stderr.slice(-3000)).toBe(EXIT.rejects);
        if (i > 0) expect(r.stderr).toMatch(/restored checkpoint [1-9]\d* from/);
        break;
      }
      expect(killed, 'runs killed').toBeGreaterThan(0);
      assertExactlyOnce(expected, readLines(out), { input: events, label: `seed ${seed}, killed at ${kills.join(' and ')} rows` });
      const reported = readLines(letters).filter((d) => d.kind === 'deadLetter');
      expectOneLetterPerPoison(events, reported, `seed ${seed}: the summary's letters`);
      const stored = readLines(join(ck, 'dead-letters.jsonl'));
      expectOneLetterPerPoison(events, stored, `seed ${seed}: the directory's file`);
      for (const d of stored) expect(d.epoch, 'a stored letter names its epoch').toBeGreaterThan(0);
    }, 400_000);
  }
});
