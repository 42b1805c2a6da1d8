/**
 * One query measured in this process: generate the events into memory, run the floor,
 * then the job on the embedded runtime over the same events, and compare the rows.
 *
 * Latency, per output row: wall time from when the runtime's source read the row's
 * trigger event (see floors.ts: the event after which the row is determined) to when
 * the sink received the row. It is the engine's own delay (batching, queues, commits,
 * timers), not event-time waiting: a window's 10 s and the 4 s watermark delay are
 * excluded, because they depend on the query and the replay speed, not on the engine.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IdempotentSink } from '../../lib/api/sinks.ts';
import type { Job } from '../../lib/api/stream.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { EmbeddedRuntime, type EmbeddedOptions } from '../../lib/local/embedded.ts';
import { generateEvent, type NexmarkEvent } from '../../lib/nexmark/index.ts';
import * as hdr from 'hdr-histogram-js';
import type { BenchQuery } from './queries.ts';

export interface MeasureConfig {
  readonly events: number;
  readonly seed: number;
  readonly parallelism?: number;
  /** Events run through both sides first (JIT warm-up), not measured. */
  readonly warmup: number;
  /**
   * Then full passes of each side over all the events before the measured runs (JIT
   * warm-up, as JMH's warm-up iterations), at least this many. The first pass of each
   * side is reported as the cold ratio. 0: measure cold (no passes, whatever warmupMs).
   */
  readonly warmupRuns: number;
  /**
   * And at least this much CPU time (ms) in the runtime's warm-up passes (default
   * WARMUP_MS): V8 optimises a function once it has run enough, and code that runs a few
   * hundred times per pass (per chunk, per commit, per checkpoint) gets there only after
   * many short passes; its compiles, on a background thread, count in the process's CPU
   * time, in whichever pass they fall.
   */
  readonly warmupMs?: number;
  /** Checkpoints every this many ms (local driver, snapshots in a temporary directory); undefined: off. */
  readonly checkpointIntervalMs?: number;
}

export interface QueryResult {
  query: string;
  title: string;
  events: number;
  parallelism: number;
  checkpoints: string;
  runtime: {
    /** Checkpoints completed during the measured run. */
    checkpoints: number;
    durationMs: number;
    eventsPerSec: number;
    /** Events per CPU-second of the whole process (all threads: GC included), Flink's "throughput/cores". */
    eventsPerCoreSec: number;
    coresUsed: number;
    results: number;
    commits: number;
    latencyMs: { p50: number; p99: number; max: number };
    peakRssBytes: number;
    /** Peak heap used during a run above the heap used when it started (the largest over the measured runs). */
    heapGrowthBytes: number;
  };
  floor: { durationMs: number; eventsPerSec: number; eventsPerCoreSec: number; results: number };
  /**
   * Runtime over floor, both in events per CPU-second: other load on the machine
   * then changes neither side (wall-clock rates are reported too).
   */
  ratio: number;
  /** The same ratio from the first full pass of each side (cold JIT), when warmupRuns > 0. */
  coldRatio?: number;
  flinkPerCore: number;
  resultsMatch: boolean;
  mismatch?: string;
}

/**
 * The runtime, with the local checkpoint driver when an interval is set: snapshots,
 * manifests and the coordinator's files go to a temporary directory, not fsynced (the
 * bench measures the runtime's work, not the disk's flush latency).
 */
async function openRuntime(job: Job, options: EmbeddedOptions, cfg: MeasureConfig): Promise<{ runtime: EmbeddedRuntime; cleanup: () => void; checkpoints: () => number }> {
  if (cfg.checkpointIntervalMs === undefined) return { runtime: new EmbeddedRuntime(job, options), cleanup: () => {}, checkpoints: () => 0 };
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-ck-'));
  const opened = await openCheckpointedRuntime(job, options, { dir, intervalMs: cfg.checkpointIntervalMs, durable: false, start: 'fresh' });
  return { runtime: opened.runtime, cleanup: () => rmSync(dir, { recursive: true, force: true }), checkpoints: () => opened.checkpoints.driver.completed.length };
}

