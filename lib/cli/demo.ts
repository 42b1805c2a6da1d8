/**
 * `sluice demo` (what `npm start` runs): Nexmark Q5 on the embedded runtime,
 * fed by the Nexmark generator at a fixed rate instead of its ingestion stream.
 * Window results go to stdout as they close, live stats to stderr every second,
 * and after --duration a summary. Nexmark event time advances 10 000 events per
 * second, so at 50 000 events/s five seconds of event time pass per second and
 * several windows close per second.
 */
import { z } from 'zod';
import { IdempotentSink, StreamWriter } from '../api/sinks.ts';
import type { Job } from '../api/stream.ts';
import { MAX_WATERMARK, MIN_WATERMARK } from '../api/types.ts';
import { EmbeddedRuntime } from '../local/embedded.ts';
import { generateEvent } from '../nexmark/index.ts';
import q5, { type HotItem } from '../../examples/nexmark/q5.ts';
import { fmt, validateFlags } from './options.ts';

export interface DemoCommandOptions {
  duration?: string | number;
  eventsPerSecond?: string | number;
  query?: string;
}

export interface DemoSummary {
  events: number;
  windows: number;
  durationMs: number;
  peakRssBytes: number;
}

interface DemoQuery {
  readonly title: string;
  readonly build: () => Job;
  readonly source: string;
  readonly sink: string;
  /** Lines for one sink batch of results. */
  readonly format: (records: readonly unknown[]) => { lines: string[]; windows: number };
}

const QUERIES: Record<string, DemoQuery> = {
  q5: {
    title: 'Nexmark Q5 "hot items": the auction(s) with the most bids in each 10 s window, sliding every 2 s',
    build: () => q5(),
    source: 'events',
    sink: 'results',
    format(records) {
      // One window's ties arrive in one batch (one timer fires them), so group them into one line.
      const byWindow = new Map<number, HotItem[]>();
      for (const r of records as HotItem[]) {
        const list = byWindow.get(r.windowStart) ?? [];
        list.push(r);
        byWindow.set(r.windowStart, list);
      }
      const lines = [...byWindow.values()].map((items) => {
        const { windowStart, windowEnd, num } = items[0];
        const what = items.length === 1 ? `hot auction ${items[0].auction}` : `hot auctions ${items.map((i) => i.auction).join(', ')}`;
        return `window ${fmt.clock(windowStart)}-${fmt.clock(windowEnd)}  ${what} with ${fmt.int(num)} bids${items.length > 1 ? ' each' : ''}`;
      });
      return { lines, windows: byWindow.size };
    },
  },
};

const DemoFlags = z.object({
  duration: z.coerce.number().positive().max(24 * 3600),
  eventsPerSecond: z.coerce.number().int().positive().max(100_000_000),
  query: z.enum(Object.keys(QUERIES) as [string, ...string[]]),
});

/** Prints each batch of results as readable lines and counts windows. */
class DemoSink extends IdempotentSink<unknown> {
  readonly kind = 'demo';
  windows = 0;
  private readonly out = new StreamWriter('demo');
  constructor(private readonly format: DemoQuery['format']) {
    super();
  }
  /** Waits for stdout, so a slow terminal or pipe slows the demo instead of filling memory. */
  protected writeRecords(records: readonly unknown[]): Promise<void> | void {
    const { lines, windows } = this.format(records);
    this.windows += windows;
    if (lines.length) return this.out.write(process.stdout, lines.join('\n') + '\n');
  }
}

export async function demoCommand(opts: DemoCommandOptions, log: (line: string) => void = (l) => process.stderr.write(l + '\n')): Promise<DemoSummary> {
  const flags = validateFlags(DemoFlags, { duration: opts.duration ?? 20, eventsPerSecond: opts.eventsPerSecond ?? 50_000, query: opts.query ?? 'q5' }, {
    duration: { flag: '--duration', expected: 'a positive number of seconds (at most a day)' },
    eventsPerSecond: { flag: '--events-per-second', expected: 'a positive integer' },
    query: { flag: '--query', expected: `one of ${Object.keys(QUERIES).join(', ')}` },
  });
  const query = QUERIES[flags.query];
  const sink = new DemoSink(query.format);
  const runtime = new EmbeddedRuntime(query.build(), {
    sources: { [query.source]: { kind: 'generator', generate: (n: number) => generateEvent(n, { seed: 42 }), ratePerSec: flags.eventsPerSecond } },
    sinks: { [query.sink]: sink },
  });
  log(`sluice demo: ${query.title}`);
  log(`embedded runtime, Nexmark generator (seed 42) at ${fmt.int(flags.eventsPerSecond)} events/s for ${flags.duration} s; results on stdout, stats on stderr`);

  const t0 = Date.now();
  const deadline = t0 + flags.duration * 1000;
  let nextTick = t0 + 1000;
  let lastEvents = 0;
  let lastAt = t0;
  // Called by the runtime after every scheduling step: stats and the deadline do not depend on the loop idling.
  const until = () => {
    const now = Date.now();
    if (now >= nextTick) {
      const s = runtime.stats();
      const wms = Object.values(s.watermarks).filter((w) => w !== MIN_WATERMARK && w !== MAX_WATERMARK);
      const wm = wms.length ? Math.min(...wms) : undefined;
      const rate = (s.sourceRecords - lastEvents) / ((now - lastAt) / 1000);
      log(
        `[${String(Math.round((now - t0) / 1000)).padStart(3)} s] ${fmt.int(rate).padStart(7)} events/s  ${fmt.int(s.sourceRecords).padStart(10)} events  ` +
          `watermark ${wm === undefined ? '-' : fmt.clock(wm, true)}  windows ${fmt.int(sink.windows)}  queued ${fmt.int(s.queuedRecords)}`,
      );
      lastEvents = s.sourceRecords;
      lastAt = now;
      nextTick = now + 1000;
    }
    return now >= deadline;
  };
  await runtime.loop(until);
  runtime.stop();
  await runtime.close();

  const durationMs = Date.now() - t0;
  const events = runtime.stats().sourceRecords;
  const summary: DemoSummary = { events, windows: sink.windows, durationMs, peakRssBytes: process.resourceUsage().maxRSS * 1024 };
  process.stdout.write(
    `demo done: ${fmt.int(events)} events processed in ${fmt.secs(durationMs)} (${fmt.int(events / (durationMs / 1000))} events/s), ` +
      `${fmt.int(sink.windows)} windows emitted, peak RSS ${fmt.mb(summary.peakRssBytes)}\n`,
  );
  return summary;
}
