/**
 * Which jobs' sources may send several chunks per scheduling round (embedded.ts step()).
 */
import type { PhysicalPlan } from '../graph/compile.ts';

/**
 * Chunks per round for chunkedRounds' jobs by default: 32 x 512 records, one full batch
 * (batchRecords 16 384), so one commit and one sink delivery per round. (8 per round
 * committed four times as often: Q2 took 56 ms of CPU per 1 M events instead of 49.)
 */
export const CHUNKS_PER_ROUND = 32;

/** Nodes without state, timers or keys: what they emit depends on each record alone. */
const STATELESS_KINDS: ReadonlySet<string> = new Set(['source', 'map', 'filter', 'flatMap', 'union', 'sink']);

/**
 * Whether the source may send several chunks per scheduling round: only for a job of one
 * source and one stage of one partition whose operators keep no state and set no timers
 * (a selection, a projection): its one partition then receives exactly the envelopes it
 * would receive with a round per chunk, in the same order, with barriers in the same
 * places, and nothing else interleaves with them; only how many of them one batch (one
 * commit, one sink delivery) takes changes. A job with other stages or partitions keeps a
 * round per chunk: there, the rounds decide how partitions' outputs interleave downstream.
 */
export function chunkedRounds(plan: PhysicalPlan, sources: number): boolean {
  if (sources !== 1 || plan.stages.length !== 1 || plan.stages[0].parallelism !== 1) return false;
  return plan.stages[0].nodes.every((id) => STATELESS_KINDS.has(plan.job.nodes[id].spec.kind));
}
