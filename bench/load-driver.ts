/**
 * An open-loop load of an ingestion endpoint for the benchmarks: a batch of `batch` events
 * every batch/rate seconds for `seconds`, whatever the answers, each batch sent by the
 * ingest client (lib/transport/ingest-client.ts: Idempotency-Key, Retry-After honoured,
 * at most `retries` resends), many in flight at once. Every HTTP answer is timed from the
 * request to its last body byte. When the time is up, batches still waiting out a
 * Retry-After are abandoned (never one in flight: its outcome would be unknown).
 */
import { setMaxListeners } from 'node:events';
import * as hdr from 'hdr-histogram-js';
import { BackPressureError, IngestClient } from '../lib/index.ts';

export interface LoadOptions {
  url: string;
  stream: string;
  /** Events per second offered. */
  rate: number;
  seconds: number;
  batch: number;
  retries: number;
  event: (n: number) => unknown;
  /** Called about every 200 ms while the load runs. */
  sample?: () => void;
}

export interface LoadResult {
  /** Events the schedule offered (first attempts). */
  offered: number;
  /** Answers by HTTP status. */
  statuses: Record<number, number>;
  /** Response times in microseconds, every answer. */
  latency: hdr.Histogram;
  /** Events in 202 answers: accepted (enqueued) + shed + rejected. */
  answered: number;
  accepted: number;
  shed: number;
  rejected: number;
  /** Events of batches still refused (429) after every resend. */
  refused: number;
  /** Events of batches abandoned while waiting out a Retry-After when the time was up. */
  abandoned: number;
  /** Other failures (messages), which the benchmarks report. */
  errors: string[];
  durationMs: number;
}

export async function drive(o: LoadOptions): Promise<LoadResult> {
  const latency = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: 3 });
  const r: LoadResult = { offered: 0, statuses: {}, latency, answered: 0, accepted: 0, shed: 0, rejected: 0, refused: 0, abandoned: 0, errors: [], durationMs: 0 };
  const over = new AbortController();
  // One listener per batch waiting out a Retry-After: many at once under overload.
  setMaxListeners(0, over.signal);
  const timed: typeof fetch = async (input, init) => {
    const t0 = performance.now();
    const res = await fetch(input, init);
    const text = await res.text();
    latency.recordValue(Math.max(1, Math.round((performance.now() - t0) * 1000)));
    r.statuses[res.status] = (r.statuses[res.status] ?? 0) + 1;
    return new Response(text, { status: res.status, headers: res.headers });
  };
  // Waits end early when the load is over; the batch is then abandoned, not resent.
  const sleep = (ms: number) =>
    new Promise<void>((resolve, reject) => {
      if (over.signal.aborted) return reject(over.signal.reason);
      const stop = () => (clearTimeout(t), reject(over.signal.reason));
      const t = setTimeout(() => (over.signal.removeEventListener('abort', stop), resolve()), ms);
      over.signal.addEventListener('abort', stop, { once: true });
    });
  const client = new IngestClient({ url: o.url, maxEventsPerRequest: o.batch, retries: o.retries, fetch: timed, sleep });
  const pending = new Set<Promise<void>>();
  const t0 = performance.now();
  const intervalMs = (o.batch / o.rate) * 1000;
  const sampler = o.sample && setInterval(o.sample, 200);
  let n = 0;
  for (let k = 0; ; k++) {
    const at = t0 + k * intervalMs;
    if (at - t0 >= o.seconds * 1000) break;
    const wait = at - performance.now();
    if (wait > 0) await new Promise((res) => setTimeout(res, wait));
    const events = Array.from({ length: o.batch }, () => o.event(n++));
    r.offered += events.length;
    const sent = client.send(o.stream, events).then(
      (res) => {
        r.answered += res.sent;
        r.accepted += res.accepted;
        r.shed += res.shed.length;
        r.rejected += res.rejected.length;
      },
      (err: unknown) => {
        if (err instanceof BackPressureError) r.refused += events.length;
        else if (over.signal.aborted && err === over.signal.reason) r.abandoned += events.length;
        else r.errors.push((err as Error).message);
      },
    );
    pending.add(sent);
    void sent.then(() => pending.delete(sent));
  }
  over.abort(new Error('load over'));
  await Promise.all(pending);
  if (sampler) clearInterval(sampler);
  r.durationMs = performance.now() - t0;
  return r;
}

/** "p50 x ms, p99 y ms, max z ms" of a histogram in microseconds. */
export function latencyLine(h: hdr.Histogram): string {
  const ms = (us: number) => `${(us / 1000).toFixed(1)} ms`;
  return `p50 ${ms(h.getValueAtPercentile(50))}, p99 ${ms(h.getValueAtPercentile(99))}, max ${ms(h.maxValue)} over ${h.totalCount} answers`;
}
