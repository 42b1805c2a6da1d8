/**
 * `npx tsx bench/checkpoints.ts` (and a section of `npm run bench`): what checkpoints cost on the embedded runtime. The same
 * Nexmark query over the same events in memory, in the same process, alternately with
 * checkpoints off and every `--interval` ms (default 1000, the local driver, files in a
 * temporary directory, fsynced unless --no-fsync), `--rounds` times each; then:
 * throughput on/off (medians; the ratio is the figure), checkpoint duration p50/p99
 * (barrier injection to the last ack, hdr-histogram) and snapshot bytes per epoch.
 *
 *   npx tsx bench/checkpoints.ts [--query q5] [--events 600000] [--interval 1000] [--rounds 3] [--no-fsync] [--json]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as hdr from 'hdr-histogram-js';
import { IdempotentSink } from '../lib/api/sinks.ts';
import type { CheckpointStats } from '../lib/checkpoint/driver.ts';
import { openCheckpointedRuntime } from '../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../lib/local/committed-sink.ts';
import { EmbeddedRuntime } from '../lib/local/embedded.ts';
import { generateEvent, type NexmarkEvent } from '../lib/nexmark/index.ts';
import { QUERIES } from './nexmark/queries.ts';

/** Counts rows (checkpoints off); the checkpointed run writes a committed file instead. */
class CountSink extends IdempotentSink<unknown> {
  readonly kind = 'count';
  n = 0;
  protected writeRecords(records: readonly unknown[]): void {
    this.n += records.length;
  }
}

export interface CheckpointBenchOptions {
  readonly query: string;
  readonly events: number;
  readonly intervalMs: number;
  readonly rounds: number;
  /** fsync snapshots, pointers and the committed output. */
  readonly durable: boolean;
}

export interface CheckpointBenchResult {
  readonly query: string;
  readonly events: number;
  readonly intervalMs: number;
  readonly fsync: boolean;
  readonly rounds: number;
  readonly offEventsPerSec: number;
  readonly onEventsPerSec: number;
  readonly ratio: number;
  readonly perCoreRatio: number;
  readonly checkpointsPerRun: number;
  readonly durationP50Ms: number;
  readonly durationP99Ms: number;
  readonly snapshotBytesPerEpochMedian: number;
  readonly snapshotBytesPerEpochMax: number;
  readonly restoreBytesLast: number;
}

interface Run {
  readonly ms: number;
  readonly cpuMs: number;
  readonly rows: number;
  readonly checkpoints: CheckpointStats[];
}

