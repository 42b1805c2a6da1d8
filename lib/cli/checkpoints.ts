/**
 * Checkpoints from the command line:
 * - `sluice run ... --checkpoint-interval <ms> [--crash-after <n>] [--resume]`: a bounded
 *   run whose --output is a transactional file (only committed epochs reach it);
 * - `sluice dev` checkpoints every 10 s by default; `sluice savepoint <job>` asks a
 *   running `dev` for a savepoint (a request file plus SIGUSR2; dev.json names the pid);
 * - `sluice restore <job> --from <epoch|label|dir>`: `run` (with --input) or `dev` from it;
 * - `sluice checkpoints <job>`: retained checkpoints and savepoints.
 */
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { ParallelismOverride } from '../api/logical.ts';
import type { Job } from '../api/stream.ts';
import { fromBytes } from '../checkpoint/codec.ts';
import { type CheckpointStats, POINTER_NAME } from '../checkpoint/driver.ts';
import { DirectoryBlobStore, FilePointerStore, writeFileAtomic } from '../checkpoint/local-storage.ts';
import type { CommitPointer } from '../checkpoint/protocol.ts';
import { ConfigError } from '../errors.ts';
import { type CheckpointingOptions, defaultCheckpointDir, type LocalCheckpointing, openCheckpointedRuntime } from '../local/checkpointing.ts';
import type { LocalAwsCheckpointing, LocalAwsCheckpointOptions } from '../testing/local-aws/checkpointing.ts';
import { CommittedFileSink } from '../local/committed-sink.ts';
import type { EmbeddedOptions } from '../local/embedded-options.ts';
import type { EmbeddedRuntime } from '../local/embedded.ts';
import type { SavepointMeta } from '../local/restore.ts';
import type { MonitoredCheckpoints } from './dev-monitor.ts';
import { loadJob, parseParams } from './load-job.ts';
import { fmt } from './options.ts';
import { checkResumable, checkRestoreSource, recordPlan } from './restore-checks.ts';
import { lazyS3Store, parseS3SavepointUri } from './savepoint-uri.ts';

type Log = (line: string) => void;

/** Checkpoint flags shared by run, dev and restore. */
export interface CheckpointFlags {
  checkpointInterval?: string;
  checkpointDir?: string;
  resume?: boolean;
  /** restore: a retained checkpoint's epoch, a savepoint label or a savepoint directory. */
  from?: string;
  retainCheckpoints?: string;
  /** Tests: no fsync (still atomic against a killed process). */
  noFsync?: boolean;
}

export interface RunCheckpointFlags extends CheckpointFlags {
  crashAfter?: string;
}

function int(flag: string, raw: string | undefined, min: number): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < min) throw new ConfigError(flag, `an integer >= ${min}`, JSON.stringify(raw));
  return n;
}

function checkpointOptions(job: Job, flags: CheckpointFlags, defaultIntervalMs: number | undefined): CheckpointingOptions | undefined {
  const interval = int('--checkpoint-interval', flags.checkpointInterval, 0) ?? defaultIntervalMs;
  if (flags.resume && flags.from !== undefined) throw new ConfigError('--resume', 'either --resume or --from, not both', '--resume and --from');
  if (interval === undefined && !flags.resume && flags.from === undefined) return undefined;
  const retain = int('--retain-checkpoints', flags.retainCheckpoints, 1);
  return {
    dir: flags.checkpointDir ?? defaultCheckpointDir(job.name),
    intervalMs: interval ?? 0,
    start: flags.resume ? 'resume' : flags.from !== undefined ? restoreStart(flags.from) : 'fresh',
    ...(retain ? { retention: { epochs: retain } } : {}),
    durable: !flags.noFsync,
  };
}

/** --from: a checkpoint or savepoint of the checkpoint directory, a savepoint directory, or a savepoint's S3 URI. */
function restoreStart(from: string): NonNullable<CheckpointingOptions['start']> {
  const s3 = parseS3SavepointUri(from);
  return s3 ? { from, store: { blobs: lazyS3Store(s3.bucket), prefix: s3.prefix } } : { from };
}

/** What a checkpointed run read: `input.json` in the checkpoint directory, checked by --resume. */
interface InputFingerprint {
  readonly path: string;
  readonly bytes: number;
  readonly sha256: string;
}

const INPUT_FILE = 'input.json';

