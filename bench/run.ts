/**
 * `npm run bench`: Nexmark queries on the embedded runtime against a
 * hand-written single-loop TypeScript implementation of the same query over
 * the same events (the floor: what one core does with no framework at all).
 *
 *   npm run bench -- [--events 1000000] [--query q5] [--parallelism 2] [--seed 42] [--json]
 *
 * Events are generated into memory first, so neither side pays for generation
 * or parsing. Throughput counts all events (persons, auctions, bids), as
 * Flink's Nexmark runner does. Memory is sampled every 100 ms while the
 * runtime runs; peak RSS also comes from the kernel (getrusage maxrss).
 * Both sides must produce the same results, or the bench fails.
 */
import { cpus } from 'node:os';
import { parseArgs } from 'node:util';
import { CollectSink } from '../lib/api/sinks.ts';
import type { Job } from '../lib/api/stream.ts';
import { EmbeddedRuntime } from '../lib/local/embedded.ts';
import { generateEvent, type NexmarkEvent } from '../lib/nexmark/index.ts';
import q5, { type HotItem } from '../examples/nexmark/q5.ts';

/** One benchmarked query: the job (with its ingestion source and result sink names) and its floor. */
interface BenchQuery {
  readonly name: string;
  readonly title: string;
  readonly job: (parallelism: number | undefined) => Job;
  readonly source: string;
  readonly sink: string;
  /** The same query as one plain loop; calls emit for every result. */
  readonly floor: (events: readonly NexmarkEvent[], emit: (r: unknown) => void) => void;
  /** Canonical form of one result, to compare both sides as sorted multisets. */
  readonly canonical: (r: unknown) => string;
}

// Q5 floor: counts per (window, auction) in maps, closed by the same 4 s
// bounded-out-of-orderness watermark as the job, ties emitted in auction order.
function q5Floor(sizeMs: number, slideMs: number, delayMs: number) {
  return (events: readonly NexmarkEvent[], emit: (r: HotItem) => void) => {
    const windows = new Map<number, Map<number, number>>();
    let maxTs = -Infinity;
    let nextEnd = Infinity; // earliest end among open windows
    const closeUpTo = (wm: number) => {
      const due = [...windows.keys()].filter((s) => s + sizeMs - 1 <= wm).sort((a, b) => a - b);
      for (const s of due) {
        const counts = windows.get(s)!;
        windows.delete(s);
        let max = 0;
        for (const n of counts.values()) if (n > max) max = n;
        const tied: number[] = [];
        for (const [a, n] of counts) if (n === max) tied.push(a);
        tied.sort((a, b) => a - b);
        for (const auction of tied) emit({ auction, num: max, windowStart: s, windowEnd: s + sizeMs });
      }
      nextEnd = Infinity;
      for (const s of windows.keys()) nextEnd = Math.min(nextEnd, s + sizeMs);
    };
    for (const e of events) {
      const t = e.dateTime;
      if (t > maxTs) {
        maxTs = t;
        if (maxTs - delayMs - 1 >= nextEnd - 1) closeUpTo(maxTs - delayMs - 1);
      }
      if (e.type !== 'bid') continue;
      const rem = t % slideMs;
      for (let s = t - (rem < 0 ? rem + slideMs : rem); s > t - sizeMs; s -= slideMs) {
        let counts = windows.get(s);
        if (!counts) {
          windows.set(s, (counts = new Map()));
          if (s + sizeMs < nextEnd) nextEnd = s + sizeMs;
        }
        counts.set(e.auction, (counts.get(e.auction) ?? 0) + 1);
      }
    }
    closeUpTo(Infinity);
  };
}

const QUERIES: readonly BenchQuery[] = [
  {
    name: 'q5',
    title: 'hot items: sliding window count (10 s / 2 s), max per window',
    job: (parallelism) => q5({ parallelism }),
    source: 'events',
    sink: 'results',
    floor: q5Floor(10_000, 2_000, 4_000) as BenchQuery['floor'],
    canonical: (r) => {
      const h = r as HotItem;
      return `${h.windowStart}|${h.auction}|${h.num}|${h.windowEnd}`;
    },
  },
];

interface MemoryPeaks {
  rssBytes: number;
  heapUsedBytes: number;
  samples: number;
}

/** Samples process memory at most every 100 ms; tick() is also called from the hot path, since a busy runtime may never yield to timers. */
class MemorySampler {
  private last = 0;
  private timer?: NodeJS.Timeout;
  readonly peaks: MemoryPeaks = { rssBytes: 0, heapUsedBytes: 0, samples: 0 };
  start(): void {
    this.sample();
    this.timer = setInterval(() => this.tick(), 100);
  }
  tick(): void {
    if (performance.now() - this.last >= 100) this.sample();
  }
  stop(): MemoryPeaks {
    clearInterval(this.timer);
    this.sample();
    return this.peaks;
  }
  private sample(): void {
    this.last = performance.now();
    const m = process.memoryUsage();
    this.peaks.rssBytes = Math.max(this.peaks.rssBytes, m.rss);
    this.peaks.heapUsedBytes = Math.max(this.peaks.heapUsedBytes, m.heapUsed);
    this.peaks.samples++;
  }
}

interface SideResult {
  durationMs: number;
  eventsPerSec: number;
  results: number;
}