async function runOnce(o: CheckpointBenchOptions, events: readonly NexmarkEvent[], n: number, checkpoints: boolean): Promise<Run> {
  const { intervalMs, durable } = o;
  const query = QUERIES.find((q) => q.name === o.query)!;
  const source = { events: { kind: 'generator' as const, count: n, generate: (i: number) => events[i] } };
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-ck-'));
  try {
    const job = query.job(undefined);
    let runtime: EmbeddedRuntime;
    let stats: () => CheckpointStats[] = () => [];
    let rows: () => number;
    if (checkpoints) {
      const sink = new CommittedFileSink<unknown>(join(dir, 'out.jsonl'), join(dir, 'ck', 'sinks', 'results'), durable);
      const opened = await openCheckpointedRuntime(job, { sources: source, sinks: { results: sink } }, { dir: join(dir, 'ck'), intervalMs, durable, sinks: [sink] });
      runtime = opened.runtime;
      stats = () => opened.checkpoints.driver.completed;
      rows = () => sink.committed().records;
    } else {
      const sink = new CountSink();
      runtime = new EmbeddedRuntime(job, { sources: source, sinks: { results: sink } });
      rows = () => sink.n;
    }
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await runtime.run();
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    return { ms, cpuMs: (cpu.user + cpu.system) / 1000, rows: rows(), checkpoints: stats() };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Throughput with checkpoints off and on (alternating rounds, same events), checkpoint durations and snapshot sizes. */
export async function benchCheckpoints(o: CheckpointBenchOptions): Promise<CheckpointBenchResult> {
  const query = QUERIES.find((q) => q.name === o.query);
  if (!query || !(o.events > 0) || !(o.intervalMs > 0) || !(o.rounds > 0)) {
    throw new Error(`bench/checkpoints: expected a query of ${QUERIES.map((q) => q.name).join(', ')}, positive events, interval and rounds; received ${JSON.stringify(o)}`);
  }
  const count = o.events;
  const events: NexmarkEvent[] = Array.from({ length: count }, (_, n) => generateEvent(n, { seed: 42 }));
  // Warm-up of both paths over all the events, so neither pays for the JIT alone. No
  // forced GC between rounds: after one, the next run took several times the CPU (BENCHMARKS.md, Method).
  await runOnce(o, events, count, false);
  await runOnce(o, events, count, true);
  const off: Run[] = [];
  const on: Run[] = [];
  for (let r = 0; r < o.rounds; r++) {
    off.push(await runOnce(o, events, count, false));
    on.push(await runOnce(o, events, count, true));
  }
  if (new Set([...off, ...on].map((r) => r.rows)).size !== 1) {
    throw new Error(`bench/checkpoints: runs disagree on the rows: ${[...off, ...on].map((r) => r.rows).join(', ')}`);
  }
  const durations = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 3_600_000, numberOfSignificantValueDigits: 3 });
  const all = on.flatMap((r) => r.checkpoints);
  for (const c of all) durations.recordValue(Math.max(1, c.durationMs));
  const bytes = all.map((c) => c.bytes);
  const rate = (rs: Run[]) => median(rs.map((r) => count / (r.ms / 1000)));
  const perCore = (rs: Run[]) => median(rs.map((r) => count / (r.cpuMs / 1000)));
  return {
    query: query.name,
    events: count,
    intervalMs: o.intervalMs,
    fsync: o.durable,
    rounds: o.rounds,
    offEventsPerSec: Math.round(rate(off)),
    onEventsPerSec: Math.round(rate(on)),
    ratio: Number((rate(on) / rate(off)).toFixed(3)),
    perCoreRatio: Number((perCore(on) / perCore(off)).toFixed(3)),
    checkpointsPerRun: median(on.map((r) => r.checkpoints.length)),
    durationP50Ms: all.length ? durations.getValueAtPercentile(50) : 0,
    durationP99Ms: all.length ? durations.getValueAtPercentile(99) : 0,
    snapshotBytesPerEpochMedian: bytes.length ? median(bytes) : 0,
    snapshotBytesPerEpochMax: bytes.length ? Math.max(...bytes) : 0,
    restoreBytesLast: all.at(-1)?.restoreBytes ?? 0,
  };
}

/** The human-readable report (also printed by `npm run bench`). */
export function checkpointReport(result: CheckpointBenchResult): string[] {
  const f = (n: number) => Math.round(n).toLocaleString('en-US');
  const title = QUERIES.find((q) => q.name === result.query)?.title ?? '';
  return [
    `checkpoints bench: ${result.query} (${title}), ${f(result.events)} events, ${result.rounds} rounds each, checkpoints every ${result.intervalMs} ms${result.fsync ? '' : ' (no fsync)'}`,
    `  throughput off  ${f(result.offEventsPerSec).padStart(10)} events/s`,
    `  throughput on   ${f(result.onEventsPerSec).padStart(10)} events/s   ratio on/off ${result.ratio} (per core ${result.perCoreRatio})`,
    `  checkpoints     ${result.checkpointsPerRun} per run; duration p50 ${result.durationP50Ms} ms, p99 ${result.durationP99Ms} ms`,
    `  snapshot bytes  per epoch median ${f(result.snapshotBytesPerEpochMedian)}, max ${f(result.snapshotBytesPerEpochMax)}; a restore reads ${f(result.restoreBytesLast)}`,
  ];
}

async function cli(): Promise<void> {
  const { values } = parseArgs({
    options: {
      query: { type: 'string', default: 'q5' },
      events: { type: 'string', default: '600000' },
      interval: { type: 'string', default: '1000' },
      rounds: { type: 'string', default: '3' },
      'no-fsync': { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
    },
  });
  let result: CheckpointBenchResult;
  try {
    result = await benchCheckpoints({ query: values.query!, events: Number(values.events), intervalMs: Number(values.interval), rounds: Number(values.rounds), durable: !values['no-fsync'] });
  } catch (e) {
    console.error((e as Error).message);
    process.exit(2);
  }
  if (values.json) console.log(JSON.stringify(result, null, 2));
  else for (const line of checkpointReport(result)) console.log(line);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await cli();
