/**
 * `sluice dev <job>`: the job on the embedded runtime with its HTTP ingestion endpoint, its
 * dashboard at / and its numbers at GET /stats on the same port, and a live view on stderr
 * (stdout stays for the job's own stdout sinks): redrawn in place in a terminal, a line at most
 * every few seconds elsewhere. Endpoint, dashboard, live view and the stop summary read one
 * snapshot (dev-monitor.ts), so their counters agree. Ctrl-C (or SIGTERM) stops the server, takes
 * a checkpoint of everything accepted, then stops the runtime and the sinks. The runtime slices
 * its work by time (embedded-options.ts `sliceMs`), so the endpoint answers while user code is
 * slow, and refuses with 429 what would pass --max-queued or --max-lag.
 */
import { z } from 'zod';
import { ConfigError } from '../errors.ts';
import { DASHBOARD_HTML } from '../local/dashboard-page.ts';
import { SinkTap } from '../local/dashboard-sink-tap.ts';
import { EmbeddedRuntime, type RuntimeStats } from '../local/embedded.ts';
import type { IngestRejections } from '../local/ingest-bounds.ts';
import { type IngestServer, startIngestServer } from '../local/ingest-server.ts';
import { loadJob, parseParams } from './load-job.ts';
import { withParallelismFlag } from './parallelism-flag.ts';
import { DeadLetterFeed, deadLetterCount } from './dead-letter-report.ts';
import { fmt, validateFlags } from './options.ts';
import { type CheckpointFlags, openDevRuntime } from './checkpoints.ts';
import { EXIT, outcomeCode, type RejectPolicy } from './exit-codes.ts';
import { type DevSummary, rejectedCounts } from './dev-summary.ts';
import { DevMonitor } from './dev-monitor.ts';
import { countersPhrase, describeRejected, type LiveRenderer, liveRenderer } from './dev-live-view.ts';

export type { DevSummary };
import type { Target } from './targets.ts';

export interface DevCommandOptions extends CheckpointFlags {
  port?: string | number;
  host?: string;
  /** Accepted-but-unprocessed records per stream past which requests get a 429 (default 100,000). */
  maxQueued?: string | number;
  /** Age in ms of the oldest unprocessed accepted event at which requests get a 429 (default 10,000). */
  maxLag?: string | number;
  param?: string[];
  /** `--parallelism`: P, or operator=P (parallelism-flag.ts). */
  parallelism?: string[];
  /** Live view refresh period (default 1 s); tests shorten it. */
  intervalMs?: number;
  /** Where the live view and the messages go (default: stderr, redrawn in place when it is a terminal). */
  liveView?: LiveRenderer;
  /** Default `embedded`; `local-aws`: the Lambda handlers against local servers (target-local-aws.ts). */
  target?: Target;
  /** Write the counters as CloudWatch EMF lines to this file (dev-metrics.ts); embedded only. */
  metrics?: string;
}

const DevFlags = z.object({
  port: z.coerce.number().int().min(0).max(65535),
  host: z.string().min(1),
  maxQueued: z.coerce.number().int().positive(),
  maxLag: z.coerce.number().int().positive(),
});

export const DEFAULT_MAX_QUEUED = 100_000;
export const DEFAULT_MAX_LAG_MS = 10_000;
/** The longest stretch of user code between two turns of the event loop (the endpoint's answers wait at most about this). */
export const DEV_SLICE_MS = 20;

/** "13 rejected (8 invalid, 5 over the bounds (429)), 2 requests refused unread (400/413/415)": the runtime's unreadable inputs and the endpoint's refusals. */
export function describeRejections(stats: Pick<RuntimeStats, 'rejectedInputs'>, endpoint: IngestRejections = { events: 0, requests: 0, byStatus: {} }): string {
  return describeRejected(rejectedCounts(stats, endpoint));
}

