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

export function printAwsScaling(s: AwsScaling, jobPath: string, log: (line: string) => void): void {
  const span = fmt.span(s.spanMs);
  log(`  scaling at ${fmt.int(s.targetRate)} source records/s (${s.targetRate === s.sourceRate ? `what arrived over the last ${span}; --target-rate for another` : `--target-rate; ${fmt.int(s.sourceRate)}/s arrived over the last ${span}`}), from each stage's true rate (records per second of Lambda duration), each partition planned ${Math.round(TARGET_UTILIZATION * 100)} % busy:`);
  for (const a of s.stages) {
    const rate = a.truePerPartition === null ? `no batches in the last ${span}` : `${fmt.int(a.truePerPartition)} records/s per partition`;
    const now = `${a.partitions} partition${a.partitions === 1 ? '' : 's'}, maximum concurrency ${a.maxConcurrency ?? 'not set'}`;
    let advice = '';
    if (a.advisedPartitions !== null && s.targetRate > 0) {
      const as = a.advisedPartitions === a.partitions ? 'as now' : a.rescalable ? `sluice rescale ${jobPath} --stage ${a.stage} --partitions ${a.advisedPartitions} --max-concurrency ${a.advisedMaxConcurrency} --target aws` : 'a source stage keeps its partitions';
      advice = `; needs ${fmt.int(a.requiredRate)}/s: ${a.advisedPartitions} partition${a.advisedPartitions === 1 ? '' : 's'}, maximum concurrency ${a.advisedMaxConcurrency} (${as})`;
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
