/**
 * `sluice status <job>`: the live numbers of the job's running `sluice dev`, read from the
 * GET /stats route of its ingestion endpoint (loopback by default), which dev.json in the
 * checkpoint directory names with the process id. `--json` prints that body as is
 * (DevStatus, status-shape.ts): the one the dashboard draws.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../errors.ts';
import { defaultCheckpointDir } from '../local/checkpointing.ts';
import { countersPhrase } from './dev-live-view.ts';
import type { DevStatus } from './status-shape.ts';
import { loadJob, parseParams } from './load-job.ts';
import { fmt } from './options.ts';
import { scalingAdvice } from '../runtime/scaling-advice.ts';


type Log = (line: string) => void;

export type { DevStatus };

export async function statusCommand(jobPath: string, opts: { checkpointDir?: string; param?: string[]; targetRate?: string }, out: Log): Promise<DevStatus> {
  const target = opts.targetRate === undefined ? undefined : Number(opts.targetRate);
  if (target !== undefined && !(Number.isFinite(target) && target > 0)) throw new ConfigError('--target-rate', 'a positive number of source records per second', JSON.stringify(opts.targetRate));
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
  if (target !== undefined) s = { ...s, scaling: scalingAdvice(s.scaling.stages, target, s.maxParallelism) };
  out(`job "${s.job}": sluice dev, pid ${s.pid}, up ${fmt.span(s.uptimeMs)}, endpoint ${s.url} (dashboard ${s.url}/)`);
  out(`  ${countersPhrase(s)}`);
  out(`  last checkpoint: ${s.lastCheckpoint === null ? 'none yet' : `epoch ${s.lastCheckpoint}`} (${dir})`);
  for (const o of s.operators) {
    out(`  operator ${o.name.padEnd(24)} ${fmt.int(o.recordsIn).padStart(12)} records in, ${fmt.int(o.inPerSecond)}/s${o.lateDropped ? `, ${fmt.int(o.lateDropped)} late dropped` : ''}`);
  }
  for (const st of s.stages) {
    const wm = st.endOfInput ? 'end of input' : st.watermark === null ? '-' : new Date(st.watermark).toISOString();
    out(`  stage    ${st.name.padEnd(24)} watermark ${wm}, queued ${fmt.int(st.queuedRecords)} (${Math.round(st.queueFill * 100)}% of a partition's queue)`);
  }
  out(`  scaling at ${fmt.int(s.scaling.targetRate)} source records/s (${target === undefined ? 'the current input; --target-rate for another' : '--target-rate'}), from each stage's true rate (records per second of busy time), each partition planned ${Math.round(s.scaling.utilization * 100)} % busy:`);
  for (const a of s.scaling.stages) {
    const rate = a.truePerPartition === null ? 'not measured yet' : `${fmt.int(a.truePerPartition)} records/s per partition`;
    const advice = a.advisedPartitions === null ? '' : `, needs ${fmt.int(a.requiredRate)}/s: ${a.advisedPartitions} partition${a.advisedPartitions === 1 ? '' : 's'}${a.advisedPartitions === a.partitions ? ' (as now)' : ` (now ${a.partitions}; sluice restore --from <savepoint> --parallelism)`}`;
    out(`  stage    ${a.name.padEnd(24)} ${rate}${advice}`);
  }
  if (s.cost.dollarsPerMillionEvents !== null) out(`  projected AWS cost: $${s.cost.dollarsPerMillionEvents.toPrecision(2)} per million events (prices as of ${s.cost.pricesAsOf}; see the dashboard for the assumptions)`);
  return s;
}