export const checkpointLabel = (cfg: MeasureConfig) => (cfg.checkpointIntervalMs === undefined ? 'off' : `every ${cfg.checkpointIntervalMs} ms`);

/**
 * Samples memory at most every 100 ms; also ticked from the source, as a busy runtime may
 * not yield to timers. Heap growth is per run: the peak heap used during a run minus the
 * heap used when it started (so the floor's rows between runs do not count).
 */
class MemorySampler {
  private last = 0;
  private timer?: NodeJS.Timeout;
  private base = 0;
  peakRss = 0;
  peakGrowth = 0;
  start(): void {
    this.base = process.memoryUsage().heapUsed;
    this.sample();
    this.timer = setInterval(() => this.tick(), 100);
  }
  tick(): void {
    if (performance.now() - this.last >= 100) this.sample();
  }
  stop(): void {
    clearInterval(this.timer);
    this.sample();
  }
  private sample(): void {
    this.last = performance.now();
    const m = process.memoryUsage();
    if (m.rss > this.peakRss) this.peakRss = m.rss;
    if (m.heapUsed - this.base > this.peakGrowth) this.peakGrowth = m.heapUsed - this.base;
  }
}

/**
 * Receives the job's rows with their arrival times and keeps them, as the floor keeps
 * its rows; they are compared with the floor's after the run, outside the measured time.
 */
class BenchSink extends IdempotentSink<unknown> {
  readonly kind = 'bench';
  times = new Float64Array(1024);
  count = 0;
  readonly kept: unknown[] = [];
  protected writeRecords(records: readonly unknown[]): void {
    const now = performance.now();
    if (this.count + records.length > this.times.length) {
      const t = new Float64Array(Math.max(this.times.length * 2, this.count + records.length));
      t.set(this.times);
      this.times = t;
    }
    for (const r of records) {
      this.kept.push(r);
      this.times[this.count++] = now;
    }
  }
}

function shallowEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) if ((a as Record<string, unknown>)[k] !== (b as Record<string, unknown>)[k]) return false;
  return true;
}

const BLOCK = 8; // read times are kept per 256 events: a source pull reads whole blocks at once

/**
 * The bench's source: the in-memory events, one slice per pull (generateBatch, as a
 * source reading a batch of records at once), and the time each block of 256 events was
 * read (the pull that reads its first event), for the latency of the rows it triggers.
 */
export function replaySource(events: readonly NexmarkEvent[], readAt?: Float64Array, sampler?: { tick(): void }) {
  const mark = (start: number, end: number) => {
    if (!readAt) return;
    const now = performance.now();
    for (let b = (start + (1 << BLOCK) - 1) >> BLOCK; b << BLOCK < end; b++) readAt[b] = now;
    sampler?.tick();
  };
  return {
    kind: 'generator' as const,
    count: events.length,
    generate: (n: number) => {
      if ((n & ((1 << BLOCK) - 1)) === 0) mark(n, n + 1);
      return events[n];
    },
    generateBatch: (start: number, end: number) => {
      mark(start, end);
      return events.slice(start, end);
    },
  };
}

async function runOnce(q: BenchQuery, events: readonly NexmarkEvent[], cfg: MeasureConfig, sampler?: MemorySampler) {
  const readAt = new Float64Array((events.length >> BLOCK) + 1);
  const sink = new BenchSink();
  const { runtime, cleanup, checkpoints } = await openRuntime(q.job(cfg.parallelism), {
    sources: { events: replaySource(events, readAt, sampler) },
    sinks: { results: sink },
  }, cfg);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const stats = await runtime.run();
  const durationMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const completed = checkpoints();
  cleanup();
  return { sink, readAt, durationMs, cpuMs: (cpu.user + cpu.system) / 1000, stats, parallelism: runtime.plan.job.parallelism, checkpoints: completed };
}

