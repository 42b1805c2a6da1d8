/**
 * Which jobs' sources may send several chunks per scheduling round (embedded.ts step()),
 * and how large those chunks are.
 */
import type { PhysicalPlan } from '../graph/compile.ts';

/**
 * Records per source chunk (envelope) by default, when the source has that many ready (a
 * replay, a backlog; a live source sends what it has). Each chunk is a batch and a commit
 * at the source's stage and an envelope downstream, about 15-30 µs of bookkeeping in the
 * Nexmark jobs. 1024, not 512 (bench/ab.ts, medians of 9 runs): Q8 196 -> 163 ms
 * and Q7 77 -> 68 ms of CPU per 1 M events, half the commits; p50 latency Q8 3.7 -> 3.8 ms,
 * Q7 0.36 -> 0.52 ms. 4096, not 1024 (medians of 8 runs): Q8 157 -> 132 ms,
 * Q7 49 -> 37 ms, Q5 864 -> 802 ms; 8192 gained no more on Q8 and Q7.
 */
export const SOURCE_BATCH = 4096;

/**
 * Records per source chunk by default in chunkedRounds' jobs: larger chunks, as the
 * round (one batch) is what decides batching there. A chunk costs ~1.5 µs of
 * bookkeeping (envelope, queue, partition, feed accounting): Q2 took 25 ms of CPU per
 * 1 M events in 512-record chunks, 22 ms in 2048-record ones.
 */
export const CHUNKED_SOURCE_BATCH = 2048;

/**
 * Records per scheduling round by default in chunkedRounds' jobs (chunks per round =
 * this / chunk size): a row waits for the end of its round to reach the sink, and rounds
 * of 4096 records cost no more CPU than rounds of one full batch (16 384) in 2048-record
 * chunks (Q2, bench/ab.ts: 22-23 ms per 1 M events either way) at a quarter of the wait.
 */
export const CHUNKED_ROUND_RECORDS = 4096;

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

/**
 * Records per source chunk and chunks per round. chunkedRounds' jobs: chunks of
 * CHUNKED_SOURCE_BATCH records unless `sourceBatchSize` is set, and by default as many
 * per round as make CHUNKED_ROUND_RECORDS (within one batch, `batchRecords`): one commit
 * and one sink delivery per round. Every other job: SOURCE_BATCH records (or
 * `sourceBatchSize`), one chunk per round.
 */
export function sourceChunking(
  plan: PhysicalPlan,
  options: { readonly sourceBatchSize?: number; readonly sourceChunksPerRound?: number },
  batchRecords: number,
): { readonly batchSize: number; readonly chunksPerRound: number } {
  const sources = plan.edges.filter((e) => e.from.kind === 'source').length;
  if (!chunkedRounds(plan, sources)) return { batchSize: options.sourceBatchSize ?? SOURCE_BATCH, chunksPerRound: 1 };
  const batchSize = options.sourceBatchSize ?? CHUNKED_SOURCE_BATCH;
  return { batchSize, chunksPerRound: options.sourceChunksPerRound ?? Math.max(1, Math.floor(Math.min(CHUNKED_ROUND_RECORDS, batchRecords) / batchSize)) };
}
