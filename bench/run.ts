/**
 * `npm run bench`: the Nexmark queries on the embedded runtime against a hand-written
 * single-loop implementation of each query over the same events (the floor: what one
 * core does with no framework at all). See BENCHMARKS.md for the figures.
 *
 *   npm run bench -- [--events 1000000] [--query q5 --query q7 | --query q5,q7]
 *                    [--parallelism N] [--seed 42] [--warmup 100000] [--warmup-runs 5] [--warmup-ms 2000] [--json] [--in-process]
 *                    [--checkpoint-interval MS|off]   (default: every 1000 ms, the issue's condition)
 *                    [--cost-events 20000] [--cost-publish-batch 2000] [--skip-aws-cost]
 *                    [--checkpoints-query q5] [--skip-checkpoints] [--node-defaults]
 *
 * Then, in the same run, the checkpoint section (bench/checkpoints.ts, in its own child
 * process): one query (Q5 by default) over the same number of events with checkpoints
 * every second versus off (the throughput ratio is the figure), checkpoint duration
 * p50/p99 and snapshot bytes per epoch. `--skip-checkpoints` leaves it out.
 *
 * Each query runs in a fresh child process (`--expose-gc`), so its JIT state and peak
 * memory are its own, with the V8 flags of Sluice's launchers (lib/cli/node-flags.ts: a
 * single-threaded scavenger; `--node-defaults`: Node's defaults instead). Events are
 * generated into memory first, so neither side pays for generation or parsing. The two
 * sides alternate pass by pass: a warm-up (--warmup events, then full passes of each,
 * at least --warmup-runs and until the runtime's took --warmup-ms of CPU: the steady
 * state of V8's JIT), then five measured runs of each, and
 * the run with the least CPU time counts per side (every runtime run's rows are
 * checked). Throughput counts all events (persons, auctions, bids), as Flink's Nexmark
 * runner does; "per core" divides by the process's CPU time (Flink's
 * "throughput/cores"). Both sides must produce the same rows, or the bench fails.
 * Latency is defined in bench/nexmark/measure.ts.
 *
 * Then the AWS cost section (bench/aws-cost.ts): the same queries in local-AWS mode,
 * dollars per million events next to the naive baseline and Managed Flink.
 */
import { spawn } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type CheckpointBenchResult, checkpointReport } from './checkpoints.ts';
import { checkpointLabel, generate, measure, type MeasureConfig, type QueryResult, WARMUP_MS } from './nexmark/measure.ts';
import { QUERIES } from './nexmark/queries.ts';
import { NODE_FLAGS } from '../lib/cli/node-flags.ts';
import { checkpointIntervalOption } from './flags.ts';

function fail(message: string): never {
  console.error(`bench: ${message}`);
  process.exit(2);
}

function intFlag(raw: string | undefined, flag: string, fallback: number | undefined, min: number): number | undefined {
  if (raw === undefined) return fallback;
  const v = Number(raw.replace(/_/g, ''));
  if (!Number.isSafeInteger(v) || v < min) fail(`--${flag}: expected an integer >= ${min}, received "${raw}"`);
  return v;
}

function checkpointInterval(raw: string | undefined): number | undefined {
  try {
    return checkpointIntervalOption(raw, 1000);
  } catch (e) {
    return fail((e as Error).message);
  }
}

const { values } = parseArgs({
  options: {
    events: { type: 'string' },
    query: { type: 'string', multiple: true },
    parallelism: { type: 'string' },
    seed: { type: 'string' },
    warmup: { type: 'string' },
    'warmup-runs': { type: 'string' },
    'warmup-ms': { type: 'string' },
    'checkpoint-interval': { type: 'string' },
    'checkpoints-query': { type: 'string', default: 'q5' },
    'skip-checkpoints': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    'in-process': { type: 'boolean', default: false },
    'cost-events': { type: 'string' },
    'cost-publish-batch': { type: 'string' },
    'skip-aws-cost': { type: 'boolean', default: false },
    'node-defaults': { type: 'boolean', default: false },
    worker: { type: 'string' },
  },
});