function runFloor(q: BenchQuery, events: readonly NexmarkEvent[]) {
  const rows: unknown[] = [];
  const triggers: number[] = [];
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  q.floor(events, (row, trigger) => {
    rows.push(row);
    triggers.push(trigger);
  });
  const durationMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  return { rows, triggers, durationMs, cpuMs: (cpu.user + cpu.system) / 1000 };
}

export function generate(count: number, seed: number): NexmarkEvent[] {
  const events: NexmarkEvent[] = new Array(count);
  for (let n = 0; n < count; n++) events[n] = generateEvent(n, { seed });
  return events;
}

const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});

/** Whether a run's rows equal the floor's (ordered queries were compared on arrival), and each row's latency. */
function check(q: BenchQuery, floor: ReturnType<typeof runFloor>, run: Awaited<ReturnType<typeof runOnce>>) {
  const { sink, readAt } = run;
  let mismatch: string | undefined;
  const latencies = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: 3 });
  const record = (i: number, trigger: number) => latencies.recordValue(Math.max(1, Math.round((sink.times[i] - readAt[trigger >> BLOCK]) * 1000)));
  if (sink.count !== floor.rows.length) mismatch = `${sink.count} rows, the floor has ${floor.rows.length}`;
  if (q.ordered) {
    const at = sink.kept.findIndex((r, i) => !shallowEqual(r, floor.rows[i]));
    if (at >= 0) mismatch ??= `row ${at} differs: ${JSON.stringify(floor.rows[at])} expected`;
    for (let i = 0; i < Math.min(sink.count, floor.triggers.length); i++) record(i, floor.triggers[i]);
  } else {
    const pending = new Map<string, number[]>();
    floor.rows.forEach((r, i) => {
      const k = JSON.stringify(r);
      const list = pending.get(k);
      if (list) list.push(floor.triggers[i]);
      else pending.set(k, [floor.triggers[i]]);
    });
    sink.kept.forEach((r, i) => {
      const trigger = pending.get(JSON.stringify(r))?.shift();
      if (trigger === undefined) mismatch ??= `unexpected row ${JSON.stringify(r)}`;
      else record(i, trigger);
    });
  }
  return { mismatch, latencies };
}

/**
 * The runtime's warm-up CPU time by default: Q2's runtime (~20 ms per pass) was still
 * being compiled after 25 passes, in passes of 20-45 ms (with 5 passes of warm-up its
 * measured runs fell there), and settled at 16-20 ms after about 40 (with
 * --trace-opt). Queries whose passes take 400 ms or more have it from five passes.
 */
export const WARMUP_MS = 2000;

/** Measured runs of each side: the best (least CPU) counts, as short runs are skewed by one descheduling. */
export const RUNS = 5;

/**
 * CPU time a measured run should last at least: a run of a fast query is several passes
 * over the events, back to back, and counts their mean (sustained throughput, GC
 * included). With single passes, the best of five picked a pass that no young GC hit
 * (the runtime's Q8 pass is ~150 ms, a few scavenges), and a floor pass right after a
 * runtime pass paid for the runtime's garbage: both favoured the runtime (Q8 0.32 -> 0.25
 * when runs became several passes).
 */
export const MIN_RUN_CPU_MS = 200;

/** Passes per measured run for a side whose pass took `cpuMs` (at most 50). */
export function passesPerRun(cpuMs: number): number {
  return Math.max(1, Math.min(50, Math.ceil(MIN_RUN_CPU_MS / Math.max(cpuMs, 0.1))));
}

/** `passes` passes of one side: the last one, with the mean CPU and wall time of all. */
async function meanOf<T extends { cpuMs: number; durationMs: number }>(passes: number, pass: () => T | Promise<T>): Promise<T> {
  let cpuMs = 0;
  let durationMs = 0;
  let last: T | undefined;
  for (let i = 0; i < passes; i++) {
    last = await pass();
    cpuMs += last.cpuMs;
    durationMs += last.durationMs;
  }
  return { ...last!, cpuMs: cpuMs / passes, durationMs: durationMs / passes };
}