async function fingerprintOf(path: string): Promise<InputFingerprint> {
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of createReadStream(path)) {
    hash.update(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  return { path: resolve(path), bytes, sha256: hash.digest('hex') };
}

const describeInput = (f: InputFingerprint) => `${f.path} (${fmt.int(f.bytes)} bytes, sha256 ${f.sha256.slice(0, 12)})`;

/**
 * --resume continues a run over the same input: a checkpoint's cursors are line numbers
 * of the file it read, so another file would resume at a position of a different content.
 * Refuses a file whose content differs (whatever its name); a fresh start records it.
 */
async function checkInput(dir: string, input: string, resuming: boolean): Promise<void> {
  const now = await fingerprintOf(input);
  const file = join(dir, INPUT_FILE);
  if (!resuming || !existsSync(file)) {
    mkdirSync(dir, { recursive: true });
    writeFileAtomic(file, JSON.stringify(now));
    return;
  }
  const then = JSON.parse(readFileSync(file, 'utf8')) as InputFingerprint;
  if (then.sha256 === now.sha256 && then.bytes === now.bytes) return;
  const what = then.bytes !== now.bytes ? `${fmt.int(now.bytes)} bytes instead of ${fmt.int(then.bytes)}` : 'the same size, other content';
  throw new ConfigError(
    '--input',
    `the file the checkpoints in ${dir} were taken of, ${describeInput(then)} (resume with it, or start over without --resume)`,
    `${describeInput(now)}: ${what}`,
  );
}

/** Refusals that name what was looked at: see restore-checks.ts. */
async function checkStart(job: Job, ck: CheckpointingOptions): Promise<void> {
  if (ck.start === 'resume') await checkResumable(ck.dir, job);
  else if (typeof ck.start === 'object' && !ck.start.store) checkRestoreSource(ck.dir, ck.start.from, await listCheckpoints(job.name, ck.dir));
}

/** `sluice run` with checkpoints: the transactional output sink and a runtime factory, or undefined when off. */
export async function prepareRunCheckpoints(
  job: Job,
  sinkName: string,
  opts: RunCheckpointFlags & { input?: string; output: string; target?: string; localAwsParallelism?: ParallelismOverride },
  log: Log,
): Promise<
  | {
      sink: CommittedFileSink<unknown>;
      runtime: (bindings: Omit<EmbeddedOptions, 'checkpoints' | 'restore'>) => Promise<EmbeddedRuntime>;
      /** --target local-aws: what LocalAwsRun passes to the local-AWS runtime. */
      localAws?: LocalAwsRunCheckpoints;
      /** The embedded run's checkpointing, for the dashboard (once the runtime is open). */
      monitored?: () => MonitoredCheckpoints | undefined;
      summary: () => void;
    }
  | undefined
> {
  const crashAfter = int('--crash-after', opts.crashAfter, 1);
  if (crashAfter !== undefined && opts.checkpointInterval === undefined && !opts.resume && opts.from === undefined) {
    throw new ConfigError('--crash-after', 'checkpoints to resume from: --checkpoint-interval <ms> (or --resume, --from)', `--crash-after ${opts.crashAfter} without them`);
  }
  const ck = checkpointOptions(job, opts, undefined);
  if (!ck) return undefined;
  if (opts.target !== 'local-aws') await checkStart(job, ck);
  if (opts.input !== undefined) await checkInput(ck.dir, opts.input, ck.start === 'resume');
  const sink = new CommittedFileSink<unknown>(opts.output, join(ck.dir, 'sinks', sinkName), ck.durable);
  if (opts.target === 'local-aws') return localAwsCheckpoints(sink, ck, crashAfter, opts.localAwsParallelism, log);
  let checkpoints: LocalCheckpointing | undefined;
  return {
    sink,
    monitored: () => checkpoints && { driver: checkpoints.driver, intervalMs: ck.intervalMs || null, dir: ck.dir },
    runtime: async (bindings) => {
      const onSourceRecords =
        crashAfter === undefined
          ? undefined
          : (n: number) => {
              // Abrupt: no cleanup, no flush, as a killed process (the CLI test relies on it).
              if (n >= crashAfter) process.exit(137);
            };
      const opened = await openCheckpointedRuntime(job, { ...bindings, onSourceRecords }, { ...ck, sinks: [sink] });
      recordPlan(ck.dir, job);
      checkpoints = opened.checkpoints;
      if (opened.checkpoints.restoredEpoch) log(`restored checkpoint ${opened.checkpoints.restoredEpoch} from ${ck.dir}${typeof ck.start === 'object' ? ` (--from ${ck.start.from})` : ''}`);
      else if (opened.checkpoints.resumed === 'start') log(`no checkpoint to resume in ${ck.dir}; starting from the beginning of --input`);
      return opened.runtime;
    },
    summary: () => {
      if (!checkpoints) return;
      const d = checkpoints.driver;
      const c = d.completed;
      const ms = c.map((s) => s.durationMs).sort((a, b) => a - b);
      log(
        `checkpoints: ${c.length} completed in this run (last epoch ${d.state.lastCompleted?.epoch ?? 0}, ${d.aborted.length} aborted)` +
          (ms.length ? `, duration p50 ${ms[Math.floor(ms.length / 2)]} ms, max ${ms.at(-1)} ms` : '') +
          `; ${ck.dir}`,
      );
      checkpoints.close();
    },
  };
}

export interface LocalAwsRunCheckpoints {
  readonly checkpoints: LocalAwsCheckpointOptions;
  readonly onSourceRecords?: (n: number) => void;
  /** Called with the finished run's checkpointing (summary line). */
  done(c: LocalAwsCheckpointing | undefined): void;
}

function localAwsCheckpoints(sink: CommittedFileSink<unknown>, ck: CheckpointingOptions, crashAfter: number | undefined, parallelism: ParallelismOverride | undefined, log: Log) {
  if (typeof ck.start === 'object') {
    throw new ConfigError('--from', `--target embedded; for local-aws, restore in place first (sluice restore <job> --target local-aws --from ${ck.start.from}), then run with --resume`, `--from ${ck.start.from} with --target local-aws`);
  }
  let finished: LocalAwsCheckpointing | undefined;
  // The crash waits for a checkpoint of this run as well as the records: the feeder can run
  // ahead of the first epoch, and a crash before it leaves nothing to resume or rescale.
  let fed = 0;
  let committed = false;
  const crash = () => crashAfter !== undefined && committed && fed >= crashAfter && process.exit(137); // abrupt: no cleanup, no flush
  const localAws: LocalAwsRunCheckpoints = {
    checkpoints: {
      dir: ck.dir,
      intervalMs: ck.intervalMs,
      start: ck.start === 'resume' ? 'resume' : 'fresh',
      sinks: [sink],
      log,
      ...(parallelism ? { parallelism } : {}),
      ...(crashAfter === undefined ? {} : { onCommitted: () => ((committed = true), crash()) }),
    },
    onSourceRecords: crashAfter === undefined ? undefined : (n) => ((fed = n), crash()),
    done: (c) => (finished = c),
  };
  return {
    sink,
    localAws,
    runtime: () => Promise.reject(new ConfigError('--target', 'embedded for an embedded runtime', 'local-aws')),
    summary: () => {
      if (!finished) return;
      const ids = finished.loop.committed;
      log(`checkpoints: ${ids.length} completed in this run (last epoch ${ids.at(-1) ?? finished.restoredEpoch}, ${finished.loop.aborted.length} aborted); run ${finished.identity.runId}; ${ck.dir}`);
    },
  };
}

/** `sluice dev` with checkpoints (every 10 s unless --checkpoint-interval 0) and savepoints on request. */
export async function openDevRuntime(
  job: Job,
  flags: CheckpointFlags,
  log: Log,
  embedded: Omit<EmbeddedOptions, 'checkpoints' | 'restore'> = {},
  /** The job module as the user named it, for the savepoint command printed. */
  jobPath = '<job>',
): Promise<{ runtime: EmbeddedRuntime; finalCheckpoint: () => Promise<number | null>; lastCheckpoint: () => number | null; monitored: MonitoredCheckpoints; announce: (url: string) => void; close: () => void } | undefined> {
  const ck = checkpointOptions(job, flags, 10_000);
  if (!ck) return undefined;
  await checkStart(job, ck);
  const { runtime, checkpoints } = await openCheckpointedRuntime(job, embedded, ck);
  recordPlan(ck.dir, job);
  const info = join(ck.dir, 'dev.json');
  const devInfo = { pid: process.pid, job: job.name, startedAt: Date.now() };
  writeFileAtomic(info, JSON.stringify(devInfo));
  const requests = join(ck.dir, 'savepoint-requests');
  mkdirSync(requests, { recursive: true });
  const serve = () => {
    for (const name of readdirSync(requests).filter((n) => n.endsWith('.json'))) {
      const label = name.slice(0, -'.json'.length);
      rmSync(join(requests, name), { force: true });
      checkpoints.savepoint(label).then(
        (r) => log(`savepoint "${label}" written to ${r.dir} (epoch ${r.stats.epoch}, ${fmt.int(r.stats.restoreBytes)} bytes)`),
        (e) => {
          log(`savepoint "${label}" failed: ${(e as Error).message}`);
          writeFileSync(join(requests, `${label}.error`), (e as Error).message);
        },
      );
    }
  };
  process.on('SIGUSR2', serve);
  if (checkpoints.resumed === 'start') log(`no checkpoint to resume in ${ck.dir}; state starts empty and the events the endpoint logged are replayed`);
  log(
    `checkpoints: ${ck.intervalMs ? `every ${fmt.span(ck.intervalMs)}` : 'at stop (and savepoints)'} in ${ck.dir}${checkpoints.restoredEpoch ? `, restored epoch ${checkpoints.restoredEpoch}` : ''}; savepoint: sluice savepoint ${shellWord(jobPath)}${flags.checkpointDir !== undefined ? ` --checkpoint-dir ${shellWord(flags.checkpointDir)}` : ''}`,
  );
  return {
    runtime,
    finalCheckpoint: () => checkpoints.finalCheckpoint(),
    lastCheckpoint: () => checkpoints.driver.state.lastCompleted?.epoch ?? null,
    // What the dashboard's checkpoint timeline reads.
    monitored: { driver: checkpoints.driver, intervalMs: ck.intervalMs || null, dir: ck.dir },
    // The endpoint's URL, for `sluice status`.
    announce: (url) => writeFileAtomic(info, JSON.stringify({ ...devInfo, url })),
    close: () => {
      process.off('SIGUSR2', serve);
      rmSync(info, { force: true });
      checkpoints.close();
    },
  };
}

/** What `sluice savepoint` ends with (`--json`: this object on stdout). */
export interface SavepointResult {
  target: 'embedded' | 'local-aws' | 'aws';
  job: string;
  label: string;
  epoch: number;
  bytes: number;
  /** Its directory (embedded), or its bucket and prefix. */
  location: string;
  /** The command that restores it, with the flags that found it. */
  restore: string;
}

/** Flags of `savepoint` that `restore` needs again to find the same savepoint. */
const FINDING_FLAGS = [
  ['target', '--target'],
  ['checkpointDir', '--checkpoint-dir'],
  ['table', '--table'],
  ['bucket', '--bucket'],
  ['stateMachine', '--state-machine'],
  ['queuePrefix', '--queue-prefix'],
] as const;

const shellWord = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

/** `sluice restore <job> [--target T] [--checkpoint-dir D] [--param k=v]... --from <label>`. */
export function restoreHint(jobPath: string, label: string, flags: { param?: readonly string[] } & Partial<Record<(typeof FINDING_FLAGS)[number][0], string>>): string {
  const words = ['sluice', 'restore', jobPath];
  for (const [key, flag] of FINDING_FLAGS) {
    const v = flags[key];
    if (v !== undefined && !(key === 'target' && v === 'embedded')) words.push(flag, v);
  }
  for (const p of flags.param ?? []) words.push('--param', p);
  words.push('--from', label);
  return words.map(shellWord).join(' ');
}

/** `sluice savepoint <job>`: ask the running `sluice dev` of this job for a savepoint and wait for it. */
export async function savepointCommand(jobPath: string, opts: { label?: string; checkpointDir?: string; param?: string[]; timeout?: string }, log: Log): Promise<SavepointResult> {
  const job = await loadJob(jobPath, parseParams(opts.param));
  const dir = opts.checkpointDir ?? defaultCheckpointDir(job.name);
  let pid: number;
  try {
    pid = (JSON.parse(readFileSync(join(dir, 'dev.json'), 'utf8')) as { pid: number }).pid;
    process.kill(pid, 0);
  } catch {
    throw new ConfigError('<job>', `a job running under \`sluice dev\` with checkpoints in ${dir}`, 'no running dev process (dev.json missing or its process gone)');
  }
  const label = opts.label ?? `sp-${new Date().toISOString().replace(/[:.]/g, '-')}`;
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(label)) throw new ConfigError('--label', 'letters, digits, ".", "_" or "-"', JSON.stringify(label));
  const requests = join(dir, 'savepoint-requests');
  mkdirSync(requests, { recursive: true });
  writeFileSync(join(requests, `${label}.json`), JSON.stringify({ requestedAt: Date.now() }));
  process.kill(pid, 'SIGUSR2');
  const deadline = Date.now() + (int('--timeout', opts.timeout, 1) ?? 120_000);
  const meta = join(dir, 'savepoints', label, 'meta.json');
  while (!existsSync(meta)) {
    const err = join(requests, `${label}.error`);
    if (existsSync(err)) throw new Error(`the dev process (pid ${pid}) could not write savepoint "${label}": ${readFileSync(err, 'utf8')}`);
    if (Date.now() > deadline) throw new ConfigError('--timeout', 'the savepoint to complete in time (is input arriving slowly? the savepoint waits for the epoch in flight)', `nothing after ${opts.timeout ?? 120_000} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const m = JSON.parse(readFileSync(meta, 'utf8')) as SavepointMeta;
  const location = resolve(dir, 'savepoints', label);
  log(`savepoint "${label}" of job "${m.job}": epoch ${m.epoch}, ${fmt.int(m.bytes)} bytes, in ${location}`);
  const restore = restoreHint(jobPath, label, opts);
  log(`restore: ${restore}`);
  return { target: 'embedded', job: m.job, label, epoch: m.epoch, bytes: m.bytes, location, restore };
}

export interface CheckpointListing {
  readonly checkpoints: (CheckpointStats & { latest: boolean })[];
  readonly savepoints: SavepointMeta[];
}

export async function listCheckpoints(job: string, dir: string): Promise<CheckpointListing> {
  const blobs = new DirectoryBlobStore(join(dir, 'blobs'));
  const pointer = (await new FilePointerStore(join(dir, 'pointers')).read<CommitPointer>(POINTER_NAME))?.value;
  const checkpoints: CheckpointListing['checkpoints'] = [];
  for (const key of await blobs.list(`${job}/checkpoints/`)) {
    const s = fromBytes<CheckpointStats>((await blobs.get(key))!);
    // Only checkpoints whose manifest is still there can be restored.
    if (await blobs.get(s.manifestKey)) checkpoints.push({ ...s, latest: s.epoch === pointer?.epoch });
  }
  const spDir = join(dir, 'savepoints');
  const savepoints = existsSync(spDir)
    ? readdirSync(spDir).flatMap((l) => {
        try {
          return [JSON.parse(readFileSync(join(spDir, l, 'meta.json'), 'utf8')) as SavepointMeta];
        } catch {
          return []; // Being written, or not a savepoint.
        }
      })
    : [];
  return { checkpoints, savepoints: savepoints.sort((a, b) => a.epoch - b.epoch) };
}

export async function checkpointsCommand(jobPath: string, opts: { checkpointDir?: string; param?: string[]; json?: boolean }, out: Log): Promise<void> {
  const job = await loadJob(jobPath, parseParams(opts.param));
  const dir = opts.checkpointDir ?? defaultCheckpointDir(job.name);
  const l = await listCheckpoints(job.name, dir);
  if (opts.json) {
    out(JSON.stringify(l, null, 2));
    return;
  }
  printCheckpointList(`checkpoints of job "${job.name}" in ${dir}`, l, out);
}

/** What `sluice checkpoints` prints, for every target (the AWS target adds a pending savepoint request). */
export interface PrintableCheckpoints {
  readonly checkpoints: readonly { epoch: number; completedAt: number; durationMs: number; bytes: number; restoreBytes: number; entities: number; latest?: boolean; savepoint?: string | null }[];
  readonly savepoints: readonly { label: string; epoch: number; createdAt: number; bytes: number }[];
  readonly pending?: { readonly label: string; readonly requestedAt: number } | null;
}

export function printCheckpointList(title: string, l: PrintableCheckpoints, out: Log): void {
  out(title);
  if (!l.checkpoints.length) out('  (none retained)');
  else {
    out(`  ${'epoch'.padStart(7)}  ${'completed (UTC)'.padEnd(24)} ${'duration'.padStart(9)} ${'size'.padStart(10)} ${'restore'.padStart(10)} ${'keys'.padStart(8)}`);
    for (const c of l.checkpoints) {
      out(
        `  ${String(c.epoch).padStart(7)}  ${new Date(c.completedAt).toISOString().padEnd(24)} ${`${c.durationMs} ms`.padStart(9)} ${bytes(c.bytes).padStart(10)} ${bytes(c.restoreBytes).padStart(10)} ${fmt.int(c.entities).padStart(8)}` +
          `${c.latest ? '  latest' : ''}${c.savepoint ? `  savepoint "${c.savepoint}"` : ''}`,
      );
    }
  }
  out('savepoints');
  if (!l.savepoints.length) out('  (none)');
  for (const s of l.savepoints) out(`  ${s.label.padEnd(28)} epoch ${s.epoch}, ${new Date(s.createdAt).toISOString()}, ${bytes(s.bytes)}`);
  if (l.pending) out(`  (pending: "${l.pending.label}", requested ${new Date(l.pending.requestedAt).toISOString()})`);
}

function bytes(n: number): string {
  return n < 1024 ? `${n} B` : n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1024 / 1024).toFixed(1)} MB`;
}

