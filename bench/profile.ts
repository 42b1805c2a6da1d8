/**
 * CPU profile of one query's runtime side only (no generation, no floor):
 *
 *   npx tsx bench/profile.ts --query q5 [--events 500000] [--parallelism N] [--checkpoint-interval MS|off] [--runs N] [--out q5.cpuprofile] [--top 40]
 *
 * Checkpoints are off unless `--checkpoint-interval` gives an interval (the bench's is 1000).
 *
 * `--runs N`: N full runs in this process, the last one profiled (default 1, after a
 * 50 000-event warm-up). V8 is still optimising the runtime during its first 1 M-event
 * runs, so later runs show the steady state (see BENCHMARKS.md, Method).
 *
 * Prints the functions with the most self time and the most total (inclusive) time,
 * and self time summed per source file;
 * the .cpuprofile opens in Chrome DevTools or speedscope.
 *
 * `--lines N`: also the N source lines with the most self samples, with their text: where
 * inside a hot function the time goes. tsx hands V8 each module as one line, so run a
 * bundle (esbuild, unminified: one statement per line) for this:
 *
 *   npx esbuild bench/profile.ts --bundle --platform=node --format=esm --packages=external --outfile=bench/.profile.mjs
 *   node bench/.profile.mjs --query q5 --events 1000000 --runs 4 --checkpoint-interval 1000 --lines 40
 *
 * Lines that allocate collect samples beyond their cost (a sample often lands where the
 * young generation fills up): compare changes with bench/ab.ts, not by these shares.
 *
 * `--heap`: where the profiled run allocates instead (V8's sampling heap profiler, every
 * 4 KB, objects collected by either GC included): bytes per event by allocating function
 * and by file. Garbage is what the GC share of the CPU profile pays for. Give it
 * `--runs 5` or more: in a first run much of the code is not optimised yet, and its
 * allocations are not the steady state's (Q8: 78 bytes per event at --runs 1, of them 16
 * boxed timestamps at the source; 36 at --runs 8, 1 of them at the source).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { openCheckpointedRuntime } from '../lib/local/checkpointing.ts';
import { EmbeddedRuntime } from '../lib/local/embedded.ts';
import { CollectSink } from '../lib/api/sinks.ts';
import { generate, replaySource } from './nexmark/measure.ts';
import { QUERIES } from './nexmark/queries.ts';
import { checkpointIntervalOption, intOption } from './flags.ts';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
  /** Self samples by source line (1-based), as V8 reports them. */
  positionTicks?: { line: number; ticks: number }[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const { values } = parseArgs({
  options: {
    query: { type: 'string', default: 'q5' },
    events: { type: 'string', default: '500000' },
    parallelism: { type: 'string' },
    out: { type: 'string' },
    top: { type: 'string', default: '40' },
    'checkpoint-interval': { type: 'string' },
    runs: { type: 'string', default: '1' },
    heap: { type: 'boolean', default: false },
    lines: { type: 'string', default: '0' },
  },
});
const q = QUERIES.find((x) => x.name === values.query);
if (!q) throw new Error(`--query: one of ${QUERIES.map((x) => x.name).join(', ')}`);
const events = generate(intOption('events', values.events, 1), 42);
const interval = checkpointIntervalOption(values['checkpoint-interval'], undefined);
const parallelism = values.parallelism === undefined ? undefined : intOption('parallelism', values.parallelism, 1);
/** One run; the checkpoint directory is removed by `cleanup`, outside the profiled window. */
const run = async (count: number): Promise<{ ms: number; cleanup: () => void }> => {
  const job = q.job(parallelism);
  const options = {
    sources: { events: replaySource(count === events.length ? events : events.slice(0, count)) },
    sinks: { results: new CollectSink() },
  };
  const dir = interval !== undefined ? mkdtempSync(join(tmpdir(), 'sluice-profile-ck-')) : undefined;
  const runtime =
    dir !== undefined && interval !== undefined
      ? (await openCheckpointedRuntime(job, options, { dir, intervalMs: interval, durable: false, start: 'fresh' })).runtime
      : new EmbeddedRuntime(job, options);
  const t0 = performance.now();
  await runtime.run();
  const ms = performance.now() - t0;
  return { ms, cleanup: () => dir && rmSync(dir, { recursive: true, force: true }) };
};
(await run(Math.min(50_000, events.length))).cleanup(); // warm-up
const runs = intOption('runs', values.runs, 1);
for (let i = 1; i < runs; i++) (await run(events.length)).cleanup();

const session = new Session();
session.connect();
if (values.heap) {
  await heapProfile(session);
  process.exit(0);
}
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: 100 });
await session.post('Profiler.start');
const cpu0 = process.cpuUsage();
const { ms, cleanup } = await run(events.length);
const cpu = process.cpuUsage(cpu0);
const { profile } = (await session.post('Profiler.stop')) as unknown as { profile: Profile };
session.disconnect();
cleanup();
if (values.out) writeFileSync(values.out, JSON.stringify(profile));

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const name = (n: ProfileNode) => `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.split('/').slice(-2).join('/')}`;
const self = new Map<string, number>();
const total = new Map<string, number>();
const byFile = new Map<string, number>();
const fileOf = (n: ProfileNode) => n.callFrame.url.split('/').slice(-2).join('/') || n.callFrame.functionName;
let all = 0;
profile.samples.forEach((id, i) => {
  // The first delta is the time from starting the profiler to the first sample.
  const dt = i === 0 ? 0 : (profile.timeDeltas[i] ?? 0);
  all += dt;
  const k = name(byId.get(id)!);
  self.set(k, (self.get(k) ?? 0) + dt);
  const f = fileOf(byId.get(id)!);
  byFile.set(f, (byFile.get(f) ?? 0) + dt);
  const seen = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const k2 = name(byId.get(cur)!);
    if (!seen.has(k2)) total.set(k2, (total.get(k2) ?? 0) + dt);
    seen.add(k2);
  }
});
const top = intOption('top', values.top, 1);
const show = (title: string, m: Map<string, number>) => {
  console.log(`--- ${title}`);
  for (const [k, t] of [...m].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${((100 * t) / all).toFixed(1).padStart(5)}%  ${k}`);
};
const cpuSec = (cpu.user + cpu.system) / 1e6;
console.log(
  `${q.name}: ${events.length} events in ${(ms / 1000).toFixed(2)} s = ${Math.round(events.length / (ms / 1000)).toLocaleString('en-US')} events/s, ` +
    `${Math.round(events.length / cpuSec).toLocaleString('en-US')} per CPU-second (profiler on)`,
);
show('self', self);
show('total', total);
show('self time by file', byFile);
const lines = intOption('lines', values.lines, 0);
if (lines > 0) showLines(profile, lines);

/** The source lines with the most self samples, each with its share of all samples and its text. */
function showLines(p: Profile, n: number): void {
  const ticks = new Map<string, number>();
  let sum = 0;
  for (const node of p.nodes) {
    for (const { line, ticks: t } of node.positionTicks ?? []) {
      sum += t;
      if (!node.callFrame.url.startsWith('file://')) continue;
      const k = `${node.callFrame.url}:${line}`;
      ticks.set(k, (ticks.get(k) ?? 0) + t);
    }
  }
  const sources = new Map<string, string[]>();
  const textOf = (url: string, line: number) => {
    let src = sources.get(url);
    if (src === undefined) sources.set(url, (src = readFileSync(fileURLToPath(url), 'utf8').split('\n')));
    return (src[line - 1] ?? '').trim().slice(0, 100);
  };
  console.log(`--- self samples by line (of ${sum} with line positions)`);
  for (const [k, t] of [...ticks].sort((a, b) => b[1] - a[1]).slice(0, n)) {
    const i = k.lastIndexOf(':');
    const url = k.slice(0, i);
    const line = Number(k.slice(i + 1));
    console.log(`${((100 * t) / sum).toFixed(1).padStart(5)}%  ${url.split('/').slice(-2).join('/')}:${line}  ${textOf(url, line)}`);
  }
}

interface HeapNode {
  callFrame: { functionName: string; url: string };
  selfSize: number;
  children: HeapNode[];
}

/** The profiled run's allocations, sampled: bytes per event by function and by file. */
async function heapProfile(s: Session): Promise<void> {
  await s.post('HeapProfiler.enable');
  await s.post('HeapProfiler.startSampling', { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  const { cleanup } = await run(events.length);
  const { profile } = (await s.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: HeapNode } };
  s.disconnect();
  cleanup();
  const where = (n: HeapNode) => `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.split('/').slice(-2).join('/')}`;
  const fileOf = (n: HeapNode) => n.callFrame.url.split('/').slice(-2).join('/') || n.callFrame.functionName;
  const byFunction = new Map<string, number>();
  const byFile = new Map<string, number>();
  let all = 0;
  // A native (slice, push, Map set...) is named with its caller: "slice" alone does not say whose.
  const visit = (n: HeapNode, caller: HeapNode | undefined) => {
    all += n.selfSize;
    const k = n.callFrame.url === '' && caller !== undefined && caller.callFrame.url !== '' ? `${where(n).trim()} <- ${where(caller)}` : where(n);
    byFunction.set(k, (byFunction.get(k) ?? 0) + n.selfSize);
    byFile.set(fileOf(n), (byFile.get(fileOf(n)) ?? 0) + n.selfSize);
    for (const c of n.children) visit(c, n);
  };
  visit(profile.head, undefined);
  const perEvent = (b: number) => (b / events.length).toFixed(1).padStart(7);
  console.log(`${q!.name}: ${events.length} events, ${perEvent(all).trim()} bytes allocated per event (sampled)`);
  const top = intOption('top', values.top, 1);
  for (const [title, m] of [['bytes per event by function', byFunction], ['bytes per event by file', byFile]] as const) {
    console.log(`--- ${title}`);
    for (const [k, b] of [...m].sort((x, y) => y[1] - x[1]).slice(0, top)) console.log(`${perEvent(b)}  ${k}`);
  }
}