/**
 * The two sides alternate, pass by pass (floor, runtime, floor, runtime, ...), in the
 * warm-up passes and in the measured runs: both see the same heap (where the events lie
 * after the runtime's collections moved them: the floors are memory-bound, 10-100 ns per
 * event) and the same load on the machine. Running all the floor's passes first, as this
 * bench used to, measured the floor on a freshly generated heap and the runtime on
 * another, and gave the floor fewer passes than it needs to settle (Q7's: five).
 */
export async function measure(q: BenchQuery, events: readonly NexmarkEvent[], cfg: MeasureConfig): Promise<QueryResult> {
  // One forced GC after generating the events, before any pass, never later: a forced full
  // GC slows the runs after it (BENCHMARKS.md, Method), the runtime's far more than the floor's.
  gc();
  if (cfg.warmup > 0) {
    const head = events.slice(0, Math.min(cfg.warmup, events.length));
    runFloor(q, head);
    await runOnce(q, head, cfg);
  }
  let coldRatio: number | undefined;
  // Passes per measured run, from each side's last warm-up pass (one without warm-up passes).
  let floorPasses = 1;
  let runtimePasses = 1;
  const warmupMs = cfg.warmupRuns > 0 ? (cfg.warmupMs ?? WARMUP_MS) : 0;
  let warmedMs = 0;
  for (let i = 0; i < cfg.warmupRuns || warmedMs < warmupMs; i++) {
    const f = runFloor(q, events);
    const r = await runOnce(q, events, cfg);
    if (i === 0) coldRatio = f.cpuMs / r.cpuMs;
    warmedMs += r.cpuMs;
    floorPasses = passesPerRun(f.cpuMs);
    runtimePasses = passesPerRun(r.cpuMs);
  }
  const sampler = new MemorySampler();
  // Best of RUNS runs per side (a run: passesPerRun passes); the rows of each run's last runtime pass are checked against its floor's.
  let floor: ReturnType<typeof runFloor> | undefined;
  let best: Awaited<ReturnType<typeof runOnce>> | undefined;
  let checked: ReturnType<typeof check> | undefined;
  let mismatch: string | undefined;
  for (let i = 0; i < RUNS; i++) {
    const f = await meanOf(floorPasses, () => runFloor(q, events));
    if (!floor || f.cpuMs < floor.cpuMs) floor = f;
    sampler.start();
    const again = await meanOf(runtimePasses, () => runOnce(q, events, cfg, sampler));
    sampler.stop();
    const c = check(q, f, again);
    mismatch ??= c.mismatch;
    if (!best || again.cpuMs < best.cpuMs) {
      best = again;
      checked = c;
    }
  }
  const run = best!;
  const fl = floor!;
  const { sink } = run;
  const { latencies } = checked!;
  const ms = (us: number) => us / 1000;
  const n = events.length;
  const eventsPerSec = n / (run.durationMs / 1000);
  const floorPerSec = n / (fl.durationMs / 1000);
  const perCore = n / (run.cpuMs / 1000);
  const floorPerCore = n / (fl.cpuMs / 1000);
  return {
    query: q.name,
    title: q.title,
    events: n,
    parallelism: run.parallelism,
    checkpoints: checkpointLabel(cfg),
    runtime: {
      checkpoints: run.checkpoints,
      durationMs: run.durationMs,
      eventsPerSec,
      eventsPerCoreSec: perCore,
      coresUsed: run.cpuMs / run.durationMs,
      results: sink.count,
      commits: run.stats.commits,
      latencyMs: { p50: ms(latencies.getValueAtPercentile(50)), p99: ms(latencies.getValueAtPercentile(99)), max: ms(latencies.maxValue) },
      peakRssBytes: sampler.peakRss,
      heapGrowthBytes: sampler.peakGrowth,
    },
    floor: { durationMs: fl.durationMs, eventsPerSec: floorPerSec, eventsPerCoreSec: floorPerCore, results: fl.rows.length },
    ratio: perCore / floorPerCore,
    ...(coldRatio === undefined ? {} : { coldRatio }),
    flinkPerCore: q.flinkPerCore,
    resultsMatch: mismatch === undefined,
    mismatch,
  };
}
