/**
 * Scaling advice for a deployed job (`sluice status --target aws`): each stage's true rate
 * from CloudWatch over a recent span (lib/aws/stage-loads.ts), the partitions a target
 * source rate needs (lib/runtime/scaling-advice.ts, as on the embedded runtime), and the
 * event source mapping's maximum concurrency to go with them, since Lambda runs at most
 * min(partitions, maximum concurrency) batches of a stage at once. `--apply` turns the
 * advice into steps: a rescale for each stage after the sources whose partitions differ,
 * a new maximum concurrency where only that falls short.
 */
import { MAX_CONCURRENCY, MIN_CONCURRENCY } from '../aws/parallelism-env.ts';
import { type MeasuredLoads, readStageLoads, type StageConsumer, stageConsumers, type StageMetricsRef } from '../aws/stage-loads.ts';
import type { PhysicalPlan } from '../graph/compile.ts';
import { scalingAdvice, type StageAdvice, stageInputs, TARGET_UTILIZATION } from '../runtime/scaling-advice.ts';
import { type AwsTargetFlags, type Resolved, withTarget } from './checkpoints-aws.ts';
import { AwsFunctionConfigPort } from '../aws/restore/deployed-parallelism.ts';
import { ConfigError } from '../errors.ts';
import { fmt } from './options.ts';
import { readLocalAwsLoads } from '../testing/local-aws/stage-loads.ts';

export interface AwsStageScaling extends StageAdvice {
  readonly stage: number;
  /** The lowest maximum concurrency of the stage's event source mappings; null: none set. */
  readonly maxConcurrency: number | null;
  /** The maximum concurrency the advised partitions need (at least Lambda's minimum of 2); null while the true rate is unknown. */
  readonly advisedMaxConcurrency: number | null;
  /** A stage after the sources (`sluice rescale` moves its partitions; a source stage keeps them). */
  readonly rescalable: boolean;
}

/** What `sluice status --target aws --json` carries as `scaling`. */
export interface AwsScaling {
  /** The span of metrics the rates are measured over, ms. */
  readonly spanMs: number;
  /** Source records per second that arrived over the span. */
  readonly sourceRate: number;
  /** The rate advised for (--target-rate, else sourceRate). */
  readonly targetRate: number;
  readonly stages: readonly AwsStageScaling[];
}

/** One change `--apply` makes. */
export type ScalingStep =
  | { readonly kind: 'rescale'; readonly stage: number; readonly name: string; readonly partitions: number; readonly maxConcurrency: number }
  | { readonly kind: 'concurrency'; readonly stage: number; readonly name: string; readonly maxConcurrency: number };

/** The advice from measured loads and each stage's consumers. Pure. */
export function awsScaling(plan: PhysicalPlan, measured: MeasuredLoads, consumers: readonly (readonly StageConsumer[])[], targetRate?: number): AwsScaling {
  const target = targetRate ?? measured.sourceRate;
  const advice = scalingAdvice(measured.loads, target, plan.job.maxParallelism);
  const inputs = stageInputs(plan);
  return {
    spanMs: measured.spanMs,
    sourceRate: measured.sourceRate,
    targetRate: target,
    stages: advice.stages.map((a, i) => {
      const limits = consumers[i].map((c) => c.maxConcurrency);
      const set = limits.length > 0 && limits.every((m) => m !== undefined) ? Math.min(...(limits as number[])) : null;
      return {
        ...a,
        stage: plan.stages[i].id,
        maxConcurrency: set,
        advisedMaxConcurrency: a.advisedPartitions === null ? null : Math.min(MAX_CONCURRENCY, Math.max(MIN_CONCURRENCY, a.advisedPartitions)),
        rescalable: !inputs[i].fedBySources,
      };
    }),
  };
}

/** The changes that carry out the advice: stages whose partitions differ (after the sources), and maximum concurrencies below what the advice needs. */
export function scalingSteps(s: AwsScaling): ScalingStep[] {
  return s.stages.flatMap((a): ScalingStep[] => {
    if (a.advisedPartitions === null || a.advisedMaxConcurrency === null || s.targetRate <= 0) return [];
    if (a.rescalable && a.advisedPartitions !== a.partitions) return [{ kind: 'rescale', stage: a.stage, name: a.name, partitions: a.advisedPartitions, maxConcurrency: a.advisedMaxConcurrency }];
    // More concurrency than partitions runs nothing more: a partition takes one batch at a time.
    const needed = Math.max(MIN_CONCURRENCY, Math.min(a.advisedMaxConcurrency, a.partitions));
    return a.maxConcurrency !== null && a.maxConcurrency < needed ? [{ kind: 'concurrency', stage: a.stage, name: a.name, maxConcurrency: needed }] : [];
  });
}

/** Measure a deployed job's stages over the `spanMs` before `now` and advise. */
export async function readAwsScaling(r: Resolved, spanMs: number, now: number, targetRate?: number): Promise<AwsScaling> {
  const lambda = await r.clients.lambda();
  const queues = new Map((r.deployed?.queues ?? []).map((q) => [q.stage, q.arn]));
  const consumers = await Promise.all(r.plan.stages.map((s) => (queues.has(s.id) ? stageConsumers(lambda, queues.get(s.id)!) : Promise.resolve([]))));
  const inputs = stageInputs(r.plan);
  const refs: StageMetricsRef[] = r.plan.stages.map((s, i) => ({
    stage: s.id,
    name: s.name,
    partitions: s.parallelism,
    functions: [...new Set(consumers[i].map((c) => c.functionName))],
    ...inputs[i],
  }));
  const measured = await readStageLoads(await r.clients.cloudwatch(), r.plan.job.name, refs, spanMs, now);
  return awsScaling(r.plan, measured, consumers, targetRate);
}

