/**
 * `sluice status <job>`: the live numbers of the job's running `sluice dev`, read from the
 * GET /stats route of its ingestion endpoint (loopback by default), which dev.json in the
 * checkpoint directory names with the process id.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../errors.ts';
import { MAX_WATERMARK, MIN_WATERMARK } from '../api/types.ts';
import type { RuntimeStats } from '../local/embedded-options.ts';
import type { IngestRejections } from '../local/ingest-bounds.ts';
import { defaultCheckpointDir } from '../local/checkpointing.ts';
import { rejectedCounts } from './dev-summary.ts';
import { loadJob, parseParams } from './load-job.ts';
import { fmt } from './options.ts';

type Log = (line: string) => void;

/** GET /stats of `sluice dev`, and what `sluice status --json` prints. */
export interface DevStatus {
  job: string;
  pid: number;
  url: string;
  startedAt: number;
  uptimeMs: number;
  recordsIngested: number;
  queuedRecords: number;
  rejected: { invalid: number; overBounds: number; requestsRefused: number };
  deadLetters: number;
  deadLetterFile: string | null;
  /** Records windows and joins dropped as late, per operator. */
  lateDropped: Record<string, number>;
  /** Records each operator has taken in. */
  recordsIn: Record<string, number>;
  /** Per stage: its watermark (ms), or null before the first / after the last ("end of input"). */
  watermarks: Record<string, number | null>;
  /** The last completed checkpoint's epoch; null before the first. */
  lastCheckpoint: number | null;
}

export function devStatus(job: string, url: string, startedAt: number, s: RuntimeStats, endpoint: IngestRejections, lastCheckpoint: number | null, now = Date.now()): DevStatus {
  const watermarks: Record<string, number | null> = {};
  for (const [stage, wm] of Object.entries(s.watermarks)) watermarks[stage] = wm === MIN_WATERMARK || wm === MAX_WATERMARK ? null : wm;
  return {
    job,
    pid: process.pid,
    url,
    startedAt,
    uptimeMs: now - startedAt,
    recordsIngested: s.sourceRecords,
    queuedRecords: s.queuedRecords,
    rejected: rejectedCounts(s, endpoint),
    deadLetters: s.deadLetters,
    deadLetterFile: s.deadLetterFile ?? null,
    lateDropped: { ...s.lateDropped },
    recordsIn: s.recordsIn,
    watermarks,
    lastCheckpoint,
  };
}

export async function statusCommand(jobPath: string, opts: { checkpointDir?: string; param?: string[] }, out: Log): Promise<DevStatus> {
  const job = await loadJob(jobPath, parseParams(opts.param));
  const dir = opts.checkpointDir ?? defaultCheckpointDir(job.name);
  const none = (why: string) => new ConfigError('<job>', `a job running under \`sluice dev\` with its checkpoint directory in ${dir} (else --checkpoint-dir)`, why);
  let info: { pid: number; url?: string };
  try {
    info = JSON.parse(readFileSync(join(dir, 'dev.json'), 'utf8')) as { pid: number; url?: string };
  } catch {
    throw none(`no ${join(dir, 'dev.json')}: no dev process of job "${job.name}" there`);
  }
  try {
    process.kill(info.pid, 0);
  } catch {
    throw none(`dev.json names pid ${info.pid}, which is not running (it was killed without cleaning up)`);
  }
  if (!info.url) throw none(`dev (pid ${info.pid}) is still starting: no endpoint yet`);
  let s: DevStatus;
  try {
    const res = await fetch(`${info.url}/stats`);
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    s = (await res.json()) as DevStatus;
  } catch (e) {
    throw none(`GET ${info.url}/stats failed (${(e as Error).message})`);
  }
  out(`job "${s.job}": sluice dev, pid ${s.pid}, up ${fmt.span(s.uptimeMs)}, endpoint ${s.url}`);
  out(
    `  ${fmt.int(s.recordsIngested)} records ingested, ${fmt.int(s.queuedRecords)} queued, ` +
      `${fmt.int(s.rejected.invalid)} rejected as invalid, ${fmt.int(s.rejected.overBounds)} over the bounds (429), ${fmt.int(s.rejected.requestsRefused)} requests refused unread, ` +
      `${fmt.int(s.deadLetters)} dead letters${s.deadLetterFile && s.deadLetters ? ` (in ${s.deadLetterFile})` : ''}`,
  );
  out(`  last checkpoint: ${s.lastCheckpoint === null ? 'none yet' : `epoch ${s.lastCheckpoint}`} (${dir})`);
  for (const [name, n] of Object.entries(s.recordsIn)) out(`  operator ${name.padEnd(24)} ${fmt.int(n).padStart(12)} records in`);
  for (const [stage, wm] of Object.entries(s.watermarks)) out(`  stage    ${stage.padEnd(24)} watermark ${wm === null ? '-' : new Date(wm).toISOString()}`);
  return s;
}
