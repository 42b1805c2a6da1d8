/**
 * What each stage of a local-AWS run did since the run started, in the shape the scaling
 * advice reads on AWS (lib/aws/stage-loads.ts MeasuredLoads): records in and out from the
 * handlers' metric tallies (what CloudWatch would sum), busy time from the emulated Lambda
 * durations, arrivals from the records the run ingested. A run with a checkpoint directory
 * keeps its latest reading in local-aws.loads.json there, as a deployment keeps its metrics
 * in CloudWatch, so `sluice status --target local-aws` can advise from another process.
 * Indicative: a local run's invocations share one process and its servers.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from '../../checkpoint/local-storage.ts';
import type { MeasuredLoads } from '../../aws/stage-loads.ts';
import type { PhysicalPlan } from '../../graph/compile.ts';
import { stageInputs } from '../../runtime/scaling-advice.ts';

/** The file in a checkpoint directory with the running (or last) run's loads. */
export const LOCAL_AWS_LOADS = 'local-aws.loads.json';

/** What a run counted so far, per stage (LocalAwsRuntime.report()). */
export interface LocalAwsCounts {
  readonly sourceRecords: number;
  readonly stages: readonly { readonly recordsIn: number; readonly recordsOut: number; readonly metrics: { readonly billedMs: number } }[];
}

/** A reading of a run's loads, as the file keeps it. */
export interface LocalAwsLoads extends MeasuredLoads {
  readonly runId: string;
  /** When it was read (the run's clock, ms since the epoch). */
  readonly at: number;
  /** The maximum concurrency each stage's event source allows; null: not set (Lambda's default, the groups bound it). */
  readonly maxConcurrency: number | null;
}

/** The loads `counts` give over a run of `spanMs`. Pure. */
export function measureLocalAwsLoads(plan: PhysicalPlan, counts: LocalAwsCounts, spanMs: number): MeasuredLoads {
  const inputs = stageInputs(plan);
  let fedIn = 0;
  const loads = plan.stages.map((s, i) => {
    const c = counts.stages[i];
    if (inputs[i].fedBySources) fedIn += c.recordsIn;
    return { name: s.name, partitions: s.parallelism, recordsIn: c.recordsIn, recordsOut: c.recordsOut, busyMs: c.metrics.billedMs, ...inputs[i] };
  });
  // What arrived: the records ingested, or what the source stages took in where a restore replayed more.
  const arriving = Math.max(counts.sourceRecords, fedIn);
  return { spanMs, loads, sourceRate: spanMs > 0 ? arriving / (spanMs / 1000) : 0 };
}

/** Keeps a run's latest loads in its checkpoint directory: every `everyMs` while it runs, and once more when it stops. */
export class LocalAwsLoadsFile {
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly dir: string,
    private readonly read: () => LocalAwsLoads,
    everyMs = 2_000,
  ) {
    this.timer = setInterval(() => this.write(), everyMs);
    this.timer.unref();
  }

  /** The last reading; no more after it. */
  close(): void {
    clearInterval(this.timer);
    this.write();
  }

  private write(): void {
    writeFileAtomic(join(this.dir, LOCAL_AWS_LOADS), JSON.stringify(this.read()));
  }
}

/** The loads the run `runId` kept in `dir`; undefined if it kept none (a run of another identity left the file: not this run's). */
export function readLocalAwsLoads(dir: string, runId: string): LocalAwsLoads | undefined {
  const file = join(dir, LOCAL_AWS_LOADS);
  if (!existsSync(file)) return undefined;
  const loads = JSON.parse(readFileSync(file, 'utf8')) as LocalAwsLoads;
  return loads.runId === runId ? loads : undefined;
}
