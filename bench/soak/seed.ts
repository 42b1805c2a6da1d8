/**
 * One crash-soak seed: `sluice run <job> --checkpoint-interval` as a child process,
 * SIGKILLed as its plan says (inside at a named fault site, or from outside after some
 * milliseconds), restarted with --resume until it finishes; then its committed output is
 * checked against an uninterrupted in-process run of the same job and input
 * (lib/testing/checker.ts). After every kill the output must hold committed epochs only:
 * nothing duplicated, nothing unexpected (lost is allowed until the end).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sinks, type Sink } from '../../lib/api/sinks.ts';
import { loadJob } from '../../lib/cli/load-job.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { generateEvent, serializeEvent } from '../../lib/nexmark/index.ts';
import { type Comparison, compareOutputs } from '../../lib/testing/checker.ts';
import { type Census, describeKill, INPUTS, type Kill, killKind, pickJob, planSeed, type Query, type SeedPlan, type SoakTarget } from './plan.ts';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

const JOBS: Record<Query, string> = {
  q3: 'examples/nexmark/q3.ts',
  q4: 'examples/nexmark/q4.ts',
  q5: 'examples/nexmark/q5.ts',
  q8: 'examples/nexmark/q8.ts',
  q11: 'examples/nexmark/q11.ts',
  timers: 'bench/soak/timers-job.ts',
};

/** Per-key order the contract defines for a job's output (the timers job: one bidder's rows in order); none for the Nexmark queries' merged outputs. */
const ORDER: Partial<Record<Query, (r: unknown) => string | undefined>> = { timers: (r) => String((r as { bidder: number }).bidder) };

export interface SoakEnv {
  /** Scratch directory (inputs, checkpoint directories, outputs). */
  readonly dir: string;
  /** local-aws: the servers' endpoints and credentials, as the SDK's variables. */
  readonly awsEnv?: NodeJS.ProcessEnv;
  /** Keep a seed's directory (default: removed when it passed). */
  readonly keep?: boolean;
  /** Tests: called with the output file before the final check (to show that a damaged output fails). */
  readonly beforeCheck?: (output: string) => void;
}

export interface SeedResult {
  readonly plan: SeedPlan;
  readonly ok: boolean;
  /** Kills that happened (the child died of SIGKILL), by kind. */
  readonly killed: readonly Kill[];
  readonly attempts: number;
  readonly comparison?: Comparison;
  readonly records: number;
  readonly error?: string;
  readonly repro: string;
  readonly durationMs: number;
}

interface Prepared {
  readonly input: string;
  readonly reference: unknown[];
  readonly census: Census;
}

const prepared = new Map<string, Promise<Prepared>>();

function childEnv(env: SoakEnv, extra: Record<string, string>): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = { ...process.env, ...(env.awsEnv ?? {}), ...extra };
  delete base.SLUICE_KILL_AT;
  delete base.SLUICE_FAULT_COUNTS;
  return { ...base, ...extra };
}

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
}

