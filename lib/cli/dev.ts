/**
 * `sluice dev <job>`: the job on the embedded runtime with its HTTP ingestion
 * endpoint, and once a second a compact table on stderr (stdout stays for the
 * job's own stdout sinks). Ctrl-C (or SIGTERM) stops the server, takes a checkpoint of
 * everything accepted, then stops the runtime and the sinks. The runtime slices its work
 * by time (embedded-options.ts `sliceMs`), so the endpoint answers while user code is
 * slow, and refuses with 429 what would pass --max-queued or --max-lag.
 */
import { z } from 'zod';
import { MAX_WATERMARK, MIN_WATERMARK } from '../api/types.ts';
import { EmbeddedRuntime, type RuntimeStats } from '../local/embedded.ts';
import type { IngestRejections } from '../local/ingest-bounds.ts';
import { type IngestServer, startIngestServer } from '../local/ingest-server.ts';
import { devStatus } from './status.ts';
import { loadJob, parseParams } from './load-job.ts';
import { DeadLetterFeed, deadLetterCount, lateDroppedCount } from './dead-letter-report.ts';
import { fmt, validateFlags } from './options.ts';
import { type CheckpointFlags, openDevRuntime } from './checkpoints.ts';
import { EXIT, outcomeCode, type RejectPolicy } from './exit-codes.ts';
import { type DevSummary, rejectedCounts } from './dev-summary.ts';

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
  /** Table refresh period; tests shorten it. */
  intervalMs?: number;
  /** Default `embedded`; `local-aws`: the Lambda handlers against local servers (target-local-aws.ts). */
  target?: Target;
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

/** Events refused: the runtime's (unreadable input) and the endpoint's (400, 429: per event). */
function rejectedTotal(stats: RuntimeStats, endpoint?: IngestRejections): number {
  return stats.rejectedInputs + (endpoint?.events ?? 0);
}

/** "13 rejected (8 invalid, 5 over the bounds (429); 2 requests refused unread)" */
export function describeRejections(stats: RuntimeStats, endpoint?: IngestRejections): string {
  const parts: string[] = [];
  const invalid = (endpoint?.byStatus[400] ?? 0) + stats.rejectedInputs;
  if (invalid) parts.push(`${fmt.int(invalid)} invalid`);
  if (endpoint?.byStatus[429]) parts.push(`${fmt.int(endpoint.byStatus[429])} over the bounds (429)`);
  let text = `${fmt.int(rejectedTotal(stats, endpoint))} rejected`;
  if (parts.length) text += ` (${parts.join(', ')})`;
  if (endpoint?.requests) text += `, ${fmt.int(endpoint.requests)} request${endpoint.requests === 1 ? '' : 's'} refused unread (400/413/415)`;
  return text;
}

/** Renders the live table from successive stats snapshots. */
export class LiveTable {
  private prev?: { at: number; stats: RuntimeStats };
  /** Last time each stage's first operator saw input, for the "no input" hint. */
  private lastInput = new Map<string, number>();

  /** New dead letters, shown under the table (those of a resumed run's checkpoint are not shown again). */
  private readonly letters: DeadLetterFeed;

  constructor(
    private readonly runtime: EmbeddedRuntime,
    /** The endpoint's refusals, counted into "rejected". */
    private readonly endpoint?: () => IngestRejections,
  ) {
    this.letters = new DeadLetterFeed(runtime.deadLetters.length);
  }

  render(now = Date.now()): string[] {
    const stats = this.runtime.stats();
    const dt = this.prev ? (now - this.prev.at) / 1000 : 0;
    const lines = [`-- ${new Date(now).toISOString().slice(11, 19)}  sources ${fmt.int(stats.sourceRecords)} records, queued ${fmt.int(stats.queuedRecords)}` +
      `, ${describeRejections(stats, this.endpoint?.())}, ${deadLetterCount(stats.deadLetters, stats.deadLetterFile)}, ${lateDroppedCount(stats.lateDropped)}`];
    lines.push(`   ${'operator'.padEnd(24)} ${'records in'.padStart(12)} ${'records/s'.padStart(10)}`);
    for (const [name, n] of Object.entries(stats.recordsIn)) {
      const before = this.prev?.stats.recordsIn[name] ?? 0;
      const rate = dt > 0 ? (n - before) / dt : 0;
      lines.push(`   ${name.padEnd(24)} ${fmt.int(n).padStart(12)} ${fmt.int(rate).padStart(10)}`);
    }
    lines.push(`   ${'stage'.padEnd(24)} ${'watermark'.padStart(24)}  lag`);
    for (const stage of this.runtime.plan.stages) {
      const wm = stats.watermarks[stage.name];
      const firstOp = this.runtime.plan.job.nodes[stage.nodes[0]].name;
      if ((stats.recordsIn[firstOp] ?? 0) !== (this.prev?.stats.recordsIn[firstOp] ?? 0) || !this.lastInput.has(stage.name)) this.lastInput.set(stage.name, now);
      const quietMs = now - this.lastInput.get(stage.name)!;
      let shown: string;
      let lag: string;
      if (wm === undefined || wm === MIN_WATERMARK) [shown, lag] = ['-', '-'];
      else if (wm === MAX_WATERMARK) [shown, lag] = ['end of input', '-'];
      else [shown, lag] = [new Date(wm).toISOString(), fmt.span(now - wm)];
      if (quietMs >= 5000) lag += ` (idle: no input for ${fmt.span(quietMs)})`;
      lines.push(`   ${stage.name.padEnd(24)} ${shown.padStart(24)}  ${lag}`);
    }
    lines.push(...this.newDeadLetters(stats));
    this.prev = { at: now, stats };
    return lines;
  }

