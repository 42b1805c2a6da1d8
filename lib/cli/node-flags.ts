/**
 * The V8 flags of the processes Sluice starts itself: the `sluice` command (bin/sluice.js's
 * shebang), `npm start` (package.json) and the benchmark's workers (bench/run.ts). A test
 * checks the launchers carry each of them.
 *
 * `--no-parallel-scavenge`: a young-generation collection on one thread. The embedded runtime
 * is one thread that keeps window state alive across collections, so its scavenges copy a
 * few MB each; on two threads a scavenge pauses the runtime for less time but costs 45-90 %
 * more CPU in all (Nexmark Q8, `--trace-gc-nvp`: 9.6 ms on the main thread plus 15 ms
 * on a helper, against 13-17 ms on one), and a Lambda function of up to 1 769 MB has one vCPU
 * or less to run the helper on. BENCHMARKS.md has the measurements. (Lambda's NODE_OPTIONS
 * does not accept this flag, so the functions run with Node's defaults.)
 *
 * `--max-semi-space-size=32`: a young generation of up to 2 x 32 MB instead of 2 x 16. Window
 * and join state lives for a window (seconds of event time, many young collections), so each
 * scavenge copies the same few MB of live state whatever the young generation's size: twice
 * the size, half the scavenges, half that copying. Nexmark Q8 (a window join), ratio to the
 * floor in four alternated runs each: 0.315-0.407 at Node's default, 0.412-0.491 at 32; larger
 * sizes gain more for Q8 (64: 0.55-0.59) but cost stateless queries (Q2 0.26-0.30 at 64,
 * 0.39-0.42 at 32, 0.45-0.48 at the default), and more memory. Session 17 in BENCHMARKS.md.
 * Lambda functions keep Node's default: their state is in DynamoDB, not in the heap.
 */
export const NODE_FLAGS: readonly string[] = ['--no-parallel-scavenge', '--max-semi-space-size=32'];