interface QueryResult {
  query: string;
  title: string;
  events: number;
  parallelism: number;
  runtime: SideResult & { peakRssBytes: number; peakHeapUsedBytes: number; maxRssBytes: number; commits: number };
  floor: SideResult;
  /** runtime events/s divided by floor events/s. */
  ratio: number;
  resultsMatch: boolean;
}

async function runQuery(q: BenchQuery, events: readonly NexmarkEvent[], parallelism: number | undefined): Promise<QueryResult> {
  // Floor first: it allocates little, so it barely disturbs the runtime's memory figures.
  const floorOut: unknown[] = [];
  const f0 = performance.now();
  q.floor(events, (r) => floorOut.push(r));
  const floorMs = performance.now() - f0;

  const sink = new CollectSink<unknown>();
  const sampler = new MemorySampler();
  const job = q.job(parallelism);
  const runtime = new EmbeddedRuntime(job, {
    sources: {
      [q.source]: {
        kind: 'generator',
        count: events.length,
        generate: (n: number) => {
          if ((n & 1023) === 0) sampler.tick();
          return events[n];
        },
      },
    },
    sinks: { [q.sink]: sink },
  });
  sampler.start();
  const r0 = performance.now();
  const stats = await runtime.run();
  const runtimeMs = performance.now() - r0;
  const peaks = sampler.stop();

  const a = sink.records.map(q.canonical).sort();
  const b = floorOut.map(q.canonical).sort();
  const resultsMatch = a.length === b.length && a.every((x, i) => x === b[i]);
  const n = events.length;
  const runtimeSide = { durationMs: runtimeMs, eventsPerSec: n / (runtimeMs / 1000), results: sink.records.length };
  const floorSide = { durationMs: floorMs, eventsPerSec: n / (floorMs / 1000), results: floorOut.length };
  return {
    query: q.name,
    title: q.title,
    events: n,
    parallelism: job.graph.parallelism,
    runtime: {
      ...runtimeSide,
      peakRssBytes: peaks.rssBytes,
      peakHeapUsedBytes: peaks.heapUsedBytes,
      maxRssBytes: process.resourceUsage().maxRSS * 1024,
      commits: stats.commits,
    },
    floor: floorSide,
    ratio: runtimeSide.eventsPerSec / floorSide.eventsPerSec,
    resultsMatch,
  };
}

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

const mb = (b: number) => `${(b / 1024 / 1024).toFixed(0)} MB`;
const int = (n: number) => Math.round(n).toLocaleString('en-US');

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      events: { type: 'string' },
      query: { type: 'string', multiple: true },
      parallelism: { type: 'string' },
      seed: { type: 'string' },
      json: { type: 'boolean', default: false },
    },
  });
  const count = intFlag(values.events, 'events', 1_000_000, 1)!;
  const parallelism = intFlag(values.parallelism, 'parallelism', undefined, 1);
  const seed = intFlag(values.seed, 'seed', 42, 0)!;
  const names = values.query ?? QUERIES.map((q) => q.name);
  const selected = names.map((name) => QUERIES.find((q) => q.name === name) ?? fail(`--query: expected one of ${QUERIES.map((q) => q.name).join(', ')}, received "${name}"`));
  const say = values.json ? () => {} : (line: string) => console.log(line);

  say(`generating ${int(count)} Nexmark events (seed ${seed}, 10 000 events/s of event time) ...`);
  const g0 = performance.now();
  const events: NexmarkEvent[] = new Array(count);
  for (let n = 0; n < count; n++) events[n] = generateEvent(n, { seed });
  const generatedMs = performance.now() - g0;
  const baseline = process.memoryUsage();
  say(`  ${(generatedMs / 1000).toFixed(2)} s; after generation: RSS ${mb(baseline.rss)}, heap used ${mb(baseline.heapUsed)} (the input itself)`);

  const results: QueryResult[] = [];
  for (const q of selected) {
    say(`\n${q.name}: ${q.title}`);
    const r = await runQuery(q, events, parallelism);
    results.push(r);
    say(`  embedded runtime (parallelism ${r.parallelism}): ${int(r.runtime.eventsPerSec)} events/s, ${(r.runtime.durationMs / 1000).toFixed(2)} s, ${int(r.runtime.results)} results, ${int(r.runtime.commits)} commits`);
    say(`    peak RSS ${mb(r.runtime.peakRssBytes)} (process max ${mb(r.runtime.maxRssBytes)}), peak heap used ${mb(r.runtime.peakHeapUsedBytes)} (input: ${mb(baseline.heapUsed)})`);
    say(`  floor (hand-written single loop):  ${int(r.floor.eventsPerSec)} events/s, ${(r.floor.durationMs / 1000).toFixed(2)} s, ${int(r.floor.results)} results`);
    say(`  runtime / floor throughput: ${r.ratio.toFixed(3)} (the floor is ${(1 / r.ratio).toFixed(1)}x faster); results ${r.resultsMatch ? 'match' : 'DIFFER'}`);
  }
  if (values.json) {
    console.log(JSON.stringify({ events: count, seed, generatedMs, node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model, results }, null, 2));
  }
  if (results.some((r) => !r.resultsMatch)) {
    console.error('bench: the runtime and the floor disagree on the results');
    process.exit(1);
  }
}

await main();