/**
 * The advice from what a local-AWS run recorded in its checkpoint directory (the running
 * run's loads so far, else the last run's); null when it recorded none, or recorded them
 * at partitions other than the run's now (a rescale since).
 */
export function readLocalAwsScaling(r: Resolved, targetRate?: number): AwsScaling | null {
  if (!r.local) return null;
  const loads = readLocalAwsLoads(r.local.dir, r.local.identity.runId);
  if (!loads || loads.loads.some((l, i) => l.partitions !== r.plan.stages[i]?.parallelism)) return null;
  const consumers = r.plan.stages.map(() => (loads.maxConcurrency === null ? [] : [{ functionName: `${r.plan.job.name}-stage`, maxConcurrency: loads.maxConcurrency }]));
  return awsScaling(r.plan, loads, consumers, targetRate);
}

/** Where the loads came from: a deployment's CloudWatch metrics, or a local-AWS run's own tallies (its checkpoint directory's file). */
export type ScalingSource = { readonly target: 'aws' } | { readonly target: 'local-aws'; readonly checkpointDir: string; readonly running: boolean };

export function printAwsScaling(s: AwsScaling, jobPath: string, log: (line: string) => void, source: ScalingSource = { target: 'aws' }): void {
  const span = fmt.span(s.spanMs);
  const over = source.target === 'aws' ? `the last ${span}` : `the run's ${span}${source.running ? ' so far' : ', until it stopped'}`;
  const busy = source.target === 'aws' ? 'Lambda duration' : "the handlers' emulated duration";
  log(`  scaling at ${fmt.int(s.targetRate)} source records/s (${s.targetRate === s.sourceRate ? `what arrived over ${over}; --target-rate for another` : `--target-rate; ${fmt.int(s.sourceRate)}/s arrived over ${over}`}), from each stage's true rate (records per second of ${busy}), each partition planned ${Math.round(TARGET_UTILIZATION * 100)} % busy:`);
  for (const a of s.stages) {
    const rate = a.truePerPartition === null ? `no batches in ${over}` : `${fmt.int(a.truePerPartition)} records/s per partition`;
    const partitions = `${a.partitions} partition${a.partitions === 1 ? '' : 's'}`;
    const now = source.target === 'aws' ? `${partitions}, maximum concurrency ${a.maxConcurrency ?? 'not set'}` : partitions;
    let advice = '';
    if (a.advisedPartitions !== null && s.targetRate > 0) {
      const rescale =
        source.target === 'aws'
          ? `sluice rescale ${jobPath} --stage ${a.stage} --partitions ${a.advisedPartitions} --max-concurrency ${a.advisedMaxConcurrency} --target aws`
          : `${source.running ? 'stop the run, then ' : ''}sluice rescale ${jobPath} --stage ${a.stage} --partitions ${a.advisedPartitions} --target local-aws --checkpoint-dir ${source.checkpointDir}`;
      const as = a.advisedPartitions === a.partitions ? 'as now' : a.rescalable ? rescale : 'a source stage keeps its partitions';
      const needs = `${a.advisedPartitions} partition${a.advisedPartitions === 1 ? '' : 's'}${source.target === 'aws' ? `, maximum concurrency ${a.advisedMaxConcurrency}` : ''}`;
      advice = `; needs ${fmt.int(a.requiredRate)}/s: ${needs} (${as})`;
    }
    log(`  stage ${a.stage} ${a.name.padEnd(24)} ${rate} (now ${now})${advice}`);
  }
}

/**
 * Carry out `steps` one after another: each rescale as `sluice rescale` does it (a savepoint,
 * the job stopped around the restore at the new partitions), each concurrency on the
 * stage's event source mappings. Returns what was done.
 */
export async function applyScalingSteps(jobPath: string, flags: AwsTargetFlags, steps: readonly ScalingStep[], log: (line: string) => void): Promise<ScalingStep[]> {
  const done: ScalingStep[] = [];
  for (const step of steps) {
    if (step.kind === 'rescale') {
      const { rescaleCommand } = await import('./rescale.ts');
      await rescaleCommand(jobPath, { ...flags, stage: String(step.stage), partitions: String(step.partitions), maxConcurrency: String(step.maxConcurrency) }, log);
    } else {
      await withTarget(jobPath, flags, async (r) => {
        const queue = r.deployed?.queues.find((q) => q.stage === step.stage);
        if (!queue) throw new ConfigError('--apply', `the queue of stage ${step.stage} in the deployment`, 'none found');
        await new AwsFunctionConfigPort(await r.clients.lambda()).setMaxConcurrency(queue.arn, step.maxConcurrency);
      });
      log(`stage ${step.stage} "${step.name}": maximum concurrency ${step.maxConcurrency}`);
    }
    done.push(step);
  }
  return done;
}
