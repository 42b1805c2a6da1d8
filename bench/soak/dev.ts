/**
 * `sluice dev` killed while a client publishes, resumed: a 202 must survive. The job numbers
 * events with a running count and its idempotent sink appends each row synchronously, so
 * rows emitted again after a restart are the same rows; deduplicated by count, every event
 * that got a 202 must hold exactly one number, with no hole and no event never sent.
 * test/cli/resume.test.ts runs fixed cases with these helpers; the crash soak
 * (`npm run soak -- --target dev`) runs them by seed: checkpoint interval, batches before
 * the stop, SIGKILL during a request, after one, or SIGINT.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { mulberry32 } from '../../lib/local/faults.ts';
import { cliBundle, DEV_JOB_SOURCE } from './cli-bundle.ts';
import type { Kill } from './plan.ts';
import { ROOT, type SeedResult } from './seed.ts';

/** Writes a job module for `bin/sluice.js dev` into `dir` (bench/soak/dev-job.ts, re-exported; a package.json making it an ES module); returns its path. */
export function writeDevJob(dir: string): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
  const path = join(dir, 'durable.ts');
  writeFileSync(path, `export { default } from ${JSON.stringify(join(ROOT, DEV_JOB_SOURCE))};\n`);
  return path;
}

export interface Dev {
  child: ChildProcess;
  url: string;
  stderr: () => string;
  exited: Promise<number | null>;
}

