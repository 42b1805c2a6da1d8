/**
 * `sluice demo` (what `npm start` runs): a Nexmark query (--query, default Q5) on the
 * embedded runtime, fed by the Nexmark generator at a fixed rate instead of its ingestion
 * stream. Results go to stdout as they come, live stats to stderr every second,
 * and after --duration a summary. Nexmark event time advances 10 000 events per
 * second, so at 50 000 events/s five seconds of event time pass per second and
 * several windows close per second.
 */
import { z } from 'zod';
import type { Writable } from 'node:stream';
import { IdempotentSink, StreamWriter } from '../api/sinks.ts';
import type { Job } from '../api/stream.ts';
import { MAX_WATERMARK, MIN_WATERMARK } from '../api/types.ts';
import { EmbeddedRuntime } from '../local/embedded.ts';
import { generateEvent } from '../nexmark/index.ts';
import type { HotItem } from '../../examples/nexmark/q5.ts';
import { fmt, validateFlags } from './options.ts';

export interface DemoCommandOptions {
  duration?: string | number;
  eventsPerSecond?: string | number;
  query?: string;
  /** Results to stderr (stdout then carries only the JSON summary the caller prints). */
  json?: boolean;
}

/** What `sluice demo` ends with (`--json`: this object on stdout). */
export interface DemoSummary {
  query: string;
  events: number;
  /** Result records the query emitted. */
  results: number;
  /** Distinct windows those results are of; null for a query without windows. */
  windows: number | null;
  durationMs: number;
  peakRssBytes: number;
}

interface DemoQuery {
  readonly title: string;
  readonly build: () => Promise<Job>;
  /** Results come only at the end of input (Q4's batch semantics): the generator stops after --duration. */
  readonly bounded?: boolean;
  /** Lines for one sink batch of results, and the windows they are of (their windowStart; undefined without windows). */
  readonly format?: (records: readonly unknown[]) => string[];
}

const job = (load: () => Promise<{ default: () => Job }>) => async () => (await load()).default();

/** Every query of examples/nexmark (test/cli/demo.test.ts checks none is missing); each reads `events` and writes `results`. */
const QUERIES: Record<string, DemoQuery> = {
  q0: { title: 'Nexmark Q0 "pass-through": every bid, unchanged', build: job(() => import('../../examples/nexmark/q0.ts')) },
  q1: { title: 'Nexmark Q1 "currency conversion": every bid, its price in euros', build: job(() => import('../../examples/nexmark/q1.ts')) },
  q2: { title: 'Nexmark Q2 "selection": bids on auctions whose id is a multiple of 123', build: job(() => import('../../examples/nexmark/q2.ts')) },
  q3: { title: 'Nexmark Q3 "local item suggestion": category-10 auctions of sellers in OR, ID or CA (an unbounded join)', build: job(() => import('../../examples/nexmark/q3.ts')) },
  q4: {
    title: 'Nexmark Q4 "average selling price per category": emitted once the input ends (the generator stops after --duration)',
    build: job(() => import('../../examples/nexmark/q4.ts')),
    bounded: true,
  },
  q5: {
    title: 'Nexmark Q5 "hot items": the auction(s) with the most bids in each 10 s window, sliding every 2 s',
    build: job(() => import('../../examples/nexmark/q5.ts')),
    format(records) {
      // One window's ties arrive in one batch (one timer fires them), so group them into one line.
      const byWindow = new Map<number, HotItem[]>();
      for (const r of records as HotItem[]) {
        const list = byWindow.get(r.windowStart) ?? [];
        list.push(r);
        byWindow.set(r.windowStart, list);
      }
      return [...byWindow.values()].map((items) => {
        const { windowStart, windowEnd, num } = items[0];
        const what = items.length === 1 ? `hot auction ${items[0].auction}` : `hot auctions ${items.map((i) => i.auction).join(', ')}`;
        return `window ${fmt.clock(windowStart)}-${fmt.clock(windowEnd)}  ${what} with ${fmt.int(num)} bids${items.length > 1 ? ' each' : ''}`;
      });
    },
  },
  q7: { title: 'Nexmark Q7 "highest bid": the bid(s) with the highest price in each 10 s tumbling window', build: job(() => import('../../examples/nexmark/q7.ts')) },
  q8: { title: 'Nexmark Q8 "monitor new users": persons who registered and opened an auction in the same 10 s window (a window join)', build: job(() => import('../../examples/nexmark/q8.ts')) },
  q11: { title: 'Nexmark Q11 "user sessions": bids per bidder per session (10 s of inactivity ends one)', build: job(() => import('../../examples/nexmark/q11.ts')) },
};

export const DEMO_QUERIES: readonly string[] = Object.keys(QUERIES);

const DemoFlags = z.object({
  duration: z.coerce.number().positive().max(24 * 3600),
  eventsPerSecond: z.coerce.number().int().positive().max(100_000_000),
  query: z.enum(Object.keys(QUERIES) as [string, ...string[]]),
});

