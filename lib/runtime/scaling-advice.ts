/**
 * Scaling advice in the manner of DS2 (Kalavri et al., OSDI 2018): a stage's true
 * processing rate is what its partitions process per second of useful time (busy in a
 * batch: user code, state, commit and delivery; not waiting for input or for a turn),
 * so back-pressure and idleness do not distort it. From a target rate at the sources, one
 * pass over the stages in topological order gives each stage the rate it must take in
 * (the target times the records it takes in per source record, as measured) and the
 * partitions that rate needs at its true rate per partition. Pure: the runtimes measure,
 * this decides.
 */

/** What a stage did over the measured stretch (its partitions together). */
export interface StageLoad {
  readonly name: string;
  readonly partitions: number;
  /** Records its batches took in. */
  readonly recordsIn: number;
  /** Milliseconds its partitions spent in batches, summed. */
  readonly busyMs: number;
}

export interface StageAdvice extends StageLoad {
  /** Records per second one partition processes while busy; null before it processed any. */
  readonly truePerPartition: number | null;
  /** Records per second it must take in at the target rate. */
  readonly requiredRate: number;
  /** Partitions that rate needs (1 to maxParallelism); null while the true rate is unknown. */
  readonly advisedPartitions: number | null;
}

export interface ScalingAdvice {
  /** Source records per second the advice is for. */
  readonly targetRate: number;
  /** Records the source stages processed over the measured stretch: what each stage's share is of. */
  readonly sourceRecords: number;
  readonly stages: readonly StageAdvice[];
}

/** Stages in topological order (the plan's); `sourceRecords`: records the sources took in over the same stretch. */
export function scalingAdvice(stages: readonly StageLoad[], sourceRecords: number, targetRate: number, maxParallelism: number): ScalingAdvice {
  return {
    targetRate,
    sourceRecords,
    stages: stages.map((s) => {
      const truePerPartition = s.recordsIn > 0 && s.busyMs > 0 ? s.recordsIn / (s.busyMs / 1000) : null;
      const requiredRate = sourceRecords > 0 ? targetRate * (s.recordsIn / sourceRecords) : 0;
      const advisedPartitions = truePerPartition === null ? null : Math.min(maxParallelism, Math.max(1, Math.ceil(requiredRate / truePerPartition)));
      return { ...s, truePerPartition, requiredRate, advisedPartitions };
    }),
  };
}