function runChild(args: readonly string[], env: NodeJS.ProcessEnv, killAfterMs?: number, timeoutMs = 300_000): Promise<Exit> {
  return new Promise((resolvePromise, reject) => {
    const child: ChildProcess = spawn(process.execPath, ['bin/sluice.js', ...args], { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timers = [
      ...(killAfterMs !== undefined ? [setTimeout(() => child.kill('SIGKILL'), killAfterMs)] : []),
      setTimeout(() => {
        child.kill('SIGKILL');
        stderr += `\n(soak: no exit after ${timeoutMs} ms; killed)`;
      }, timeoutMs),
    ];
    child.on('error', reject);
    child.on('close', (code, signal) => {
      timers.forEach(clearTimeout);
      resolvePromise({ code, signal, stderr });
    });
  });
}

/** The output's rows; `committedIn`: only up to the length the transactional sink committed (a killed run may have appended more). */
function readRows(file: string, committedIn?: string): unknown[] {
  if (!existsSync(file)) return [];
  let bytes = readFileSync(file);
  if (committedIn !== undefined) {
    const state = join(committedIn, 'committed.json');
    bytes = bytes.subarray(0, existsSync(state) ? (JSON.parse(readFileSync(state, 'utf8')) as { length: number }).length : 0);
  }
  return bytes
    .toString('utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

const runArgs = (plan: SeedPlan, input: string, output: string, ck: string) => [
  'run',
  JOBS[plan.query],
  '--input',
  input,
  '--output',
  output,
  '--checkpoint-interval',
  String(plan.checkpointIntervalMs),
  '--checkpoint-dir',
  ck,
  ...(plan.target === 'local-aws' ? ['--target', 'local-aws'] : []),
];

/** The input file, the reference output and the crossing counts of one job and input, made once. */
function prepare(env: SoakEnv, target: SoakTarget, query: Query, inputSeed: number): Promise<Prepared> {
  const key = `${target}/${query}/${inputSeed}`;
  let p = prepared.get(key);
  if (!p) {
    p = (async () => {
      const events = INPUTS[target].events;
      const inputs = join(env.dir, 'inputs');
      mkdirSync(inputs, { recursive: true });
      const input = join(inputs, `nexmark-${inputSeed}-${events}.jsonl`);
      if (!existsSync(input)) {
        const lines: string[] = [];
        for (let n = 0; n < events; n++) lines.push(serializeEvent(generateEvent(n, { seed: 1000 + inputSeed, ratePerSec: 1000 })));
        writeFileSync(input, lines.join('\n') + '\n');
      }
      const out = Sinks.collect<unknown>();
      const job = await loadJob(resolve(ROOT, JOBS[query]), {});
      await new EmbeddedRuntime(job, { sources: { events: { kind: 'file', path: input } }, sinks: { results: out as Sink<any> } }).run();
      // Each point's crossings in an uninterrupted checkpointed child run: what a kill's nth is drawn from.
      const scratch = join(env.dir, `census-${target}-${query}-${inputSeed}`);
      const counts = join(scratch, 'counts.json');
      mkdirSync(scratch, { recursive: true });
      const plan = { seed: 0, target, query, inputSeed, events, checkpointIntervalMs: target === 'embedded' ? 5 : 200, kills: [] };
      const exit = await runChild(runArgs(plan, input, join(scratch, 'out.jsonl'), join(scratch, 'ck')), childEnv(env, { SLUICE_FAULT_COUNTS: counts }));
      if (exit.code !== 0) throw new Error(`soak: the census run of ${query} (${target}) failed: ${exit.stderr}`);
      const census = new Map(Object.entries(JSON.parse(readFileSync(counts, 'utf8')) as Record<string, number>));
      rmSync(scratch, { recursive: true, force: true });
      return { input, reference: out.records, census };
    })();
    prepared.set(key, p);
  }
  return p;
}

export function reproCommand(seed: number, target: SoakTarget): string {
  return `npm run soak -- --from ${seed} --seeds 1${target === 'local-aws' ? ' --target local-aws' : ''} --keep`;
}

/** Runs one seed to the end: kills, resumes, the check. Never throws: a failure is in the result. */
export async function runSeed(seed: number, target: SoakTarget, env: SoakEnv): Promise<SeedResult> {
  const t0 = performance.now();
  const { query, inputSeed } = pickJob(seed, target);
  const repro = reproCommand(seed, target);
  let plan: SeedPlan = { seed, target, query, inputSeed, events: INPUTS[target].events, checkpointIntervalMs: 0, kills: [] };
  const killed: Kill[] = [];
  let attempts = 0;
  const dir = join(env.dir, `seed-${target}-${seed}`);
  const fail = (error: string, comparison?: Comparison): SeedResult => ({ plan, ok: false, killed, attempts, comparison, records: comparison?.counts.actual ?? 0, error, repro, durationMs: performance.now() - t0 });
  try {
    const prep = await prepare(env, target, query, inputSeed);
    plan = planSeed(seed, target, prep.census);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const output = join(dir, 'out.jsonl');
    const args = runArgs(plan, prep.input, output, join(dir, 'ck'));
    const order = ORDER[query];
    const commands: string[] = [];
    for (let k = 0; ; k++) {
      const kill = plan.kills[k];
      const attemptArgs = [...args, ...(k > 0 ? ['--resume'] : [])];
      const inside: Record<string, string> = kill && kill.kind !== 'timer' ? { SLUICE_KILL_AT: kill.kind === 'any' ? `any#${kill.nth}` : `${kill.point}#${kill.nth}` } : {};
      commands.push(`${Object.entries(inside).map(([n, v]) => `${n}=${v} `).join('')}sluice ${attemptArgs.join(' ')}${kill?.kind === 'timer' ? ` (SIGKILL after ${kill.ms} ms)` : ''}`);
      attempts++;
      const exit = await runChild(attemptArgs, childEnv(env, inside), kill?.kind === 'timer' ? kill.ms : undefined);
      const steps = () => `\n  attempts:\n    ${commands.join('\n    ')}`;
      if (exit.signal === 'SIGKILL' && kill) {
        killed.push(kill);
        // Committed epochs only, at every point: a sub-multiset of the reference.
        const partial = compareOutputs(prep.reference, readRows(output, join(dir, 'ck', 'sinks', 'results')), { orderKey: order, label: `seed ${seed} after ${describeKill(kill)}` });
        if (partial.counts.duplicated || partial.counts.unexpected || partial.counts.reordered) return fail(`${partial.summary()}${steps()}`, partial);
        continue;
      }
      if (exit.code !== 0) return fail(`attempt ${attempts} exited with ${exit.signal ?? `code ${exit.code}`}: ${exit.stderr.trim().split('\n').slice(-6).join('\n')}${steps()}`);
      env.beforeCheck?.(output);
      const rows = readRows(output);
      const comparison = compareOutputs(prep.reference, rows, { orderKey: order, label: `seed ${seed} (${query}, ${target}, killed ${killed.length}x)` });
      if (!comparison.ok) return fail(`${comparison.summary()}${steps()}`, comparison);
      if (prep.reference.length === 0) return fail(`the reference of ${query} is empty: the check cannot fail`, comparison);
      if (!env.keep) rmSync(dir, { recursive: true, force: true });
      return { plan, ok: true, killed, attempts, comparison, records: rows.length, repro, durationMs: performance.now() - t0 };
    }
  } catch (e) {
    return fail(e instanceof Error ? (e.stack ?? e.message) : String(e));
  }
}

export { describeKill, killKind };