/** Prints each batch of results as readable lines (one JSON line per record unless the query has its own) and counts them. */
class DemoSink extends IdempotentSink<unknown> {
  readonly kind = 'demo';
  results = 0;
  private readonly windowStarts = new Set<number>();
  private windowed = false;
  private readonly out: StreamWriter;
  constructor(
    private readonly format: DemoQuery['format'],
    private readonly stream: Writable,
  ) {
    super();
    this.out = new StreamWriter('demo');
  }
  get windows(): number | null {
    return this.windowed ? this.windowStarts.size : null;
  }
  /** Waits for the stream, so a slow terminal or pipe slows the demo instead of filling memory. */
  protected writeRecords(records: readonly unknown[]): Promise<void> | void {
    this.results += records.length;
    for (const r of records) {
      const start = (r as { windowStart?: unknown }).windowStart;
      if (typeof start === 'number') {
        this.windowed = true;
        this.windowStarts.add(start);
      }
    }
    const lines = this.format ? this.format(records) : records.map((r) => JSON.stringify(r));
    if (lines.length) return this.out.write(this.stream, lines.join('\n') + '\n');
  }
}

export async function demoCommand(opts: DemoCommandOptions, log: (line: string) => void = (l) => process.stderr.write(l + '\n')): Promise<DemoSummary> {
  const flags = validateFlags(DemoFlags, { duration: opts.duration ?? 20, eventsPerSecond: opts.eventsPerSecond ?? 50_000, query: opts.query ?? 'q5' }, {
    duration: { flag: '--duration', expected: 'a positive number of seconds (at most a day)' },
    eventsPerSecond: { flag: '--events-per-second', expected: 'a positive integer' },
    query: { flag: '--query', expected: `one of ${DEMO_QUERIES.join(', ')}` },
  });
  const query = QUERIES[flags.query];
  const results = opts.json ? process.stderr : process.stdout;
  const sink = new DemoSink(query.format, results);
  const count = query.bounded ? Math.max(1, Math.round(flags.duration * flags.eventsPerSecond)) : undefined;
  const runtime = new EmbeddedRuntime(await query.build(), {
    sources: { events: { kind: 'generator', generate: (n: number) => generateEvent(n, { seed: 42 }), ratePerSec: flags.eventsPerSecond, ...(count ? { count } : {}) } },
    sinks: { results: sink },
  });
  log(`sluice demo: ${query.title}`);
  log(
    `embedded runtime, Nexmark generator (seed 42) at ${fmt.int(flags.eventsPerSecond)} events/s for ${flags.duration} s` +
      `${count ? ` (${fmt.int(count)} events)` : ''}; results on ${opts.json ? 'stderr' : 'stdout'}, stats on stderr`,
  );

  const t0 = Date.now();
  const deadline = t0 + flags.duration * 1000;
  let lastEvents = 0;
  let lastAt = t0;
  let nextTick = t0 + 1000;
  const tick = (now: number) => {
    const s = runtime.stats();
    const wms = Object.values(s.watermarks).filter((w) => w !== MIN_WATERMARK && w !== MAX_WATERMARK);
    const wm = wms.length ? Math.min(...wms) : undefined;
    const rate = (s.sourceRecords - lastEvents) / ((now - lastAt) / 1000);
    log(
      `[${String(Math.round((now - t0) / 1000)).padStart(3)} s] ${fmt.int(rate).padStart(7)} events/s  ${fmt.int(s.sourceRecords).padStart(10)} events  ` +
        `watermark ${wm === undefined ? '-' : fmt.clock(wm, true)}  results ${fmt.int(sink.results)}  queued ${fmt.int(s.queuedRecords)}`,
    );
    lastEvents = s.sourceRecords;
    lastAt = now;
    nextTick = now + 1000;
  };
  if (count) {
    // To the end of the (bounded) input; the loop yields to timers between slices.
    const timer = setInterval(() => tick(Date.now()), 1000);
    try {
      await runtime.run();
    } finally {
      clearInterval(timer);
    }
  } else {
    // Called by the runtime after every scheduling step: stats and the deadline do not depend on the loop idling.
    await runtime.loop(() => {
      const now = Date.now();
      if (now >= nextTick) tick(now);
      return now >= deadline;
    });
    runtime.stop();
    await runtime.close();
  }

  const durationMs = Date.now() - t0;
  const events = runtime.stats().sourceRecords;
  const summary: DemoSummary = { query: flags.query, events, results: sink.results, windows: sink.windows, durationMs, peakRssBytes: process.resourceUsage().maxRSS * 1024 };
  const emitted = summary.windows === null ? `${fmt.int(summary.results)} results` : `${fmt.int(summary.windows)} windows emitted (${fmt.int(summary.results)} results)`;
  results.write(
    `demo done: ${fmt.int(events)} events processed in ${fmt.secs(durationMs)} (${fmt.int(events / (durationMs / 1000))} events/s), ` +
      `${emitted}, peak RSS ${fmt.mb(summary.peakRssBytes)}\n`,
  );
  return summary;
}