/** `cli`: the CLI's entry (default bin/sluice.js; the soak passes its bundle's). */
export async function startDev(job: string, args: readonly string[], cli = 'bin/sluice.js'): Promise<Dev> {
  const child = spawn(process.execPath, [cli, 'dev', job, '--port', '0', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  child.stdout!.resume();
  const exited = new Promise<number | null>((r) => child.once('close', (code) => r(code)));
  const deadline = Date.now() + 60_000;
  for (;;) {
    const m = /ingestion endpoint (http:\/\/\S+)/.exec(err);
    if (m) return { child, url: m[1], stderr: () => err, exited };
    if (Date.now() > deadline || child.exitCode !== null) {
      child.kill('SIGKILL');
      throw new Error(`dev did not start: ${err}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Publishes one batch; resolves with the ids when answered 202, [] when refused or cut off. */
export async function publish(dev: Dev, ids: string[]): Promise<string[]> {
  const body = ids.map((id, i) => JSON.stringify({ id, t: 1_700_000_000_000 + i })).join('\n');
  try {
    const r = await fetch(`${dev.url}/streams/events/events`, { method: 'POST', headers: { 'content-type': 'application/x-ndjson' }, body });
    await r.arrayBuffer();
    return r.status === 202 ? ids : [];
  } catch {
    return [];
  }
}

export const batch = (b: number, size = 50) => Array.from({ length: size }, (_, i) => `b${b}-${i}`);

export function stopWith(dev: Dev, signal: NodeJS.Signals): Promise<number | null> {
  dev.child.kill(signal);
  return dev.exited;
}

/** Rows of the incarnations' output files, deduplicated by count; `conflicts`: counts given to two events. */
export function numbered(files: readonly string[]): { byN: Map<number, string>; conflicts: string[] } {
  const byN = new Map<number, string>();
  const conflicts: string[] = [];
  for (const f of files) {
    if (!existsSync(f)) continue;
    for (const line of readFileSync(f, 'utf8').split('\n').filter(Boolean)) {
      const { n, id } = JSON.parse(line) as { n: number; id: string };
      const seen = byN.get(n);
      if (seen !== undefined && seen !== id) conflicts.push(`count ${n}: ${seen} and ${id}`);
      byN.set(n, id);
    }
  }
  return { byN, conflicts };
}

export interface DevCheck {
  /** One line per kind of breach; empty when every accepted event was counted exactly once. */
  readonly problems: string[];
  /** Accepted events with no count. */
  readonly lost: number;
  /** Events counted more than once (extra copies). */
  readonly duplicated: number;
  /** Counted events never sent. */
  readonly unexpected: number;
}

/** What breaks "every accepted event exactly once": holes in the counts, an event twice, an accepted one missing, one never sent. */
export function checkDevRows(byN: ReadonlyMap<number, string>, accepted: readonly string[], sent: ReadonlySet<string>): DevCheck {
  const problems: string[] = [];
  const ns = [...byN.keys()].sort((a, b) => a - b);
  if (ns.length && (ns[0] !== 1 || ns.at(-1) !== ns.length)) problems.push(`counts ${ns[0]}..${ns.at(-1)} over ${ns.length} rows: a hole`);
  const ids = [...byN.values()];
  const got = new Set(ids);
  const duplicated = ids.length - got.size;
  if (duplicated) problems.push(`${duplicated} event(s) counted twice`);
  const missing = accepted.filter((id) => !got.has(id));
  if (missing.length) problems.push(`${missing.length} accepted event(s) missing, e.g. ${missing.slice(0, 3).join(', ')}`);
  const stray = ids.filter((id) => !sent.has(id));
  if (stray.length) problems.push(`${stray.length} event(s) never sent, e.g. ${stray.slice(0, 3).join(', ')}`);
  return { problems, lost: missing.length, duplicated, unexpected: stray.length };
}

export const exactlyOnceProblems = (byN: ReadonlyMap<number, string>, accepted: readonly string[], sent: ReadonlySet<string>): string[] => checkDevRows(byN, accepted, sent).problems;

/**
 * One dev seed: checkpoint interval, batches before the stop and how it stops (SIGKILL
 * during a request, SIGKILL after the batches, SIGINT) from the seed; then a resume that
 * publishes more and stops with SIGINT; then the check.
 */
export async function runDevSeed(seed: number, scratch: string, keep = false): Promise<SeedResult> {
  const t0 = performance.now();
  const random = mulberry32(seed * 7919 + 3);
  const int = (n: number) => Math.floor(random() * n);
  const interval = [0, 50, 100, 250][int(4)];
  const before = 1 + int(8);
  const after = 1 + int(3);
  const stop = (['kill-in-flight', 'kill-after', 'sigint'] as const)[int(3)];
  const kill: Kill = { kind: 'dev', when: stop === 'kill-in-flight' ? 'in flight' : 'between requests' };
  const dir = join(scratch, `seed-dev-${seed}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const ck = join(dir, 'ck');
  const outs = [join(dir, 'out-1.jsonl'), join(dir, 'out-2.jsonl')];
  const repro = `npm run soak -- --from ${seed} --seeds 1 --target dev --keep`;
  const plan = { seed, target: 'dev' as const, query: `dev (${stop}, ${before}+${after} batches, interval ${interval} ms)`, inputSeed: 0, events: (before + after) * 50, checkpointIntervalMs: interval, kills: stop === 'sigint' ? [] : [kill] };
  const accepted: string[] = [];
  const sent = new Set<string>();
  const send = (b: number) => {
    const ids = batch(b);
    ids.forEach((id) => sent.add(id));
    return ids;
  };
  let attempts = 0;
  try {
    const bundle = await cliBundle(ROOT);
    const job = bundle.job('dev');
    attempts++;
    const d1 = await startDev(job, ['--checkpoint-dir', ck, '--checkpoint-interval', String(interval), '--param', `out=${outs[0]}`], bundle.cli);
    for (let b = 0; b < before; b++) accepted.push(...(await publish(d1, send(b))));
    if (stop === 'kill-in-flight') {
      const inFlight = publish(d1, send(before));
      d1.child.kill('SIGKILL');
      accepted.push(...(await inFlight));
      await d1.exited;
    } else if ((await stopWith(d1, stop === 'sigint' ? 'SIGINT' : 'SIGKILL')) !== (stop === 'sigint' ? 0 : null)) {
      throw new Error(`the first incarnation did not stop as asked (${stop}): ${d1.stderr()}`);
    }
    attempts++;
    const d2 = await startDev(job, ['--checkpoint-dir', ck, '--checkpoint-interval', String(interval), '--resume', '--param', `out=${outs[1]}`], bundle.cli);
    for (let b = before + 1; b <= before + after; b++) accepted.push(...(await publish(d2, send(b))));
    const code = await stopWith(d2, 'SIGINT');
    if (code !== 0) throw new Error(`the resumed incarnation exited with ${code} on SIGINT: ${d2.stderr()}`);
    const { byN, conflicts } = numbered(outs);
    const check = checkDevRows(byN, accepted, sent);
    const problems = [...conflicts, ...check.problems];
    if (accepted.length < (before + after) * 50) problems.push(`only ${accepted.length} of ${(before + after) * 50} events accepted outside the killed request`);
    const ok = problems.length === 0;
    if (ok && !keep) rmSync(dir, { recursive: true, force: true });
    const counts = { reference: accepted.length, actual: byN.size, lost: check.lost, duplicated: check.duplicated, extraCopies: check.duplicated, unexpected: check.unexpected + conflicts.length, reordered: 0 };
    const comparison = { lost: [], duplicated: [], unexpected: [], reordered: [], counts, ok, summary: () => problems.join('; ') };
    return { plan, ok, killed: plan.kills, attempts, comparison, records: byN.size, ...(ok ? {} : { error: `sluice dev seed ${seed} (${plan.query}): ${problems.join('; ')}` }), repro, durationMs: performance.now() - t0 };
  } catch (e) {
    return { plan, ok: false, killed: [], attempts, records: 0, error: e instanceof Error ? e.message : String(e), repro, durationMs: performance.now() - t0 };
  }
}
