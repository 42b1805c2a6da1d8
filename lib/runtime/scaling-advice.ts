/**
 * Scaling advice in the manner of DS2 (Kalavri et al., OSDI 2018): a stage's true
 * processing rate is what its partitions process per second of useful time (busy in a
 * batch: user code, state, commit and delivery; not waiting for input or for a turn),
 * so back-pressure and idleness do not distort it. From a target rate at the sources, one
 * pass over the stages in topological order gives each stage the rate it must take in and
 * the partitions that rate needs at its true rate per partition.
 *
 * The rate a stage must take in is propagated along the graph by selectivity (records a
 * stage sends downstream per record it takes in), never read off the records each stage
 * has taken in so far: under back-pressure a slow stage takes in less than its upstream
 * sent (the rest waits in its queue), and advice from that ratio would shrink with the
 * backlog. Pure: the runtimes measure, this decides.
 *
 * Each partition is planned at a fraction of its true rate (TARGET_UTILIZATION), as Flink's
 * autoscaler aims at a target utilization: a stage planned at exactly its capacity keeps
 * up on average but queues on every burst, and the per-batch costs that grow with the
 * partitions (more envelopes, more barriers to align) are not in a rate measured at fewer.
 */
import type { PhysicalPlan } from '../graph/compile.ts';

/** What a stage did over the measured stretch (its partitions together). */
export interface StageLoad {
  readonly name: string;
  readonly partitions: number;
  /** Records its batches took in. */
  readonly recordsIn: number;
  /** Milliseconds its partitions spent in batches, summed. */
  readonly busyMs: number;
  /**
   * Records its batches sent to the stages downstream (all its output edges), when
   * measured; without it a downstream stage's share falls back to what it took in.
   */
  readonly recordsOut?: number;
  /** Indices (in the same list) of the stages it takes input from. */
  readonly upstream: readonly number[];
  /** It reads a source (ingested records) directly. */
  readonly fedBySources: boolean;
}

export interface StageAdvice extends StageLoad {
  /** Records per second one partition processes while busy; null before it processed any. */
  readonly truePerPartition: number | null;
  /** Records per second it must take in at the target rate. */
  readonly requiredRate: number;
  /** Partitions that rate needs at the planned utilization (1 to maxParallelism); null while the true rate is unknown. */
  readonly advisedPartitions: number | null;
}

/** The share of its true rate each partition is planned at. */
export const TARGET_UTILIZATION = 0.8;

export interface ScalingAdvice {
  /** Source records per second the advice is for. */
  readonly targetRate: number;
  /** The share of its true rate each partition is planned at. */
  readonly utilization: number;
  readonly stages: readonly StageAdvice[];
}

/**
 * `stages` in topological order (the plan's). A stage fed by the sources takes its share
 * of the target (by the records the source-fed stages took in); a stage downstream takes
 * each upstream stage's required rate times that stage's selectivity, split among the
 * upstream's consumers by what they took in from it (exact for one consumer, the
 * usual case).
 */
export function scalingAdvice(stages: readonly StageLoad[], targetRate: number, maxParallelism: number, utilization = TARGET_UTILIZATION): ScalingAdvice {
  if (!(utilization > 0 && utilization <= 1)) throw new RangeError(`utilization: expected a share in (0, 1], received ${utilization}`);
  const consumers = stages.map(() => [] as number[]);
  stages.forEach((s, i) => s.upstream.forEach((u) => consumers[u].push(i)));
  const sourceIn = stages.reduce((n, s) => n + (s.fedBySources ? s.recordsIn : 0), 0);
  const sourceCount = stages.filter((s) => s.fedBySources).length;
  const required: number[] = [];
  const advice = stages.map((s, i): StageAdvice => {
    let rate = 0;
    if (s.fedBySources) rate += targetRate * (sourceIn > 0 ? s.recordsIn / sourceIn : 1 / sourceCount);
    for (const u of s.upstream) rate += required[u] * shareOf(stages, consumers[u], u, i);
    required[i] = rate;
    const truePerPartition = s.recordsIn > 0 && s.busyMs > 0 ? s.recordsIn / (s.busyMs / 1000) : null;
    const advisedPartitions = truePerPartition === null ? null : Math.min(maxParallelism, Math.max(1, Math.ceil(rate / (truePerPartition * utilization))));
    return { ...s, truePerPartition, requiredRate: rate, advisedPartitions };
  });
  return { targetRate, utilization, stages: advice };
}

/** Records stage `to` takes in per record stage `from` takes in. */
function shareOf(stages: readonly StageLoad[], consumers: readonly number[], from: number, to: number): number {
  const up = stages[from];
  if (up.recordsIn === 0) return 0;
  if (up.recordsOut === undefined) return stages[to].recordsIn / up.recordsIn;
  const taken = consumers.reduce((n, c) => n + stages[c].recordsIn, 0);
  const split = taken > 0 ? stages[to].recordsIn / taken : 1 / consumers.length;
  return (up.recordsOut / up.recordsIn) * split;
}

/** The stage graph of a plan as scalingAdvice reads it: per stage, its upstream stages and whether a source feeds it. */
export function stageInputs(plan: PhysicalPlan): { upstream: number[]; fedBySources: boolean }[] {
  const inputs = plan.stages.map(() => ({ upstream: [] as number[], fedBySources: false }));
  for (const e of plan.edges) {
    const to = inputs[e.toStage];
    if (e.from.kind === 'source') to.fedBySources = true;
    else if (!to.upstream.includes(e.from.stage)) to.upstream.push(e.from.stage);
  }
  return inputs;
}
