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
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sinks, type Sink } from '../../lib/api/sinks.ts';
import { loadJob } from '../../lib/cli/load-job.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { generateEvent, serializeEvent } from '../../lib/nexmark/index.ts';
import { type Comparison, compareOutputs } from '../../lib/testing/checker.ts';
import { cliBundle } from './cli-bundle.ts';
import { type Census, describeKill, INPUTS, INTERVAL_MS, JOBS, type Kill, killKind, pickJob, planSeed, type Query, type SeedPlan, type SoakMode, type SoakTarget } from './plan.ts';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Per-key order the contract defines for a job's output (the timers job: one bidder's rows in order); none for the Nexmark queries' merged outputs. */
const ORDER: Partial<Record<Query, (r: unknown) => string | undefined>> = { timers: (r) => String((r as { bidder: number }).bidder) };

export interface SoakEnv {
  /** Scratch directory (inputs, checkpoint directories, outputs). */
  readonly dir: string;
  /** local-aws: the servers' endpoints and credentials, as the SDK's variables. */
  readonly awsEnv?: NodeJS.ProcessEnv;
  /** Keep a seed's directory (default: removed when it passed). */
  readonly keep?: boolean;
  /** Events per input (default INPUTS[target].events). */
  readonly events?: number;
  /** Tests: called with the output file before the final check (to show that a damaged output fails). */
  readonly beforeCheck?: (output: string) => void;
}

export interface SeedResult {
  readonly plan: Omit<SeedPlan, 'query' | 'target'> & { readonly query: string; readonly target: SoakMode };
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

/** `sluice <args>` from the soak's CLI bundle, its job given by query (`JOB` in `args`). */
async function runChild(query: Query, args: readonly string[], env: NodeJS.ProcessEnv, killAfterMs?: number, timeoutMs = 300_000): Promise<Exit> {
  const bundle = await cliBundle(ROOT);
  return new Promise((resolvePromise, reject) => {
    const argv = args.map((a) => (a === JOB ? bundle.job(query) : a));
    const child: ChildProcess = spawn(process.execPath, [bundle.cli, ...argv], { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] });
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

/** Stands for the job module in a child's arguments: the bundle's when spawned, the source's in a printed command. */
const JOB = '<job>';

const runArgs = (plan: SeedPlan, input: string, output: string, ck: string) => [
  'run',
  JOB,
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

const inputs = new Map<string, string>();
const references = new Map<string, Promise<unknown[]>>();
const censuses = new Map<string, Promise<Census>>();

const eventsOf = (env: SoakEnv, target: SoakTarget): number => env.events ?? INPUTS[target].events;

/** A Nexmark input file of the soak's size, written once per variant. */
function inputFile(env: SoakEnv, target: SoakTarget, inputSeed: number): string {
  const events = eventsOf(env, target);
  const file = join(env.dir, 'inputs', `nexmark-${inputSeed}-${events}.jsonl`);
  if (!inputs.has(file)) {
    mkdirSync(dirname(file), { recursive: true });
    const lines: string[] = [];
    for (let n = 0; n < events; n++) lines.push(serializeEvent(generateEvent(n, { seed: 1000 + inputSeed, ratePerSec: INPUTS[target].ratePerSec })));
    writeFileSync(file, lines.join('\n') + '\n');
    inputs.set(file, file);
  }
  return file;
}

/** The uninterrupted in-process run's output (the embedded runtime, no checkpoints): what every seed is checked against. */
function reference(query: Query, input: string): Promise<unknown[]> {
  const key = `${query}/${input}`;
  let p = references.get(key);
  if (!p) {
    p = (async () => {
      const out = Sinks.collect<unknown>();
      const job = await loadJob(resolve(ROOT, JOBS[query]), {});
      await new EmbeddedRuntime(job, { sources: { events: { kind: 'file', path: input } }, sinks: { results: out as Sink<any> } }).run();
      return out.records;
    })();
    references.set(key, p);
  }
  return p;
}

/** Each point's crossings in one uninterrupted checkpointed child run of the job (input variant 0): what a kill's nth is drawn from. */
function census(env: SoakEnv, target: SoakTarget, query: Query): Promise<Census> {
  const key = `${target}/${query}/${eventsOf(env, target)}`;
  let p = censuses.get(key);
  if (!p) {
    p = (async () => {
      const scratch = join(env.dir, `census-${target}-${query}`);
      const counts = join(scratch, 'counts.json');
      mkdirSync(scratch, { recursive: true });
      const plan = { seed: 0, target, query, inputSeed: 0, events: eventsOf(env, target), checkpointIntervalMs: INTERVAL_MS[target], kills: [] };
      const exit = await runChild(query, runArgs(plan, inputFile(env, target, 0), join(scratch, 'out.jsonl'), join(scratch, 'ck')), childEnv(env, { SLUICE_FAULT_COUNTS: counts }));
      if (exit.code !== 0) throw new Error(`soak: the census run of ${query} (${target}) failed: ${exit.stderr}`);
      const counted = new Map(Object.entries(JSON.parse(readFileSync(counts, 'utf8')) as Record<string, number>));
      rmSync(scratch, { recursive: true, force: true });
      return counted;
    })();
    censuses.set(key, p);
  }
  return p;
}

export function reproCommand(seed: number, target: SoakTarget, events: number = INPUTS[target].events): string {
  return `npm run soak -- --from ${seed} --seeds 1${target === 'local-aws' ? ' --target local-aws' : ''}${events !== INPUTS[target].events ? ` --events ${events}` : ''} --keep`;
}

/** Runs one seed to the end: kills, resumes, the check. Never throws: a failure is in the result. */
export async function runSeed(seed: number, target: SoakTarget, env: SoakEnv): Promise<SeedResult> {
  const t0 = performance.now();
  const { query, inputSeed } = pickJob(seed, target);
  const repro = reproCommand(seed, target, eventsOf(env, target));
  let plan: SeedPlan = { seed, target, query, inputSeed, events: eventsOf(env, target), checkpointIntervalMs: 0, kills: [] };
  const killed: Kill[] = [];
  let attempts = 0;
  const dir = join(env.dir, `seed-${target}-${seed}`);
  const fail = (error: string, comparison?: Comparison): SeedResult => ({ plan, ok: false, killed, attempts, comparison, records: comparison?.counts.actual ?? 0, error, repro, durationMs: performance.now() - t0 });
  try {
    const input = inputFile(env, target, inputSeed);
    const prep = { input, reference: await reference(query, input) };
    plan = planSeed(seed, target, await census(env, target, query), eventsOf(env, target));
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const output = join(dir, 'out.jsonl');
    const args = runArgs(plan, prep.input, output, join(dir, 'ck'));
    const order = ORDER[query];
    const commands: string[] = [];
    for (let k = 0; ; k++) {
      const kill = plan.kills[k];
      const attemptArgs = [...args, ...(k > 0 ? ['--resume'] : [])];
      const inside: Record<string, string> = kill?.kind === 'any' ? { SLUICE_KILL_AT: `any#${kill.nth}` } : kill?.kind === 'site' ? { SLUICE_KILL_AT: `${kill.point}#${kill.nth}` } : {};
      const shown = attemptArgs.map((a) => (a === JOB ? JOBS[query] : a));
      commands.push(`${Object.entries(inside).map(([n, v]) => `${n}=${v} `).join('')}sluice ${shown.join(' ')}${kill?.kind === 'timer' ? ` (SIGKILL after ${kill.ms} ms)` : ''}`);
      attempts++;
      const exit = await runChild(query, attemptArgs, childEnv(env, inside), kill?.kind === 'timer' ? kill.ms : undefined);
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