  /** Lines for the dead letters parked since the last call. */
  newDeadLetters(stats: RuntimeStats = this.runtime.stats()): string[] {
    return this.letters.update(this.runtime.deadLetters, stats.deadLetterFile);
  }
}

export async function devCommand(jobPath: string, opts: DevCommandOptions, log: (line: string) => void = (l) => process.stderr.write(l + '\n')): Promise<DevSummary> {
  const flags = validateFlags(DevFlags, { port: opts.port ?? 8080, host: opts.host ?? '127.0.0.1', maxQueued: opts.maxQueued ?? DEFAULT_MAX_QUEUED, maxLag: opts.maxLag ?? DEFAULT_MAX_LAG_MS }, {
    port: { flag: '--port', expected: 'an integer from 0 to 65535 (0 = any free port)' },
    host: { flag: '--host', expected: 'a host name or IP address to listen on' },
    maxQueued: { flag: '--max-queued', expected: 'a positive integer number of records' },
    maxLag: { flag: '--max-lag', expected: 'a positive integer number of milliseconds' },
  });
  if (opts.target === 'local-aws') return (await import('./target-local-aws.ts')).devLocalAwsCommand(jobPath, flags, opts, log);
  const job = await loadJob(jobPath, parseParams(opts.param));
  // Checkpoints every 10 s by default (savepoints on request); --checkpoint-interval 0 keeps savepoints only.
  const embedded = { sliceMs: DEV_SLICE_MS };
  const checkpointed = await openDevRuntime(job, opts, log, embedded);
  const runtime = checkpointed?.runtime ?? new EmbeddedRuntime(job, embedded);
  await runtime.start();
  const startedAt = Date.now();
  const server: IngestServer = await startIngestServer(runtime, {
    port: flags.port,
    host: flags.host,
    maxQueuedRecords: flags.maxQueued,
    maxLagMs: flags.maxLag,
    stats: () => devStatus(job.name, server.url, startedAt, runtime.stats(), server.rejections(), checkpointed?.lastCheckpoint() ?? null),
  });
  checkpointed?.announce(server.url);

  // Signals are handled before the endpoint is announced: a Ctrl-C right after it still stops gracefully.
  let stopping = false;
  let failed = false;
  let resolveStop!: () => void;
  const stopped = new Promise<void>((r) => (resolveStop = r));
  const stop = (signal: string) => {
    if (stopping) {
      log(`${signal} again: exiting without closing sinks`);
      process.exit(130);
    }
    stopping = true;
    log(`${signal}: stopping...`);
    resolveStop();
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));

  log(`sluice dev: job "${job.name}" on the embedded runtime`);
  log(`ingestion endpoint ${server.url}  (GET ${server.url}/healthz)`);
  const streams = runtime.streams();
  for (const s of streams) log(`  stream "${s}": POST ${server.url}/streams/${encodeURIComponent(s)}/events   (JSON array or JSON lines)`);
  if (streams.length === 0) log('  (the job has no ingestion streams)');
  if (streams[0]) log(`publish a file: sluice publish ${streams[0]} events.jsonl --url ${server.url}`);
  log(`back-pressure: 429 past ${fmt.int(flags.maxQueued)} queued records or ${fmt.span(flags.maxLag)} of lag per stream (--max-queued, --max-lag)`);
  log('Ctrl-C to stop');

  const before = runtime.stats();
  if (before.deadLetters) log(`${deadLetterCount(before.deadLetters, before.deadLetterFile)} from before the restored checkpoint`);
  const table = new LiveTable(runtime, () => server.rejections());
  table.render();
  const interval = opts.intervalMs ?? 1000;
  let nextTick = Date.now() + interval;
  const tick = () => {
    const now = Date.now();
    if (now < nextTick) return false;
    nextTick = now + interval;
    for (const line of table.render(now)) log(line);
    return false;
  };
  // The loop polls tick() after every step, so the table keeps coming even when the runtime never idles.
  const timer = setInterval(tick, interval);
  const running = runtime.loop(tick);
  running.catch((err) => {
    log(`runtime failed: ${(err as Error).message}`);
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
      if (epoch !== null) log(`final checkpoint: epoch ${epoch}`);
    } catch (e) {
      log(`final checkpoint failed: ${(e as Error).message} (--resume replays from the last completed one)`);
    }
  }
  runtime.stop();
  await running.catch(() => undefined);
  await runtime.close();
  checkpointed?.close();
  const s = runtime.stats();
  for (const line of table.newDeadLetters(s)) log(line);
  const endpoint = server.rejections();
  log(`stopped: ${fmt.int(s.sourceRecords)} records ingested, ${describeRejections(s, endpoint)}, ${deadLetterCount(s.deadLetters, s.deadLetterFile)}, ${lateDroppedCount(s.lateDropped)}`);
  return {
    job: job.name,
    target: 'embedded',
    url: server.url,
    recordsIngested: s.sourceRecords,
    rejected: rejectedCounts(s, endpoint),
    deadLetters: s.deadLetters,
    deadLetterFile: s.deadLetterFile ?? null,
    lateDropped: { ...s.lateDropped },
    finalCheckpoint,
    failed,
  };
}

/** The exit code of a stopped `sluice dev`: 429s are not counted (their clients were told to retry). */
export function devExitCode(s: DevSummary, policy: RejectPolicy): number {
  if (s.failed) return EXIT.error;
  return outcomeCode({ rejected: s.rejected.invalid + s.rejected.requestsRefused, deadLetters: s.deadLetters }, policy);
}