const count = intFlag(values.events, 'events', 1_000_000, 1)!;
const cfg: MeasureConfig = {
  events: count,
  seed: intFlag(values.seed, 'seed', 42, 0)!,
  parallelism: intFlag(values.parallelism, 'parallelism', undefined, 1),
  warmup: intFlag(values.warmup, 'warmup', Math.min(100_000, Math.floor(count / 10)), 0)!,
  warmupRuns: intFlag(values['warmup-runs'], 'warmup-runs', 5, 0)!,
  warmupMs: intFlag(values['warmup-ms'], 'warmup-ms', WARMUP_MS, 0)!,
  // Checkpoints every second by default (issue 6: throughput "with checkpoints every second"); `off` turns them off.
  checkpointIntervalMs: checkpointInterval(values['checkpoint-interval']),
};
const names = (values.query ?? QUERIES.map((q) => q.name)).flatMap((s) => s.split(',')).map((s) => s.trim().toLowerCase());
const selected = names.map((name) => QUERIES.find((q) => q.name === name) ?? fail(`--query: expected one of ${QUERIES.map((q) => q.name).join(', ')}, received "${name}"`));

/** The children's node flags: the launchers' V8 flags (both sides of a query run under them), unless --node-defaults. */
const v8Flags = values['node-defaults'] || values['in-process'] ? [] : NODE_FLAGS;
const childFlags = [...process.execArgv, '--expose-gc', ...v8Flags];
const flagsLabel = values['in-process'] ? "this process's" : v8Flags.join(' ') || "Node's defaults";

/** Child side: one query, its result as JSON on stdout. */
async function worker(name: string): Promise<void> {
  const q = QUERIES.find((x) => x.name === name) ?? fail(`--worker: unknown query ${name}`);
  const result = await measure(q, generate(cfg.events, cfg.seed), cfg);
  process.stdout.write(JSON.stringify(result) + '\n');
}

function inChild(name: string): Promise<QueryResult> {
  const script = fileURLToPath(import.meta.url);
  const args = process.argv.slice(2).filter((a, i, all) => a !== '--json' && !(a.startsWith('--query') || all[i - 1] === '--query'));
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...childFlags, script, ...args, '--worker', name], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`bench worker for ${name} exited with ${code}`));
      resolve(JSON.parse(out.trim().split('\n').at(-1)!) as QueryResult);
    });
  });
}

/** The checkpoint section: bench/checkpoints.ts in a child process (its JIT state and memory its own), as JSON. */
function checkpointsInChild(query: string, events: number): Promise<CheckpointBenchResult> {
  const script = fileURLToPath(new URL('./checkpoints.ts', import.meta.url));
  const args = ['--json', '--query', query, '--events', String(events)];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...childFlags, script, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(JSON.parse(out) as CheckpointBenchResult) : reject(new Error(`bench/checkpoints.ts exited with ${code}`))));
  });
}

const k = (n: number) => (n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : `${(n / 1e3).toFixed(1)} K`);
const mb = (b: number) => `${(b / 1024 / 1024).toFixed(0)} MB`;
const lat = (ms: number) => (ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2));

function row(r: QueryResult): string[] {
  const q = QUERIES.find((x) => x.name === r.query)!;
  const floorOk = q.floorTarget ? (r.ratio >= 1 / 3 ? 'yes' : 'MISSED') : '-';
  const flinkOk = r.runtime.eventsPerCoreSec > r.flinkPerCore ? 'yes' : 'MISSED';
  return [
    r.query,
    `${k(r.runtime.eventsPerSec)}/s`,
    `${k(r.runtime.eventsPerCoreSec)}/s`,
    `${lat(r.runtime.latencyMs.p50)} / ${lat(r.runtime.latencyMs.p99)}`,
    mb(r.runtime.peakRssBytes),
    mb(r.runtime.heapGrowthBytes),
    `${k(r.floor.eventsPerCoreSec)}/s`,
    r.ratio.toFixed(3),
    r.coldRatio === undefined ? '-' : r.coldRatio.toFixed(3),
    floorOk,
    `${k(r.flinkPerCore)}/s`,
    flinkOk,
    r.resultsMatch ? String(r.runtime.results) : `DIFFER`,
  ];
}

const HEADER = ['query', 'events/s', 'per core', 'p50 / p99 ms', 'peak RSS', 'heap growth', 'floor/core', 'ratio', 'cold ratio', '>= 1/3', 'Flink/core', '> Flink', 'rows'];

