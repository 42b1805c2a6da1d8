/**
 * `sluice run <job> --input <file> --output <file>`: run a job over a bounded
 * JSON-lines file on the embedded runtime and write one sink to a JSON-lines
 * file. The runtime is deterministic, so the same input gives a byte-identical
 * output file. Rejected lines and dead letters are reported, never dropped.
 */
import type { RejectedInput } from '../transport/sources.ts';
import { withParallelismFlag } from './parallelism-flag.ts';
import { stat, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { JsonLinesFileSink } from '../api/sinks.ts';
import { ConfigError } from '../errors.ts';
import { DASHBOARD_HTML } from '../local/dashboard-page.ts';
import { SinkTap } from '../local/dashboard-sink-tap.ts';
import { defaultCheckpointDir } from '../local/checkpointing.ts';
import { EmbeddedRuntime } from '../local/embedded.ts';
import { startIngestServer } from '../local/ingest-server.ts';
import { DevMonitor, type MonitoredCheckpoints } from './dev-monitor.ts';
import { loadJob, parseParams, pickNode } from './load-job.ts';
import { DEAD_LETTERS_SHOWN, deadLetterCount, describeDeadLetter, lateDroppedCount } from './dead-letter-report.ts';
import { fmt } from './options.ts';
import { prepareRunCheckpoints, type RunCheckpointFlags } from './checkpoints.ts';
import type { Target } from './targets.ts';

export interface RunCommandOptions extends RunCheckpointFlags {
  input: string;
  output: string;
  source?: string;
  sink?: string;
  param?: string[];
  /** `--parallelism`: P, or operator=P (parallelism-flag.ts). */
  parallelism?: string[];
  deadLetters?: string;
  /** Default `embedded`; `local-aws`: the Lambda handlers against local servers (target-local-aws.ts); `assembly`: a cloud assembly's bundles (target-assembly.ts). */
  target?: Target;
  /** assembly: the cloud assembly directory; default a fresh synth into a temporary directory. */
  assembly?: string;
  /** assembly: the stack to run; default the only one. */
  stackName?: string;
  /** Serve the dashboard while the run lasts: true (any free port) or a port. */
  dashboard?: boolean | string | number;
}

/** What `sluice run` ends with (`--json`: this object on stdout). */
export interface RunSummary {
  job: string;
  target: Target;
  /** The --output file, as given. */
  output: string;
  recordsIn: number;
  recordsOut: number;
  rejectedInputs: number;
  deadLetters: number;
  /** Where the runtime parked every dead letter, when it keeps them in a file; else null. */
  deadLetterFile: string | null;
  /** The --dead-letters file written, or null. */
  deadLettersWritten: string | null;
  /** Records windows and joins dropped as late, per operator; null where the runtime does not count them (local-aws, assembly: the handlers' lateDropped metric). */
  lateDropped: Record<string, number> | null;
  durationMs: number;
}

/** Counts what reaches the output file (the summary's "records out"). */
class CountingFileSink<T> extends JsonLinesFileSink<T> {
  written = 0;
  protected override async writeRecords(records: readonly T[]): Promise<void> {
    await super.writeRecords(records);
    this.written += records.length;
  }
}

export async function runCommand(jobPath: string, opts: RunCommandOptions, log: (line: string) => void = (l) => process.stderr.write(l + '\n')): Promise<RunSummary> {
  const params = parseParams(opts.param);
  await requireFile('--input', opts.input);
  if (resolve(opts.output) === resolve(opts.input)) throw new ConfigError('--output', 'a file other than --input', JSON.stringify(opts.output));
  if (opts.deadLetters !== undefined && [opts.input, opts.output].some((f) => resolve(f) === resolve(opts.deadLetters!))) {
    throw new ConfigError('--dead-letters', 'a file other than --input and --output', JSON.stringify(opts.deadLetters));
  }

  const loaded = await loadJob(jobPath, params);
  // local-aws with checkpoints: the run's identity keeps its parallelism (local-aws-parallelism.ts).
  const localAwsPlan =
    opts.target === 'local-aws' && (opts.checkpointInterval !== undefined || opts.resume)
      ? (await import('./local-aws-parallelism.ts')).localAwsRunParallelism(loaded, opts.parallelism, { dir: opts.checkpointDir ?? defaultCheckpointDir(loaded.name), resume: Boolean(opts.resume) })
      : undefined;
  const job = localAwsPlan?.job ?? withParallelismFlag(loaded, opts.parallelism);
  const sources = job.graph.sources();
  const ingest = sources.filter((n) => n.spec.kind === 'source' && n.spec.source.binding.kind === 'ingest');
  const source = pickNode('--source', 'source', sources, opts.source, ingest);
  const sink = pickNode('--sink', 'sink', job.graph.sinks(), opts.sink);
  // run() needs every source bounded: another ingestion stream would wait forever.
  for (const n of sources) {
    if (n === source || n.spec.kind !== 'source') continue;
    const b = n.spec.source.binding;
    if (b.kind === 'ingest' || (b.kind === 'generator' && b.count === undefined)) {
      throw new ConfigError('--source', `a job whose other sources are bounded (sluice run binds only "${source.name}" to --input)`, `unbounded source "${n.name}" (${b.kind})`);
    }
  }

  // With checkpoints the output is transactional: only committed epochs reach it.
  const ckpt = await prepareRunCheckpoints(job, sink.name, { ...opts, localAwsParallelism: localAwsPlan?.parallelism }, log);
  const output = ckpt?.sink ?? new CountingFileSink<unknown>(opts.output);
  const bindings = { sources: { [source.name]: { kind: 'file' as const, path: opts.input } }, sinks: { [sink.name]: output } };
  if (opts.target === 'assembly' && opts.parallelism?.length) throw new ConfigError('--parallelism', 'nothing with --target assembly (its bundles build the job as its module declares it)', JSON.stringify(opts.parallelism.join(' ')));
  if (opts.target !== 'assembly' && (opts.assembly !== undefined || opts.stackName !== undefined)) {
    throw new ConfigError(opts.assembly !== undefined ? '--assembly' : '--stack-name', 'only with --target assembly', `--target ${opts.target ?? 'embedded'}`);
  }
  const localAws = opts.target === 'local-aws' ? new (await import('./target-local-aws.ts')).LocalAwsRun(job, bindings, log, ckpt?.localAws) : undefined;
  const assembly =
    opts.target === 'assembly'
      ? await (await import('./target-assembly.ts')).assemblyRun({ job, jobPath, params: opts.param ?? [], source: source.name, sink: sink.name, input: opts.input, output, assembly: opts.assembly, stackName: opts.stackName, checkpoints: ckpt !== undefined, log })
      : undefined;
  const dashboardFlag = opts.dashboard === undefined || opts.dashboard === false ? undefined : opts.dashboard;
  if (dashboardFlag !== undefined && (opts.target ?? 'embedded') !== 'embedded') {
    throw new ConfigError('--dashboard', 'the embedded target (the dashboard reads the embedded runtime)', `--target ${opts.target}`);
  }
  const tap = dashboardFlag !== undefined ? new SinkTap() : undefined;
  const embeddedBindings = tap ? { ...bindings, sinks: { ...tap.wrapJobSinks(job), [sink.name]: tap.wrap(sink.name, output) } } : bindings;
  const runtime = localAws ?? assembly ?? (ckpt ? await ckpt.runtime(embeddedBindings) : new EmbeddedRuntime(job, embeddedBindings));
  const dashboard = tap && runtime instanceof EmbeddedRuntime ? await serveRunDashboard(job.name, runtime, dashboardFlag!, tap, ckpt?.monitored?.(), log) : undefined;
  const t0 = performance.now();
  let stats: Awaited<ReturnType<typeof runtime.run>>;
  try {
    stats = await runtime.run();
  } finally {
    await dashboard?.close();
  }
  const durationMs = performance.now() - t0;

  const rejected = inInputOrder(runtime.rejectedInputs);
  const dead = runtime.deadLetters;
  if (rejected.length) {
    log(`${fmt.int(rejected.length)} input line(s) rejected${rejected.length > DEAD_LETTERS_SHOWN ? ` (first ${DEAD_LETTERS_SHOWN})` : ''}:`);
    for (const r of rejected.slice(0, DEAD_LETTERS_SHOWN)) log(`  ${r.position}: ${r.error}`);
  }
  const deadFile = (stats as { deadLetterFile?: string }).deadLetterFile;
  if (dead.length) {
    log(`${fmt.int(dead.length)} dead letter(s): records and timers whose user code kept throwing${dead.length > DEAD_LETTERS_SHOWN ? ` (first ${DEAD_LETTERS_SHOWN})` : ''}:`);
    for (const d of dead.slice(0, DEAD_LETTERS_SHOWN)) log(`  ${describeDeadLetter(d)}`);
  }
  if (opts.deadLetters !== undefined) {
    const lines = [
      ...rejected.map((r) => JSON.stringify({ kind: 'rejected', ...r })),
      ...dead.map((d) => JSON.stringify({ kind: 'deadLetter', ...d })),
    ];
    await writeFile(opts.deadLetters, lines.length ? lines.join('\n') + '\n' : '');
  } else if (rejected.length || (dead.length && deadFile === undefined)) {
    log('(write them all with --dead-letters <file>)');
  }

  const summary: RunSummary = {
    job: job.name,
    target: opts.target ?? 'embedded',
    output: opts.output,
    recordsIn: stats.sourceRecords,
    recordsOut: output.written,
    rejectedInputs: rejected.length,
    deadLetters: dead.length,
    deadLetterFile: deadFile ?? null,
    deadLettersWritten: opts.deadLetters ?? null,
    lateDropped: lateOf(stats) ? { ...lateOf(stats) } : null,
    durationMs: Math.round(durationMs),
  };
  const rate = summary.recordsIn / Math.max(durationMs / 1000, 1e-3);
  log(
    `sluice run ${job.name}: ${fmt.int(summary.recordsIn)} records in, ${fmt.int(summary.recordsOut)} out to ${opts.output}, ` +
      `${fmt.int(summary.rejectedInputs)} rejected inputs, ${deadLetterCount(summary.deadLetters, deadFile)}, ` +
      `${summary.lateDropped ? `${lateDroppedCount(summary.lateDropped)}, ` : ''}` +
      `${fmt.secs(durationMs)}, ${fmt.int(rate)} events/s`,
  );
  localAws?.printCost();
  assembly?.printSummary();
  ckpt?.summary();
  return summary;
}

/** `--dashboard [port]`: the dashboard and GET /stats on loopback while the run lasts. */
async function serveRunDashboard(job: string, runtime: EmbeddedRuntime, flag: true | string | number, tap: SinkTap, checkpoints: MonitoredCheckpoints | undefined, log: (line: string) => void) {
  const port = flag === true ? 0 : Number(flag);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError('--dashboard', 'a port from 0 to 65535 (or no value: any free port)', JSON.stringify(flag));
  const startedAt = Date.now();
  let url = '';
  const monitor = new DevMonitor({ job, url: () => url, startedAt, runtime, checkpoints, sinks: tap });
  // A bounded run has no ingestion streams: the server answers / and /stats only.
  const server = await startIngestServer(runtime, { port, stats: () => monitor.snapshot(), page: DASHBOARD_HTML });
  url = server.url;
  log(`dashboard ${url}/  (its numbers: GET ${url}/stats; served until the run ends)`);
  return server;
}

function lateOf(stats: object): Readonly<Record<string, number>> | undefined {
  return (stats as { lateDropped?: Record<string, number> }).lateDropped;
}

async function requireFile(flag: string, path: string): Promise<void> {
  try {
    const s = await stat(path);
    if (!s.isFile()) throw Object.assign(new Error(), { code: 'not a regular file' });
  } catch (err) {
    throw new ConfigError(flag, 'a readable JSON-lines file', `"${path}" (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
}

/**
 * Rejected inputs by source and line: a line the reader could not parse is reported when
 * its chunk is read, one whose timestamp or schema fails when the chunk is stamped.
 */
export function inInputOrder(rejected: readonly RejectedInput[]): RejectedInput[] {
  const sources = new Map<string, number>();
  for (const r of rejected) if (!sources.has(r.source)) sources.set(r.source, sources.size);
  const line = (r: RejectedInput) => Number(/:(\d+)$/.exec(r.position)?.[1] ?? Number.MAX_SAFE_INTEGER);
  return [...rejected].sort((a, b) => sources.get(a.source)! - sources.get(b.source)! || line(a) - line(b));
}