export async function devCommand(jobPath: string, opts: DevCommandOptions, log: (line: string) => void = (l) => process.stderr.write(l + '\n')): Promise<DevSummary> {
  const flags = validateFlags(DevFlags, { port: opts.port ?? 8080, host: opts.host ?? '127.0.0.1', maxQueued: opts.maxQueued ?? DEFAULT_MAX_QUEUED, maxLag: opts.maxLag ?? DEFAULT_MAX_LAG_MS }, {
    port: { flag: '--port', expected: 'an integer from 0 to 65535 (0 = any free port)' },
    host: { flag: '--host', expected: 'a host name or IP address to listen on' },
    maxQueued: { flag: '--max-queued', expected: 'a positive integer number of records' },
    maxLag: { flag: '--max-lag', expected: 'a positive integer number of milliseconds' },
  });
  if (opts.target === 'local-aws') {
    if (opts.metrics !== undefined) throw new ConfigError('--metrics', 'nothing with --target local-aws (its handlers publish their own metrics)', JSON.stringify(opts.metrics));
    return (await import('./target-local-aws.ts')).devLocalAwsCommand(jobPath, flags, opts, log);
  }
  const view = opts.liveView ?? liveRenderer();
  const say = (line: string) => view.message(line);
  const job = withParallelismFlag(await loadJob(jobPath, parseParams(opts.param)), opts.parallelism);
  const tap = new SinkTap();
  // Checkpoints every 10 s by default (savepoints on request); --checkpoint-interval 0 keeps savepoints only.
  const embedded = { sliceMs: DEV_SLICE_MS, sinks: tap.wrapJobSinks(job) };
  const checkpointed = await openDevRuntime(job, opts, say, embedded, jobPath);
  const runtime = checkpointed?.runtime ?? new EmbeddedRuntime(job, embedded);
  await runtime.start();
  let server: IngestServer | undefined;
  const monitor = new DevMonitor({
    job: job.name,
    url: () => server?.url ?? '',
    startedAt: Date.now(),
    runtime,
    rejections: () => server!.rejections(),
    checkpoints: checkpointed?.monitored,
    sinks: tap,
  });
  server = await startIngestServer(runtime, {
    port: flags.port,
    host: flags.host,
    maxQueuedRecords: flags.maxQueued,
    maxLagMs: flags.maxLag,
    stats: () => monitor.snapshot(),
    page: DASHBOARD_HTML,
  });
  const url = server.url;
  checkpointed?.announce(url);
  const metrics = opts.metrics === undefined ? undefined : new (await import('./dev-metrics.ts')).MetricsFile(opts.metrics, job.name);

  // Signals are handled before the endpoint is announced: a Ctrl-C right after it still stops gracefully.
  let stopping = false;
  let failed = false;
  let resolveStop!: () => void;
  const stopped = new Promise<void>((r) => (resolveStop = r));
  const stop = (signal: string) => {
    if (stopping) {
      say(`${signal} again: exiting without closing sinks`);
      view.done();
      process.exit(130);
    }
    stopping = true;
    say(`${signal}: stopping...`);
    resolveStop();
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));

  say(`sluice dev: job "${job.name}" on the embedded runtime`);
  say(`ingestion endpoint ${url}  (GET ${url}/healthz)`);
  say(`dashboard ${url}/  (its numbers: GET ${url}/stats, or sluice status <job> --json)`);
  if (opts.metrics !== undefined) say(`metrics: CloudWatch embedded metric format lines to ${opts.metrics}`);
  const streams = runtime.streams();
  for (const s of streams) say(`  stream "${s}": POST ${url}/streams/${encodeURIComponent(s)}/events   (JSON array or JSON lines)`);
  if (streams.length === 0) say('  (the job has no ingestion streams)');
  if (streams[0]) say(`publish a file: sluice publish ${streams[0]} events.jsonl --url ${url}`);
  say(`back-pressure: 429 past ${fmt.int(flags.maxQueued)} queued records or ${fmt.span(flags.maxLag)} of lag per stream (--max-queued, --max-lag)`);
  say('Ctrl-C to stop');

  const before = runtime.stats();
  if (before.deadLetters) say(`${deadLetterCount(before.deadLetters, before.deadLetterFile)} from before the restored checkpoint`);
  // New dead letters scroll above the view (those of a resumed run's checkpoint are not shown again).
  const letters = new DeadLetterFeed(runtime.deadLetters.length);
  const refresh = (now = Date.now()) => {
    const snapshot = monitor.snapshot(now);
    for (const line of letters.update(runtime.deadLetters, snapshot.deadLetterFile ?? undefined)) say(line);
    view.frame(snapshot);
    metrics?.write(snapshot);
    return snapshot;
  };
  refresh();
  const interval = opts.intervalMs ?? 1000;
  let nextTick = Date.now() + interval;
  const tick = () => {
    const now = Date.now();
    if (now < nextTick) return false;
    nextTick = now + interval;
    refresh(now);
    return false;
  };
  // The loop polls tick() after every step, so the view keeps coming even when the runtime never idles.
  const timer = setInterval(tick, interval);
  const running = runtime.loop(tick);
  running.catch((err) => {
    say(`runtime failed: ${(err as Error).message}`);
    process.exitCode = 1;
    failed = true;
    resolveStop();
  });
  await stopped;
  clearInterval(timer);
  // Requests in flight are answered first; then a checkpoint of everything accepted, so that
  // --resume continues from here (the loop must still run to take it).
  await server.close();
  let finalCheckpoint: number | null = null;
  if (checkpointed && !failed) {
    try {
      const epoch = await checkpointed.finalCheckpoint();
      finalCheckpoint = epoch;
      if (epoch !== null) say(`final checkpoint: epoch ${epoch}`);
    } catch (e) {
      say(`final checkpoint failed: ${(e as Error).message} (--resume replays from the last completed one)`);
    }
  }
  runtime.stop();
  await running.catch(() => undefined);
  await runtime.close();
  checkpointed?.close();
  // The last frame and the summary: one snapshot.
  const last = refresh();
  view.done();
  log(`stopped: ${countersPhrase(last)}`);
  return {
    job: job.name,
    target: 'embedded',
    url,
    recordsIngested: last.recordsIngested,
    rejected: last.rejected,
    deadLetters: last.deadLetters,
    deadLetterFile: last.deadLetterFile,
    lateDropped: last.lateDropped,
    shed: last.shed,
    finalCheckpoint,
    failed,
  };
}

/** The exit code of a stopped `sluice dev`: 429s are not counted (their clients were told to retry). */
export function devExitCode(s: DevSummary, policy: RejectPolicy): number {
  if (s.failed) return EXIT.error;
  return outcomeCode({ rejected: s.rejected.invalid + s.rejected.requestsRefused, deadLetters: s.deadLetters }, policy);
}