function table(rows: string[][]): string {
  const all = [HEADER, ...rows];
  const widths = HEADER.map((_, c) => Math.max(...all.map((r) => r[c].length)));
  const line = (r: string[]) => '| ' + r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join(' | ') + ' |';
  return [line(HEADER), '|' + widths.map((w, c) => (c === 0 ? '-'.repeat(w + 2) : '-'.repeat(w + 1) + ':')).join('|') + '|', ...rows.map(line)].join('\n');
}

async function main(): Promise<void> {
  if (values.worker) return worker(values.worker);
  // With --json, stdout carries only the JSON; the human-readable report goes to stderr.
  const say = values.json ? (line: string) => console.error(line) : (line: string) => console.log(line);
  say(`Nexmark on the embedded runtime: ${count.toLocaleString('en-US')} events (seed ${cfg.seed}, 10 000 events/s of event time), warm-up ${cfg.warmup.toLocaleString('en-US')} events + ${cfg.warmupRuns} full passes or more, until the runtime's took ${cfg.warmupMs} ms of CPU, checkpoints: ${checkpointLabel(cfg)}`);
  say(`node ${process.version}, ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}); ${values['in-process'] ? 'all queries in this process' : 'one process per query'}; V8 flags: ${flagsLabel}`);
  const events = values['in-process'] ? generate(cfg.events, cfg.seed) : undefined;
  const results: QueryResult[] = [];
  for (const q of selected) {
    const r = events ? await measure(q, events, cfg) : await inChild(q.name);
    results.push(r);
    say(
      `  ${r.query.padEnd(4)} ${k(r.runtime.eventsPerSec)}/s in ${(r.runtime.durationMs / 1000).toFixed(2)} s (${r.runtime.coresUsed.toFixed(2)} cores), ` +
        `per core ${k(r.runtime.eventsPerCoreSec)}/s${r.runtime.checkpoints ? `, ${r.runtime.checkpoints} checkpoints` : ''}; floor ${k(r.floor.eventsPerSec)}/s, ${k(r.floor.eventsPerCoreSec)}/s per core; ratio ${r.ratio.toFixed(3)}, ${r.runtime.results} rows ${r.resultsMatch ? 'match' : `DIFFER: ${r.mismatch}`}`,
    );
  }
  say('\n' + table(results.map(row)));
  say('\nper core = events / CPU seconds of the process (ratio = runtime / floor, both per core, best of five runs per side after the warm-up passes, a run being as many passes as take 200 ms of CPU (their mean), the sides alternating run by run; cold ratio: the first full pass of each side); Flink/core = NEXMARK.md 7.1 (runner V1);');
  say('latency: the row\'s trigger event read by the source -> the row at the sink (bench/nexmark/measure.ts).');
  let checkpointBench: CheckpointBenchResult | undefined;
  if (!values['skip-checkpoints']) {
    const q = values['checkpoints-query']!.toLowerCase();
    if (!QUERIES.some((x) => x.name === q)) fail(`--checkpoints-query: expected one of ${QUERIES.map((x) => x.name).join(', ')}, received "${q}"`);
    checkpointBench = await checkpointsInChild(q, count);
    say('\n' + checkpointReport(checkpointBench).join('\n'));
  }
  let awsCost: unknown;
  if (!values['skip-aws-cost'] && results.every((r) => r.resultsMatch)) {
    const { costConfig, measureAwsCost } = await import('./aws-cost.ts');
    say('');
    const costCfg = await costConfig({ events: values['cost-events'], 'publish-batch': values['cost-publish-batch'], parallelism: values.parallelism, seed: values.seed });
    awsCost = await measureAwsCost(selected.map((q) => q.name), costCfg, say);
  }
  if (values.json) {
    console.log(JSON.stringify({ events: count, seed: cfg.seed, warmup: cfg.warmup, warmupRuns: cfg.warmupRuns, warmupMs: cfg.warmupMs, checkpoints: checkpointLabel(cfg), node: process.version, v8Flags: flagsLabel, cpus: cpus().length, cpu: cpus()[0]?.model, results, checkpointBench, awsCost }, null, 2));
  }
  if (results.some((r) => !r.resultsMatch)) {
    console.error('bench: the runtime and the floor disagree on the results');
    process.exit(1);
  }
}

await main();
