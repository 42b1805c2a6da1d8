/**
 * The V8 flags of the repository's own long runs: `npm start` (package.json) and the
 * benchmark's workers (bench/run.ts). A test checks `npm start` carries each of them. The
 * `sluice` command users install runs with Node's defaults (a plain `#!/usr/bin/env node`).
 *
 * `--no-parallel-scavenge`: a young-generation collection on one thread. The embedded runtime
 * is one thread that keeps window state alive across collections, so its scavenges copy a
 * few MB each; on two threads a scavenge pauses the runtime for less time but costs 45-90 %
 * more CPU in all (Nexmark Q8, `--trace-gc-nvp`: 9.6 ms on the main thread plus 15 ms
 * on a helper, against 13-17 ms on one), and a Lambda function of up to 1 769 MB has one vCPU
 * or less to run the helper on. (Lambda's NODE_OPTIONS
 * does not accept this flag, so the functions run with Node's defaults.)
 *
 * `--max-semi-space-size=32`: a young generation of up to 2 x 32 MB instead of 2 x 16. Window
 * and join state lives for a window (seconds of event time, many young collections), so each
 * scavenge copies the same few MB of live state whatever the young generation's size: twice
 * the size, half the scavenges, half that copying. Nexmark, ratio to the hand-written floor,
 * seven alternated runs each: Q8 (a window join) 0.330-0.417 at Node's default, 0.439-0.484
 * at 32; Q5 0.378-0.437 -> 0.438-0.501. A stateless query's runtime does not change (Q2
 * about 50 M events per core either way), but its floor reads faster in the bench (88-120
 * -> 122-175 M per core; 140-150 outside it under either size), so Q2's ratio reads lower
 * (0.391-0.461 -> 0.241-0.422). 64 MB gained Q8 more (0.55-0.59, two
 * runs) for ~40 MB more peak memory and Q2 lower still. Lambda
 * functions keep Node's default: their state is in DynamoDB, not in the heap.
 */
export const NODE_FLAGS: readonly string[] = ['--no-parallel-scavenge', '--max-semi-space-size=32'];
